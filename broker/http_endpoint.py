"""The broker's HTTP side door: Prometheus metrics, liveness and readiness.

``/metrics``  the broker's registry in Prometheus text format;
``/healthz``  200 while the process and its event loop run (liveness);
``/readyz``   200 when the broker accepts Kafka requests and reaches its coordinator, else 503
              with the reason (readiness: load balancers and orchestrators stop sending to it).
"""

from __future__ import annotations

import logging
import ssl
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

log = logging.getLogger(__name__)

# None when ready, else why not.
ReadinessCheck = Callable[[], str | None]


async def serve(
    app: web.Application, host: str, port: int, ssl_context: ssl.SSLContext | None = None
) -> tuple[web.AppRunner, int]:
    """Serve ``app`` on host:port (0: a free port), over TLS with ``ssl_context``; returns
    the runner and the bound port. The shutdown wait is bounded: a stop must not hang on
    open requests (long polls)."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=2.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port, ssl_context=ssl_context)
    await site.start()
    server = site._server  # aiohttp keeps the bound socket here; port 0 needs it
    if server is not None and server.sockets:  # type: ignore[attr-defined]
        port = server.sockets[0].getsockname()[1]  # type: ignore[attr-defined]
    return runner, port


class HttpEndpoint:
    def __init__(
        self, host: str, port: int, registry: CollectorRegistry, readiness: ReadinessCheck
    ) -> None:
        self._host = host
        self._port = port
        self._registry = registry
        self._readiness = readiness
        self._runner: web.AppRunner | None = None
        self.port = port

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/readyz", self._readyz)
        self._runner, self.port = await serve(app, self._host, self._port)
        log.info("metrics and health on http://%s:%d", self._host, self.port)

    async def close(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _metrics(self, _request: web.Request) -> web.Response:
        body = generate_latest(self._registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def _healthz(self, _request: web.Request) -> web.Response:
        return web.Response(text="ok\n")

    async def _readyz(self, _request: web.Request) -> web.Response:
        reason = self._readiness()
        if reason is None:
            return web.Response(text="ready\n")
        return web.Response(status=503, text=f"not ready: {reason}\n")
