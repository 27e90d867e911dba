"""The recording proxy without a real broker: a stand-in that answers Metadata naming itself
and a second broker; through the proxy the client is told the proxy's ports instead, and the
proxy recorded the answer as the client read it."""

from __future__ import annotations

import io
import socket
import struct
import threading

from kio.index import load_response_schema
from kio.serial import entity_writer

from .compare import plain
from .proxy import RecordingProxy
from .wire import Connection, build, request_for


def _serve(listener: socket.socket, brokers: list[tuple[int, int]]) -> None:
    """Answer one Metadata v12 request on ``listener`` with ``brokers`` ((node id, port) on
    127.0.0.1)."""

    def serve() -> None:
        conn, _ = listener.accept()
        with conn:
            (size,) = struct.unpack(">i", conn.recv(4, socket.MSG_WAITALL))
            frame = conn.recv(size, socket.MSG_WAITALL)
            (correlation,) = struct.unpack_from(">i", frame, 4)
            schema = load_response_schema(3, 12)
            body = build(
                schema,
                {
                    "brokers": [
                        {"node_id": n, "host": "127.0.0.1", "port": p, "rack": None}
                        for n, p in brokers
                    ],
                    "cluster_id": "c",
                    "controller_id": 1,
                    "topics": [],
                },
            )
            out = io.BytesIO()
            entity_writer(schema.__header_schema__)(
                out, schema.__header_schema__(correlation_id=correlation)
            )
            entity_writer(schema)(out, body)
            data = out.getvalue()
            conn.sendall(struct.pack(">i", len(data)) + data)

    threading.Thread(target=serve, daemon=True).start()


def test_metadata_names_the_proxy_and_is_recorded_as_forwarded() -> None:
    broker1 = socket.create_server(("127.0.0.1", 0))
    broker2 = socket.create_server(("127.0.0.1", 0))  # named, never reached
    port1, port2 = broker1.getsockname()[1], broker2.getsockname()[1]
    _serve(broker1, [(1, port1), (2, port2)])
    proxy = RecordingProxy({1: ("127.0.0.1", port1), 2: ("127.0.0.1", port2)})
    try:
        conn = Connection(*proxy.address(1))
        answer = plain(
            conn.send(
                request_for(
                    "metadata",
                    12,
                    {"topics": [], "allow_auto_topic_creation": False},
                )
            )
        )
        seen = {b["node_id"]: b["port"] for b in answer["brokers"]}
        assert seen == {1: proxy.address(1)[1], 2: proxy.address(2)[1]}
        recorded = proxy.response(conn.sock.getsockname()[1], conn.correlation_id)
        assert recorded is not None and (recorded.api_key, recorded.version) == (3, 12)
        assert recorded.response == answer
        conn.close()
    finally:
        proxy.close()
        broker1.close()
        broker2.close()
