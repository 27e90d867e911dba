"""A minimal blocking Kafka client for timing single requests (the tail-fetch latency).

Stock clients pipeline and prefetch, so they cannot say how long one Fetch took; this
sends one request, waits for its whole answer and times exactly that.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer

from protocol.build import build

_SIZE = struct.Struct(">i")


class _Collector(list):  # type: ignore[type-arg]
    write = list.append


class WireClient:
    def __init__(self, host: str, port: int, client_id: str = "sluice-bench") -> None:
        self._sock = socket.create_connection((host, port), timeout=30)
        self._sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._client_id = client_id
        self._correlation = 0
        self._buf = bytearray(4 * 1024 * 1024)

    def close(self) -> None:
        self._sock.close()

    @property
    def local_port(self) -> int:
        """This end's port: how the broker tells this connection from others."""
        return int(self._sock.getsockname()[1])

    def __enter__(self) -> WireClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, api_key: int, version: int, body: dict[str, Any]) -> Any:
        """Send one request built from ``body`` and return the decoded response."""
        schema = load_request_schema(api_key, version)
        self._correlation += 1
        header = build(
            schema.__header_schema__,
            {
                "request_api_key": api_key,
                "request_api_version": version,
                "correlation_id": self._correlation,
                "client_id": self._client_id,
            },
        )
        out = _Collector()
        entity_writer(type(header))(out, header)
        entity_writer(schema)(out, build(schema, body))
        payload = b"".join(out)
        self._sock.sendall(_SIZE.pack(len(payload)) + payload)
        frame = self._recv_frame()
        response_schema = load_response_schema(api_key, version)
        (correlation,) = _SIZE.unpack_from(frame, 0)
        if correlation != self._correlation:
            raise RuntimeError(f"correlation id {correlation}, expected {self._correlation}")
        offset = 5 if response_schema.__header_schema__.__flexible__ else 4
        value, _ = entity_reader(response_schema)(frame, offset)
        return value

    def _recv_frame(self) -> memoryview:
        head = self._recv_exact(4)
        (size,) = _SIZE.unpack(head)
        return self._recv_exact(size)

    def _recv_exact(self, n: int) -> memoryview:
        if len(self._buf) < n:
            self._buf = bytearray(n)
        view = memoryview(self._buf)[:n]
        got = 0
        while got < n:
            k = self._sock.recv_into(view[got:])
            if not k:
                raise ConnectionError(f"closed after {got}/{n} bytes")
            got += k
        return view.toreadonly()


def fetch_body(
    topic: str,
    partition: int,
    offset: int,
    partition_max_bytes: int,
    min_bytes: int = 1,
    max_bytes: int = 52_428_800,
) -> dict[str, object]:
    """A consumer's Fetch (v12+) of one partition by topic name, answered at once."""
    return {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": min_bytes,
        "max_bytes": max_bytes,
        "isolation_level": 0,
        "session_id": 0,
        "session_epoch": -1,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": partition,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": partition_max_bytes,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
