"""Checking the records inside each batch before it is acknowledged, as Kafka's LogValidator.

``parse_batches`` (records.py) has checked framing, magic, CRC, size and that the header's
record count matches its last offset delta. Here every batch is opened: compressed ones are
decompressed (bounded, protocol.compression) and every record is walked in C
(protocol.record_walk) so that what is stored holds exactly the records its header claims,
with offset deltas 0..n-1, nothing left over, and nothing a consumer would fail on. Then the
topic's rules: keys on compacted topics, CreateTime timestamps within
message.timestamp.before/after.max.ms.

Errors, as Kafka answers them for a client's produce:

* CORRUPT_MESSAGE: codec ids 5-7, compressed bytes that do not decompress;
* MESSAGE_TOO_LARGE: records that decompress past MAX_DECOMPRESSED_BYTES (a Java producer
  splits the batch and retries on this error, so an honest one still gets through);
* INVALID_RECORD: control batches, a producer id without a sequence, records that do not
  parse or disagree with the header; per record (with record_errors) a missing key on a
  compacted topic;
* INVALID_TIMESTAMP (with record_errors): a timestamp out of range, or a client batch that
  claims LogAppendTime.
"""

from __future__ import annotations

from typing import NamedTuple

from kio.schema.errors import ErrorCode

from . import record_walk
from ._recwalk import walk as _walk
from .compression import (
    CODEC_MASK,
    NONE,
    ZSTD,
    DecompressedTooLarge,
    DecompressionFailed,
    decompress_bounded,
)
from .records import (
    CONTROL_BIT,
    HEADER_SIZE,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    InvalidRecords,
    set_max_timestamp,
)

INT64_MIN = record_walk.INT64_MIN
INT64_MAX = record_walk.INT64_MAX
# Kafka lists at most this many record errors in the error message (all in record_errors).
_SHOWN_ERRORS = 3


class Rules(NamedTuple):
    """What a topic's configs ask of the records produced to it."""

    require_keys: bool  # cleanup.policy includes compact
    check_timestamps: bool  # message.timestamp.type=CreateTime
    before_max_ms: int  # message.timestamp.before.max.ms
    after_max_ms: int  # message.timestamp.after.max.ms


NO_RULES = Rules(False, False, INT64_MAX, INT64_MAX)


def validate_records(
    records: memoryview, batches: list[BatchHeader], rules: Rules, now_ms: int
) -> tuple[memoryview, list[BatchHeader]]:
    """Check every batch of a partition's records; raise InvalidRecords for the first bad one.

    Returns the records and headers to store: unchanged unless a CreateTime batch's
    maxTimestamp disagreed with its records, in which case (as Kafka does) a corrected copy.
    """
    ts_min, ts_max = INT64_MIN, INT64_MAX
    if rules.check_timestamps:
        ts_min = max(INT64_MIN, now_ms - rules.before_max_ms)
        ts_max = min(INT64_MAX, now_ms + rules.after_max_ms)
    fixes: list[tuple[int, int]] = []
    for i, batch in enumerate(batches):
        max_ts = _validate_batch(records, batch, rules.require_keys, ts_min, ts_max)
        if not batch.attributes & TIMESTAMP_TYPE_BIT and max_ts != batch.max_timestamp:
            fixes.append((i, max_ts))
    if not fixes:
        return records, batches
    copy = bytearray(records)
    out = list(batches)
    for i, max_ts in fixes:
        set_max_timestamp(copy, out[i].offset, max_ts)
        out[i] = out[i]._replace(max_timestamp=max_ts)
    return memoryview(copy), out


def _validate_batch(
    records: memoryview, batch: BatchHeader, require_keys: bool, ts_min: int, ts_max: int
) -> int:
    attributes = batch.attributes
    if attributes & CONTROL_BIT:
        raise InvalidRecords(ErrorCode.invalid_record, "clients may not write control batches")
    if attributes & TRANSACTIONAL_BIT and batch.producer_id < 0:
        raise InvalidRecords(ErrorCode.invalid_record, "transactional batch without a producer id")
    if batch.producer_id >= 0 and batch.base_sequence < 0:
        raise InvalidRecords(
            ErrorCode.invalid_record,
            f"batch of producer id {batch.producer_id} has invalid sequence {batch.base_sequence}",
        )
    codec = attributes & CODEC_MASK
    body = records[batch.offset + HEADER_SIZE : batch.offset + batch.size]
    if codec != NONE:
        if codec > ZSTD:
            raise InvalidRecords(ErrorCode.corrupt_message, f"unknown compression codec id {codec}")
        try:
            body = decompress_bounded(codec, body)
        except DecompressionFailed as exc:
            raise InvalidRecords(ErrorCode.corrupt_message, str(exc)) from None
        except DecompressedTooLarge as exc:
            raise InvalidRecords(ErrorCode.message_too_large, str(exc)) from None
    count = batch.records_count
    log_append = bool(attributes & TIMESTAMP_TYPE_BIT)
    # The compiled walker itself, not record_walk.walk: its NamedTuple costs ~0.3 µs a batch.
    status, index, max_timestamp, keyless, bad_ts = _walk(
        body,
        count,
        batch.base_timestamp,
        INT64_MIN if log_append else ts_min,
        INT64_MAX if log_append else ts_max,
        require_keys,
    )
    if status != record_walk.OK:
        raise InvalidRecords(
            ErrorCode.invalid_record,
            f"record {index} of a batch of {count} {record_walk.FAULTS[status]}",
        )
    keyless = keyless or []
    if log_append:
        # Kafka: a producer must not set LogAppendTime; every record of the batch is refused.
        reason = "a producer may not set the LogAppendTime timestamp type"
        no_key = set(keyless)
        errors = [(i, _KEYLESS if i in no_key else reason) for i in range(count)]
        _refuse(ErrorCode.invalid_timestamp, errors)
    bad_ts = bad_ts or []
    if bad_ts or keyless:
        reason = f"timestamp out of range: it must be within [{ts_min}, {ts_max}]"
        errors = sorted([(i, _KEYLESS) for i in keyless] + [(i, reason) for i in bad_ts])
        _refuse(ErrorCode.invalid_timestamp if bad_ts else ErrorCode.invalid_record, errors)
    return max_timestamp


_KEYLESS = "a compacted topic refuses records without a key"


def _refuse(error: ErrorCode, errors: list[tuple[int, str]]) -> None:
    shown = ", ".join(f"record {i}: {m}" for i, m in errors[:_SHOWN_ERRORS])
    more = f" (and {len(errors) - _SHOWN_ERRORS} more)" if len(errors) > _SHOWN_ERRORS else ""
    raise InvalidRecords(
        error,
        f"{len(errors)} record(s) refused: {shown}{more}",
        tuple((i, m) for i, m in errors),
    )
