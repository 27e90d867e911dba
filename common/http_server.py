"""Serving an aiohttp application on a port: the controller's HTTP API and the broker's
metrics and health endpoint (``broker.server.http_endpoint``) both start theirs here."""

from __future__ import annotations

import ssl

from aiohttp import web


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
