"""A recording proxy: the sessions reach each broker through it, and what is compared is what
it saw come back on the wire, decoded on its own (not by the session's client).

One listening port per broker of the cluster behind it. Each client connection gets its own
upstream connection; frames are forwarded as they are, both ways, except the answers that
name brokers (Metadata, FindCoordinator, DescribeCluster, Produce's and Fetch's
node endpoints), re-encoded with the proxy's
address of each broker, so a client (a stock one too) that follows them stays behind the
proxy. Every answer is recorded under (the proxy's serial of the connection, its correlation id),
with its API and version, as the client then reads it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import socket
import struct
import threading
from collections.abc import Callable, Mapping
from typing import Any

from kio.index import load_response_schema
from kio.serial import entity_reader, entity_writer

from .compare import plain
from .wire import DESCRIBE_TRANSACTIONS, read_describe_transactions

# Produce and Fetch too: their NOT_LEADER answers name the new leader (KIP-951 node_endpoints).
PRODUCE, FETCH, METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER = 0, 1, 3, 10, 60
NAMING_BROKERS = {PRODUCE, FETCH, METADATA, FIND_COORDINATOR, DESCRIBE_CLUSTER}


@dataclasses.dataclass(frozen=True)
class Recorded:
    api_key: int
    version: int
    response: Any  # the plain tree (compare.plain) of the answer as forwarded


def decode_response(frame: bytes, api_key: int, version: int) -> tuple[Any, Any, int]:
    """(header, body, where the body starts) of a response frame (the size prefix removed)."""
    schema = load_response_schema(api_key, version)
    header, used = entity_reader(schema.__header_schema__)(frame, 0)
    if api_key == DESCRIBE_TRANSACTIONS:
        return header, read_describe_transactions(frame, used), used
    body, _ = entity_reader(schema)(frame, used)
    return header, body, used


class RecordingProxy:
    """Listens on 127.0.0.1, one port per upstream broker (node id -> address)."""

    def __init__(self, upstream: Mapping[int, tuple[str, int]]) -> None:
        self.upstream = dict(upstream)
        self.listeners: dict[int, socket.socket] = {}
        for node in self.upstream:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(("127.0.0.1", 0))
            sock.listen(16)
            self.listeners[node] = sock
        # Brokers the upstream answers name, by (host, port): the proxy's port for each.
        self.by_address = {addr: node for node, addr in self.upstream.items()}
        # By (connection serial, correlation id): a client port comes back with a new
        # connection (and librdkafka's correlation ids restart at 1 on each), so answers are
        # keyed by the proxy's own serial of the connection; ``_by_port`` has a port's latest.
        self.records: dict[tuple[int, int], Recorded] = {}
        self._by_port: dict[int, int] = {}
        self._serial = itertools.count(1)
        self.errors: list[str] = []
        self._lock = threading.Lock()
        self._closed = False
        self._sockets: list[socket.socket] = []
        for node, sock in self.listeners.items():
            threading.Thread(target=self._accept, args=(node, sock), daemon=True).start()

    def address(self, node: int) -> tuple[str, int]:
        return "127.0.0.1", int(self.listeners[node].getsockname()[1])

    def close(self) -> None:
        self._closed = True
        for sock in [*self.listeners.values(), *self._sockets]:
            with contextlib.suppress(OSError):
                sock.close()

    def keys(self) -> set[tuple[int, int]]:
        with self._lock:
            return set(self.records)

    def since(self, before: set[tuple[int, int]]) -> list[tuple[tuple[int, int], Recorded]]:
        """The answers recorded since ``before`` (:meth:`keys`), in the order forwarded."""
        with self._lock:
            return [(k, r) for k, r in self.records.items() if k not in before]

    def response(self, client_port: int, correlation_id: int) -> Recorded | None:
        with self._lock:
            serial = self._by_port.get(client_port)
            return None if serial is None else self.records.get((serial, correlation_id))

    # --- plumbing ---

    def _accept(self, node: int, listener: socket.socket) -> None:
        while not self._closed:
            try:
                client, peer = listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.upstream[node], timeout=30)
            except OSError:
                client.close()  # the broker is down: the client sees it refused
                continue
            for s in (client, upstream):
                s.settimeout(None)
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            self._sockets += [client, upstream]
            pending: dict[int, tuple[int, int]] = {}
            with self._lock:
                serial = next(self._serial)
                self._by_port[int(peer[1])] = serial
            threading.Thread(
                target=self._pump, args=(client, upstream, self._request(pending)), daemon=True
            ).start()
            threading.Thread(
                target=self._pump,
                args=(upstream, client, self._response(pending, serial)),
                daemon=True,
            ).start()

    def _pump(
        self, src: socket.socket, dst: socket.socket, on_frame: Callable[[bytes], bytes]
    ) -> None:
        try:
            while True:
                head = _read(src, 4)
                (size,) = struct.unpack(">i", head)
                frame = on_frame(_read(src, size))
                dst.sendall(struct.pack(">i", len(frame)) + frame)
        except (OSError, ConnectionError):
            pass
        except Exception as exc:  # a frame it could not read: recorded, the link closed
            self.errors.append(f"{type(exc).__name__}: {exc}")
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    def _request(self, pending: dict[int, tuple[int, int]]) -> Callable[[bytes], bytes]:
        def on_request(frame: bytes) -> bytes:
            api_key, version, correlation = struct.unpack_from(">hhi", frame, 0)
            pending[correlation] = (api_key, version)
            return frame

        return on_request

    def _response(
        self, pending: dict[int, tuple[int, int]], serial: int
    ) -> Callable[[bytes], bytes]:
        def on_response(frame: bytes) -> bytes:
            (correlation,) = struct.unpack_from(">i", frame, 0)
            api_key, version = pending.pop(correlation)
            try:
                header, body, _ = decode_response(frame, api_key, version)
            except Exception as exc:  # forwarded as it came; the record says why
                answer: Any = f"(the proxy could not decode it: {type(exc).__name__}: {exc})"
            else:
                if api_key in NAMING_BROKERS and not isinstance(body, dict):
                    rewritten = self._rewrite(body)
                    if rewritten is not body:
                        body = rewritten
                        frame = _encode(api_key, version, header, body)
                answer = plain(body)
            with self._lock:
                self.records[(serial, correlation)] = Recorded(api_key, version, answer)
            return frame

        return on_response

    def _rewrite(self, entity: Any) -> Any:
        """``entity`` with every (host, port) of an upstream broker replaced by the proxy's."""
        if isinstance(entity, tuple):
            items = tuple(self._rewrite(e) for e in entity)
            return entity if all(a is b for a, b in zip(items, entity, strict=True)) else items
        if not dataclasses.is_dataclass(entity) or isinstance(entity, type):
            return entity
        changes: dict[str, Any] = {}
        for f in dataclasses.fields(entity):
            value = getattr(entity, f.name)
            new = self._rewrite(value)
            if new is not value:
                changes[f.name] = new
        names = {f.name for f in dataclasses.fields(entity)}
        if {"host", "port"} <= names:
            node = self.by_address.get((entity.host, int(entity.port)))
            if node is not None:
                host, port = self.address(node)
                changes["host"], changes["port"] = host, type(entity.port)(port)
        return dataclasses.replace(entity, **changes) if changes else entity


def _encode(api_key: int, version: int, header: Any, body: Any) -> bytes:
    schema = load_response_schema(api_key, version)
    out = io.BytesIO()
    entity_writer(schema.__header_schema__)(out, header)
    entity_writer(schema)(out, body)
    return out.getvalue()


def _read(sock: socket.socket, n: int) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise ConnectionError("closed")
        out += chunk
    return bytes(out)
