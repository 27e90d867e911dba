"""The broker's HTTP side door: Prometheus metrics, liveness and readiness.

``/metrics``  the broker's registry in Prometheus text format;
``/healthz``  200 while the process and its event loop run (liveness);
``/readyz``   200 when the broker accepts Kafka requests and reaches its coordinator, else 503
              with the reason (readiness: load balancers and orchestrators stop sending to it).
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from common.http_server import serve

log = logging.getLogger(__name__)

# None when ready, else why not.
ReadinessCheck = Callable[[], str | None]


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
