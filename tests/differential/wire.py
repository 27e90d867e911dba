"""One raw Kafka protocol connection, requests built from plain dicts with kio's schemas.

The differential sessions send the same request to Apache Kafka and to Sluice at the same
version, so a request is written as ``call("fetch", {...})`` and built here for whatever
version the two brokers have in common (see :func:`common_versions`): keys a version does not
have are dropped (e.g. ``topic_id`` below Fetch v13), missing ones take kio's defaults.
"""

from __future__ import annotations

import dataclasses
import datetime
import io
import socket
import struct
import types
import typing
import uuid
from collections.abc import Mapping
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.schema.index import api_key_map
from kio.serial import entity_reader, entity_writer

IO_TIMEOUT_S = 15.0  # above every timeout a session sends (10 s)
API_KEYS: dict[str, int] = {name: key for key, name in api_key_map.items()}


def kio_versions(api_key: int) -> range:
    """The request versions kio has schemas for."""
    from kio.schema.index import schema_name_map

    versions = sorted(schema_name_map[api_key_map[api_key]])
    return range(versions[0], versions[-1] + 1)


def build(cls: type, data: Mapping[str, Any]) -> Any:
    """An instance of kio dataclass ``cls`` from a plain dict (nested dicts/lists allowed)."""
    hints = typing.get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _convert(hints[f.name], data[f.name])
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            kwargs[f.name] = _zero(hints[f.name])
    return cls(**kwargs)


def _convert(hint: Any, value: Any) -> Any:
    if value is None:
        return None
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        inner = [a for a in typing.get_args(hint) if a is not type(None)]
        return _convert(inner[0], value)
    if origin is tuple:
        (item, _ellipsis) = typing.get_args(hint)
        return tuple(_convert(item, v) for v in value)
    if dataclasses.is_dataclass(hint):
        return build(hint, value)
    if isinstance(hint, type) and issubclass(hint, datetime.timedelta):
        return hint.parse(datetime.timedelta(milliseconds=value))
    if hint is uuid.UUID and isinstance(value, str):
        return uuid.UUID(value)
    return value


def _zero(hint: Any) -> Any:
    """A neutral value for a required field the session did not name."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return None
    if origin is tuple:
        return ()
    if dataclasses.is_dataclass(hint):
        return build(hint, {})
    if isinstance(hint, type):
        if issubclass(hint, datetime.timedelta):
            return hint.parse(datetime.timedelta(0))
        if issubclass(hint, bool):
            return False
        if issubclass(hint, int):
            return 0
        if issubclass(hint, str):
            return ""
        if issubclass(hint, bytes):
            return b""
        if hint is uuid.UUID:
            return uuid.UUID(int=0)
    raise TypeError(f"no neutral value for {hint!r}")


class Connection:
    def __init__(self, host: str, port: int, client_id: str = "sluice-differential") -> None:
        self.sock = socket.create_connection((host, port), timeout=IO_TIMEOUT_S)
        self.client_id = client_id
        self.correlation_id = 0

    def close(self) -> None:
        self.sock.close()

    def login(self, user: str, password: str) -> None:
        """SASL/PLAIN (SaslHandshake v1, then SaslAuthenticate v2), as Kafka's clients log in."""
        handshake = self.send(request_for("sasl_handshake", 1, {"mechanism": "PLAIN"}))
        if int(handshake.error_code) != 0:
            raise ConnectionError(f"SASL handshake refused: {handshake.error_code!r}")
        token = b"\0" + user.encode() + b"\0" + password.encode()
        answer = self.send(request_for("sasl_authenticate", 2, {"auth_bytes": token}))
        if int(answer.error_code) != 0:
            raise ConnectionError(f"{user} not authenticated: {answer.error_message}")

    def send(self, request: Any, expect_response: bool = True) -> Any:
        """Write one request; read and decode its response (None when none is expected)."""
        self.correlation_id += 1
        header_cls = request.__header_schema__
        header_fields = {
            "request_api_key": request.__api_key__,
            "request_api_version": request.__version__,
            "correlation_id": self.correlation_id,
        }
        if any(f.name == "client_id" for f in dataclasses.fields(header_cls)):
            header_fields["client_id"] = self.client_id
        buf = io.BytesIO()
        entity_writer(header_cls)(buf, header_cls(**header_fields))
        entity_writer(type(request))(buf, request)
        payload = buf.getvalue()
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)
        if not expect_response:
            return None
        frame = self._read_frame()
        response_cls = load_response_schema(request.__api_key__, request.__version__)
        header, used = entity_reader(response_cls.__header_schema__)(frame, 0)
        if header.correlation_id != self.correlation_id:
            raise AssertionError(
                f"correlation id {header.correlation_id}, expected {self.correlation_id}"
            )
        if request.__api_key__ == DESCRIBE_TRANSACTIONS:
            return read_describe_transactions(frame, used)
        response, _ = entity_reader(response_cls)(frame, used)
        return response

    def _read_exact(self, n: int) -> bytes:
        out = bytearray()
        while len(out) < n:
            chunk = self.sock.recv(n - len(out))
            if not chunk:
                raise ConnectionError("connection closed by the broker")
            out += chunk
        return bytes(out)

    def _read_frame(self) -> bytes:
        (size,) = struct.unpack(">i", self._read_exact(4))
        return self._read_exact(size)


