"""Reading record timestamps inside one batch, for ListOffsets by timestamp.

The produce and fetch paths never look inside batches. Offset lookups by time are
rare (a consumer resetting its position), so there it is worth decompressing one
batch to answer at record precision, as Kafka does, instead of at batch precision.
"""

from __future__ import annotations

import struct

from .compression import CODEC_MASK, decompress
from .records import HEADER_SIZE, TIMESTAMP_TYPE_BIT

_FIELDS = struct.Struct(">hiqq")  # attributes, lastOffsetDelta, baseTimestamp, maxTimestamp
_FIELDS_OFFSET = 21
def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def record_timestamps(batch: bytes) -> list[tuple[int, int]]:
    """(offset delta, timestamp) of every record of a v2 batch."""
    attributes, last_delta, base_ts, max_ts = _FIELDS.unpack_from(batch, _FIELDS_OFFSET)
    if attributes & TIMESTAMP_TYPE_BIT:
        # LogAppendTime: every record carries the batch's append time.
        return [(delta, max_ts) for delta in range(last_delta + 1)]
    data = decompress(attributes & CODEC_MASK, bytes(batch[HEADER_SIZE:]))
    out = []
    pos = 0
    while pos < len(data):
        length, pos = _varint(data, pos)
        end = pos + length
        pos += 1  # record attributes
        ts_delta, pos = _varint(data, pos)
        offset_delta, pos = _varint(data, pos)
        out.append((offset_delta, base_ts + ts_delta))
        pos = end
    return out


def first_at_or_after(batch: bytes, timestamp: int) -> tuple[int, int] | None:
    """(offset delta, timestamp) of the first record with a timestamp >= ``timestamp``."""
    return next(((d, ts) for d, ts in record_timestamps(batch) if ts >= timestamp), None)


def max_timestamp_record(batch: bytes) -> tuple[int, int] | None:
    """(offset delta, timestamp) of the first record carrying the batch's largest time."""
    records = record_timestamps(batch)
    if not records:
        return None
    best = max(ts for _, ts in records)
    return next((d, ts) for d, ts in records if ts == best)
