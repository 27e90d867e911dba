"""ProduceResponse, encoded by hand.

Every produce request gets one, so it is the most frequent answer a broker writes.
Through kio it costs ~70 µs (dict → entity via protocol.build, then kio's Python
writer walking the schema), several times the rest of the request's handling when a
producer sends small batches (16 KiB, the Java client's default, is ~60 requests per
MiB). The layout is small and fixed per version, so it is written directly here; the
unit tests hold it byte for byte to kio's encoding of every version served (3-12).
Tagged fields (current_leader, node_endpoints) are never set by this broker and so
are not written, as Kafka omits tagged fields at their defaults.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from functools import lru_cache

from .answer_writer import array_length, string
from .codec import EncodedResponse

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_PARTITION = {
    # index, error_code, base_offset [, log_append_time_ms [, log_start_offset]]
    0: struct.Struct(">ihq"),
    2: struct.Struct(">ihqq"),
    5: struct.Struct(">ihqqq"),
}
FLEXIBLE_VERSION = 9


class PartitionAnswer:
    """One partition of a produce answer."""

    __slots__ = (
        "base_offset",
        "error_code",
        "error_message",
        "index",
        "log_append_time",
        "log_start_offset",
        "record_errors",
    )

    def __init__(
        self,
        index: int,
        error_code: int,
        base_offset: int = -1,
        log_append_time: int = -1,
        log_start_offset: int = -1,
        error_message: str | None = None,
        record_errors: Sequence[tuple[int, str | None]] = (),
    ) -> None:
        self.index = index
        self.error_code = error_code
        self.base_offset = base_offset
        self.log_append_time = log_append_time
        self.log_start_offset = log_start_offset
        self.error_message = error_message
        # (batch_index, batch_index_error_message): the records that made the batch fail
        self.record_errors = record_errors


def encode_produce_response(
    version: int, topics: Sequence[tuple[str, Sequence[PartitionAnswer]]], throttle_ms: int = 0
) -> EncodedResponse:
    """The response body of ProduceResponse ``version`` (0-12; v12 is v11's layout)."""
    flexible = version >= FLEXIBLE_VERSION
    fields = _PARTITION[5 if version >= 5 else 2 if version >= 2 else 0]
    out = bytearray()
    array_length(out, len(topics), flexible)
    for name, partitions in topics:
        out += _name(name, flexible)
        array_length(out, len(partitions), flexible)
        for p in partitions:
            if version >= 5:
                out += fields.pack(
                    p.index, p.error_code, p.base_offset, p.log_append_time, p.log_start_offset
                )
            elif version >= 2:
                out += fields.pack(p.index, p.error_code, p.base_offset, p.log_append_time)
            else:
                out += fields.pack(p.index, p.error_code, p.base_offset)
            if version >= 8:
                if p.error_message is None and not p.record_errors:
                    # record_errors: none; error_message: null; flexible versions: no
                    # tagged fields.
                    out += _NO_ERRORS_FLEXIBLE if flexible else _NO_ERRORS
                    continue
                array_length(out, len(p.record_errors), flexible)
                for batch_index, batch_index_message in p.record_errors:
                    out += _I32.pack(batch_index)
                    string(out, batch_index_message, flexible)
                    if flexible:
                        out.append(0)  # no tagged fields
                string(out, p.error_message, flexible)
            if flexible:
                out.append(0)  # no tagged fields
        if flexible:
            out.append(0)
    if version >= 1:
        out += _I32.pack(throttle_ms)
    if flexible:
        out.append(0)
    return EncodedResponse(bytes(out), flexible_header=flexible, throttle_ms=throttle_ms)


_NO_ERRORS = _I32.pack(0) + _I16.pack(-1)
_NO_ERRORS_FLEXIBLE = b"\x01\x00\x00"


@lru_cache(maxsize=4096)
def _name(name: str, flexible: bool) -> bytes:
    """A topic name as the answer spells it (the same few names, over and over)."""
    out = bytearray()
    string(out, name, flexible)
    return bytes(out)
