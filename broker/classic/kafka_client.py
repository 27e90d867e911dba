"""A minimal Kafka protocol client for broker-to-broker requests (followers' Fetch and
OffsetForLeaderEpoch to their leader): one connection, requests answered in order.

Requests are kio entities; only flexible versions are sent (request header v2). Record
bytes in an answer stay one memoryview slice of the frame (no per-record work).
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
from typing import Any

from kio.serial import entity_reader, entity_writer

from protocol.codec import response_schema

_SIZE = struct.Struct(">i")
_HEADER = struct.Struct(">hhih")
MAX_FRAME = 256 * 1024 * 1024


class ConnectionLost(Exception):
    pass


class _Collector(list):  # type: ignore[type-arg]
    write = list.append


class KafkaConnection:
    def __init__(self, host: str, port: int, client_id: str) -> None:
        self.host, self.port, self._client_id = host, port, client_id.encode()
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None
        self._correlation = 0
        self._lock = asyncio.Lock()

    async def _connect(self, timeout: float) -> None:
        self._reader, self._writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port), timeout
        )

    async def request(self, request: Any, timeout: float) -> Any:
        """Send one request and wait for its answer; ConnectionLost on any I/O problem
        (the connection is then closed and reopened by the next request)."""
        async with self._lock:
            try:
                if self._writer is None:
                    await self._connect(timeout)
                assert self._reader is not None and self._writer is not None
                self._correlation = (self._correlation + 1) & 0x7FFFFFFF
                body = _Collector()
                entity_writer(type(request))(body, request)
                header = (
                    _HEADER.pack(
                        int(request.__api_key__),
                        int(request.__version__),
                        self._correlation,
                        len(self._client_id),
                    )
                    + self._client_id
                    + b"\x00"
                )
                payload = header + b"".join(bytes(p) for p in body)
                self._writer.write(_SIZE.pack(len(payload)) + payload)
                await self._writer.drain()
                raw = await asyncio.wait_for(self._reader.readexactly(4), timeout)
                (size,) = _SIZE.unpack(raw)
                if not 4 <= size <= MAX_FRAME:
                    raise ConnectionLost(f"bad frame size {size}")
                frame = memoryview(await asyncio.wait_for(self._reader.readexactly(size), timeout))
                (correlation,) = _SIZE.unpack_from(frame, 0)
                if correlation != self._correlation:
                    raise ConnectionLost("answer to another request")
                schema = response_schema(int(request.__api_key__), int(request.__version__))
                # Flexible response header: correlation id, then (empty) tagged fields.
                value, _ = entity_reader(schema)(frame, 5)
                return value
            except (OSError, TimeoutError, asyncio.IncompleteReadError, ValueError) as exc:
                self.close()
                raise ConnectionLost(f"{self.host}:{self.port}: {exc!r}") from exc
            except ConnectionLost:
                self.close()
                raise

    def close(self) -> None:
        if self._writer is not None:
            with contextlib.suppress(Exception):
                self._writer.close()
        self._reader = self._writer = None
