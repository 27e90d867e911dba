"""A TCP fault proxy (asyncio) in front of PostgreSQL and the object store.

Pass-through until told otherwise. Faults, set from any thread:

- ``latency``: every chunk is delayed this long, in both directions (a slow disk or link);
- ``reset``: every open connection is reset (RST) and new ones are reset at once;
- ``http_status`` (S3 only): every open connection is closed, and each new connection's
  first request is answered with this status (503 SlowDown or 500 InternalError, as S3
  answers them) and ``Connection: close``.

The proxies run on one event loop in a thread of the harness's process.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import threading
from concurrent.futures import Future
from typing import Any

_S3_ERRORS = {
    503: ("Service Unavailable", "SlowDown", "Please reduce your request rate."),
    500: ("Internal Server Error", "InternalError", "We encountered an internal error."),
}


class FaultProxy:
    def __init__(
        self, name: str, upstream_host: str, upstream_port: int, http: bool, bind: str
    ) -> None:
        self.name = name
        self.bind = bind
        self.upstream = (upstream_host, upstream_port)
        self.http = http
        self.port = 0
        self.latency = 0.0
        self.reset = False
        self.http_status: int | None = None
        self.connections: set[tuple[asyncio.StreamWriter, asyncio.StreamWriter | None]] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.server: asyncio.Server | None = None
        self.injected = 0  # connections reset or answered with an error

    # -------------------------------------------------------------- control (any thread)

    def set(self, *, latency: float = 0.0, reset: bool = False, http_status: int | None = None):
        self.latency, self.reset, self.http_status = latency, reset, http_status
        if (reset or http_status) and self.loop is not None:
            self.loop.call_soon_threadsafe(self._drop_all)

    def clear(self) -> None:
        self.set()

    # -------------------------------------------------------------- loop side

    async def start(self) -> None:
        self.loop = asyncio.get_running_loop()
        self.server = await asyncio.start_server(self._serve, self.bind, 0)
        self.port = self.server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
        self._drop_all()

    def _drop_all(self) -> None:
        for client, upstream in list(self.connections):
            _reset(client)
            if upstream is not None:
                _reset(upstream)
            self.injected += 1
        self.connections.clear()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.reset:
            self.injected += 1
            _reset(writer)
            return
        if self.http and self.http_status:
            await self._answer_error(reader, writer, self.http_status)
            return
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            _reset(writer)  # upstream down: the client sees a refused/reset connection
            return
        entry = (writer, up_writer)
        self.connections.add(entry)
        try:
            await asyncio.gather(self._pipe(reader, up_writer), self._pipe(up_reader, writer))
        finally:
            self.connections.discard(entry)
            for w in (writer, up_writer):
                with contextlib.suppress(Exception):
                    w.close()

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                if self.latency:
                    await asyncio.sleep(self.latency)
                writer.write(data)
                await writer.drain()
        except (OSError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(Exception):
                if writer.can_write_eof():
                    writer.write_eof()

    async def _answer_error(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, status: int
    ) -> None:
        """Read one request (head and Content-Length body) and answer it with an S3 error."""
        try:
            head = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
            length, expects_continue = 0, False
            for line in head.split(b"\r\n")[1:]:
                name, _, value = line.partition(b":")
                name = name.strip().lower()
                if name == b"content-length":
                    length = int(value.strip() or 0)
                elif name == b"expect" and value.strip().lower() == b"100-continue":
                    expects_continue = True
            # botocore's PUTs carry "Expect: 100-continue" and hold the body back until the
            # server says go on: S3 answers the error at once instead (RFC 9110 10.1.1).
            # Waiting here for a body that never comes made every "503" a 10 s stall.
            if length and not expects_continue:
                await asyncio.wait_for(reader.readexactly(length), 10)
            reason, code, message = _S3_ERRORS.get(status, _S3_ERRORS[500])
            body = (
                '<?xml version="1.0" encoding="UTF-8"?>\n'
                f"<Error><Code>{code}</Code><Message>{message}</Message>"
                "<RequestId>nemesis</RequestId></Error>"
            ).encode()
            writer.write(
                f"HTTP/1.1 {status} {reason}\r\nContent-Type: application/xml\r\n"
                f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
                + body
            )
            await writer.drain()
            self.injected += 1
        except (TimeoutError, OSError, ValueError, asyncio.IncompleteReadError):
            pass
        finally:
            with contextlib.suppress(Exception):
                writer.close()


def _reset(writer: asyncio.StreamWriter) -> None:
    """Close with RST (SO_LINGER 0), as a crashed peer or a middlebox would."""
    sock = writer.get_extra_info("socket")
    with contextlib.suppress(OSError, AttributeError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(Exception):
        writer.transport.abort()


class ProxyThread:
    """The event loop the proxies run on, in a daemon thread."""

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None
        self.proxies: list[FaultProxy] = []

    def start(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="proxies", daemon=True)
        self.thread.start()

    def _call(self, coro: Any) -> Any:
        assert self.loop is not None
        future: Future[Any] = asyncio.run_coroutine_threadsafe(coro, self.loop)
        return future.result(10)

    def add(
        self, name: str, host: str, port: int, http: bool = False, bind: str = "127.0.0.1"
    ) -> FaultProxy:
        proxy = FaultProxy(name, host, port, http, bind)
        self._call(proxy.start())
        self.proxies.append(proxy)
        return proxy

    def stop(self) -> None:
        if self.loop is None:
            return
        for proxy in self.proxies:
            with contextlib.suppress(Exception):
                self._call(proxy.stop())
        self.loop.call_soon_threadsafe(self.loop.stop)
        if self.thread is not None:
            self.thread.join(5)
        self.loop = None
