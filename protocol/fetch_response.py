"""FetchResponse, encoded by hand.

A consumer's Fetch names every partition it reads (hundreds to thousands on a full fetch),
and through kio each one's answer cost ~25 µs: its dict made into kio's entity by
``protocol.build``, then kio's Python writer walking the schema field by field, 60% of a
1,000-partition fetch that found nothing new. The layout is fixed per version, so it is
written directly here, from the same dicts the handler describes the answer with; the
unit tests hold it byte for byte to kio's encoding of every version served (4-16).

Record bytes are never copied: ``RecordChunks`` (slices of cached blocks) and large record
buffers go out as parts of their own, as ``protocol.codec.encode_response`` does for kio's
output. Tagged fields (diverging_epoch, current_leader, snapshot_id, node_endpoints) are
never set by this broker and so are not written, as Kafka omits tagged fields at their
defaults.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from typing import Any

from .answer_writer import array_length, string, uvarint
from .codec import EncodedResponse, RecordChunks

FLEXIBLE_VERSION = 12
TOPIC_IDS_VERSION = 13
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_TOP = struct.Struct(">ihi")  # throttle_time_ms, error_code, session_id (v7+)
# partition_index, error_code, high_watermark, last_stable_offset, log_start_offset (v5+)
_PARTITION_V4 = struct.Struct(">ihqq")
_PARTITION_V5 = struct.Struct(">ihqqq")
_ABORTED = struct.Struct(">qq")  # producer_id, first_offset
# Record buffers up to this size are copied into the answer's bytes; larger ones are
# sent as they are (one small copy costs less than one more buffer to write).
_INLINE_RECORDS = 4096
_ZERO_UUID = bytes(16)


def encode_fetch_response(
    version: int,
    topics: Sequence[tuple[Any, Sequence[Mapping[str, Any]]]],
    throttle_ms: int = 0,
    error_code: int = 0,
    session_id: int = 0,
) -> EncodedResponse:
    """The body of FetchResponse ``version`` (4-16) from ``(topic key, partition entries)``:
    the topic's name below v13, its id (a UUID) from v13; each entry as the handler
    describes a partition (``partition_index``, ``error_code``, ``high_watermark``,
    ``last_stable_offset``, ``log_start_offset``, ``aborted_transactions`` (None: null),
    ``preferred_read_replica``, ``records``), other keys ignored."""
    flexible = version >= FLEXIBLE_VERSION
    by_id = version >= TOPIC_IDS_VERSION
    partition_fields = _PARTITION_V5 if version >= 5 else _PARTITION_V4
    parts: list[bytes | memoryview] = []
    size = 0
    out = bytearray()
    if version >= 7:
        out += _TOP.pack(throttle_ms, error_code, session_id)
    else:
        out += _I32.pack(throttle_ms)
    array_length(out, len(topics), flexible)
    for key, entries in topics:
        if by_id:
            out += _ZERO_UUID if key is None else key.bytes
        else:
            string(out, key, flexible)
        array_length(out, len(entries), flexible)
        for e in entries:
            if version >= 5:
                out += partition_fields.pack(
                    e["partition_index"],
                    e["error_code"],
                    e["high_watermark"],
                    e.get("last_stable_offset", -1),
                    e.get("log_start_offset", -1),
                )
            else:
                out += partition_fields.pack(
                    e["partition_index"],
                    e["error_code"],
                    e["high_watermark"],
                    e.get("last_stable_offset", -1),
                )
            aborted = e.get("aborted_transactions")
            if aborted is None:
                out += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                array_length(out, len(aborted), flexible)
                for a in aborted:
                    out += _ABORTED.pack(a["producer_id"], a["first_offset"])
                    if flexible:
                        out.append(0)  # no tagged fields
            if version >= 11:
                out += _I32.pack(e.get("preferred_read_replica", -1))
            records = e.get("records")
            if records is None:
                out += b"\x00" if flexible else b"\xff\xff\xff\xff"
            else:
                n = len(records)
                if flexible:
                    uvarint(out, n + 1)
                else:
                    out += _I32.pack(n)
                if n:
                    if type(records) is RecordChunks:
                        size += len(out) + n
                        parts.append(bytes(out))
                        parts.extend(records.parts)
                        out = bytearray()
                    elif n <= _INLINE_RECORDS:
                        out += records
                    else:
                        size += len(out) + n
                        parts.append(bytes(out))
                        parts.append(records)
                        out = bytearray()
            if flexible:
                out.append(0)  # no tagged fields
        if flexible:
            out.append(0)
    if flexible:
        out.append(0)  # no tagged fields (node_endpoints: none)
    if not parts:
        return EncodedResponse(bytes(out), flexible, throttle_ms)
    parts.append(bytes(out))
    return EncodedResponse(parts, flexible, throttle_ms, size + len(out))
