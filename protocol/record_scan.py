"""Reading record timestamps inside one batch, for ListOffsets by timestamp.

The produce and fetch paths never look inside batches. Offset lookups by time are
rare (a consumer resetting its position), so there it is worth decompressing one
batch to answer at record precision, as Kafka does, instead of at batch precision.
"""

from __future__ import annotations

import struct

from .compression import CODEC_MASK, decompress
from .records import HEADER_SIZE, TIMESTAMP_TYPE_BIT, record_heads

_FIELDS = struct.Struct(">hiqq")  # attributes, lastOffsetDelta, baseTimestamp, maxTimestamp
_FIELDS_OFFSET = 21


def record_timestamps(batch: bytes) -> list[tuple[int, int]]:
    """(offset delta, timestamp) of every record of a v2 batch."""
    attributes, last_delta, base_ts, max_ts = _FIELDS.unpack_from(batch, _FIELDS_OFFSET)
    if attributes & TIMESTAMP_TYPE_BIT:
        # LogAppendTime: every record carries the batch's append time.
        return [(delta, max_ts) for delta in range(last_delta + 1)]
    data = decompress(attributes & CODEC_MASK, bytes(batch[HEADER_SIZE:]))
    return [
        (offset_delta, base_ts + ts_delta) for _, _, ts_delta, offset_delta in record_heads(data)
    ]


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