DESCRIBE_TRANSACTIONS = 65


class _Reader:
    """The flexible-version wire primitives, for the one response kio cannot read."""

    def __init__(self, data: bytes, pos: int) -> None:
        self.data, self.pos = data, pos

    def fixed(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return int(value)

    def uvarint(self) -> int:
        shift = value = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def string(self) -> str:
        n = self.uvarint() - 1
        text = self.data[self.pos : self.pos + n].decode()
        self.pos += n
        return text

    def array(self, item: typing.Callable[[], Any]) -> list[Any]:
        return [item() for _ in range(self.uvarint() - 1)]

    def tags(self) -> None:
        for _ in range(self.uvarint()):
            self.uvarint()
            self.pos += self.uvarint()


def read_describe_transactions(frame: bytes, pos: int) -> dict[str, Any]:
    """DescribeTransactions v0's answer as a plain dict. kio refuses a negative
    transaction_start_time, which both brokers send (-1) for a transaction not begun."""
    from kio.schema.errors import ErrorCode

    r = _Reader(frame, pos)

    def topic() -> dict[str, Any]:
        out = {"topic": r.string(), "partitions": r.array(lambda: r.fixed(">i"))}
        r.tags()
        return out

    def state() -> dict[str, Any]:
        error = ErrorCode(r.fixed(">h"))
        out = {
            "error_code": f"{error.name}({error.value})",
            "transactional_id": r.string(),
            "transaction_state": r.string(),
            "transaction_timeout": r.fixed(">i"),
            "transaction_start_time": r.fixed(">q"),
            "producer_id": r.fixed(">q"),
            "producer_epoch": r.fixed(">h"),
            "topics": r.array(topic),
        }
        r.tags()
        return out

    throttle = r.fixed(">i")
    return {"throttle_time": throttle, "transaction_states": r.array(state)}


def request_for(api: str, version: int, body: Mapping[str, Any]) -> Any:
    return build(load_request_schema(API_KEYS[api], version), body)


def api_versions(conn: Connection) -> dict[int, tuple[int, int]]:
    """The broker's ApiVersions table (v3, which every 4.x broker and Sluice serve)."""
    resp = conn.send(
        request_for(
            "api_versions",
            3,
            {"client_software_name": "sluice-differential", "client_software_version": "1"},
        )
    )
    return {int(a.api_key): (int(a.min_version), int(a.max_version)) for a in resp.api_keys}
