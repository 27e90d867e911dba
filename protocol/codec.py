"""Request decoding and response encoding around kio's entity codecs.

Decoding works on a memoryview of the frame. Encoding collects the pieces kio's
writers produce in a list and hands record data through untouched (see
:class:`RecordChunks`), so fetched bytes are never joined into one buffer in Python.
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any, NamedTuple

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader, entity_writer
from kio.serial.errors import UnexpectedNull

from .request_check import InvalidRequestBytes, check_body, skip_tagged_fields
from .tolerant_reader import read_tolerant

_HEADER_FIXED = struct.Struct(">hhih")  # api key, api version, correlation id, client id length
_RESPONSE_HEADER = struct.Struct(">ii")  # frame size, correlation id
API_VERSIONS_KEY = 18


class MalformedRequest(Exception):
    """The frame cannot be decoded; the connection that sent it is closed."""


class RequestHeader(NamedTuple):
    # A NamedTuple: made for every request, cheaper than a frozen dataclass.
    api_key: int
    api_version: int
    correlation_id: int
    client_id: str | None


class RecordChunks:
    """Record bytes as a sequence of buffers, written by kio as if it were one value.

    kio's writers only call ``len()`` on a records value and then ``write`` it; the
    encoder below recognises this type and splices its parts into the output.
    """

    __slots__ = ("parts", "size")

    def __init__(self, parts: list[bytes | memoryview], size: int) -> None:
        self.parts = parts
        self.size = size

    def __len__(self) -> int:
        return self.size


class EncodedResponse:
    """A response body already encoded (hot paths that skip kio's writer): one buffer, or
    buffers in order (record bytes passed through uncopied) of ``size`` bytes in all."""

    __slots__ = ("body", "flexible_header", "size", "throttle_ms")

    def __init__(
        self,
        body: bytes | list[bytes | memoryview],
        flexible_header: bool,
        throttle_ms: int = 0,
        size: int = -1,
    ) -> None:
        self.body = body
        self.flexible_header = flexible_header
        # The throttle time encoded in the body, for the connection to honour (KIP-219).
        self.throttle_ms = throttle_ms
        self.size = len(body) if type(body) is bytes else size


class _Collector(list):  # type: ignore[type-arg]
    write = list.append


@cache
def request_schema(api_key: int, api_version: int) -> type | None:
    try:
        return load_request_schema(api_key, api_version)
    except Exception:
        return None


@cache
def response_schema(api_key: int, api_version: int) -> type:
    return load_response_schema(api_key, api_version)


def parse_request_header(frame: memoryview) -> tuple[RequestHeader, int]:
    """Header fields and the offset where the body starts.

    Parsed by hand rather than with kio so that an ApiVersions request of a version
    we do not know (its header version unknown too) can still be answered.
    """
    if len(frame) < _HEADER_FIXED.size:
        raise MalformedRequest(f"request header truncated ({len(frame)} bytes)")
    api_key, api_version, correlation_id, client_id_len = _HEADER_FIXED.unpack_from(frame, 0)
    pos = _HEADER_FIXED.size
    client_id = None
    if client_id_len >= 0:
        if pos + client_id_len > len(frame):
            raise MalformedRequest("client id runs past the end of the frame")
        client_id = bytes(frame[pos : pos + client_id_len]).decode("utf-8", "replace")
        pos += client_id_len
    header = RequestHeader(api_key, api_version, correlation_id, client_id)
    if _flexible(api_key, api_version):
        if pos < len(frame) and frame[pos] == 0:
            pos += 1  # no tagged fields: what every client sends
        else:
            pos = _skip_tagged_fields(frame, pos)
    return header, pos


@cache
def _flexible(api_key: int, api_version: int) -> bool:
    schema = request_schema(api_key, api_version)
    return schema is not None and bool(schema.__flexible__)


def _skip_tagged_fields(frame: memoryview, pos: int) -> int:
    try:
        return skip_tagged_fields(frame, pos)
    except InvalidRequestBytes as exc:
        raise MalformedRequest(f"bad tagged fields in request header: {exc}") from None


def decode_body(schema: type, frame: memoryview, offset: int) -> Any:
    # kio's native reader trusts every length it reads (and aborts the process when one
    # is too large to allocate): the body must pass the bounds check first.
    try:
        check_body(schema, frame, offset)
    except InvalidRequestBytes as exc:
        raise MalformedRequest(f"invalid {schema.__name__} v{schema.__version__}: {exc}") from None
    try:
        value, _size = entity_reader(schema)(frame, offset)
        return value
    except (KeyError, UnexpectedNull):
        # kio refuses unknown tagged fields (the protocol says skip them) and a null
        # nullable tagged string (Fetch's cluster_id); nulls where the schema forbids
        # them were refused by the check above.
        try:
            value, _size = read_tolerant(schema, frame, offset)
            return value
        except Exception as exc:
            raise MalformedRequest(f"cannot decode {schema.__name__}: {exc!r}") from exc
    except Exception as exc:
        raise MalformedRequest(f"cannot decode {schema.__name__}: {exc!r}") from exc


# Pieces smaller than this are joined before writing: many tiny writes cost more
# than one small copy. Record data is always passed through as it is.
_COALESCE_LIMIT = 16 * 1024


def encode_response(correlation_id: int, response: Any) -> list[bytes | memoryview]:
    """The whole response frame (size prefix included) as buffers for writelines."""
    if type(response) is EncodedResponse:
        head = _RESPONSE_HEADER.pack(
            response.size + (5 if response.flexible_header else 4), correlation_id
        )
        if response.flexible_header:
            head += b"\x00"
        body = response.body
        if type(body) is bytes:
            return [head + body]
        first = body[0]
        if len(first) < _COALESCE_LIMIT and type(first) is bytes:
            return [head + first, *body[1:]]
        return [head, *body]
    schema = type(response)
    collector = _Collector()
    entity_writer(schema)(collector, response)
    flexible_header = schema.__header_schema__.__flexible__
    out: list[bytes | memoryview] = []
    small: list[Any] = []
    size = 5 if flexible_header else 4
    for piece in collector:
        if type(piece) is RecordChunks:
            if small:
                out.append(b"".join(small))
                small = []
            out.extend(piece.parts)
            size += piece.size
        else:
            small.append(piece)
            size += len(piece)
    if small:
        out.append(b"".join(small))
    head = _RESPONSE_HEADER.pack(size, correlation_id)
    if flexible_header:
        head += b"\x00"  # no tagged fields in the response header
    if out and len(out[0]) < _COALESCE_LIMIT and type(out[0]) is bytes:
        out[0] = head + out[0]
    else:
        out.insert(0, head)
    return out
