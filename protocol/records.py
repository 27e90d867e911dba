"""Record batches (magic 2): the 61-byte header, CRC, framing and offset patching.

The records inside a batch are never parsed in Python on the hot path; they are walked
once, in C, by protocol.batch_validation before a batch is acknowledged, and otherwise
stored and served as opaque bytes. See the Kafka protocol's "Record Batch" layout.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c
from kio.schema.errors import ErrorCode

HEADER_SIZE = 61
# Bytes before the batchLength field is counted: baseOffset (8) + batchLength (4).
LOG_OVERHEAD = 12
# Smallest legal batchLength: the header after the two fields above.
MIN_BATCH_LENGTH = HEADER_SIZE - LOG_OVERHEAD
MAGIC_OFFSET = 16  # same position in legacy message sets, so old formats are detected here
CRC_OFFSET = 17
ATTRIBUTES_OFFSET = 21  # the CRC covers everything from here to the end of the batch

TIMESTAMP_TYPE_BIT = 0x08
TRANSACTIONAL_BIT = 0x10
CONTROL_BIT = 0x20

_HEADER = struct.Struct(">qiibIhiqqqhii")
_PREFIX = struct.Struct(">qii")  # baseOffset, batchLength, partitionLeaderEpoch
_MAX_TS = struct.Struct(">q")
_ATTRS = struct.Struct(">h")
_CRC = struct.Struct(">I")
MAX_TIMESTAMP_OFFSET = 35


class BatchHeader(NamedTuple):
    # A NamedTuple, not a frozen dataclass: one is made per batch on the produce path,
    # and a frozen dataclass's __init__ (object.__setattr__ per field) costs ~4 µs.
    offset: int  # where the batch starts inside the partition's records blob
    size: int  # whole batch, LOG_OVERHEAD included
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    records_count: int

    @property
    def record_count(self) -> int:
        # Offsets are assigned by lastOffsetDelta, as Kafka does; it equals
        # records_count - 1 for every well-formed client batch (checked on parse).
        return self.last_offset_delta + 1

    @property
    def is_transactional(self) -> bool:
        return bool(self.attributes & TRANSACTIONAL_BIT)

    @property
    def is_control(self) -> bool:
        return bool(self.attributes & CONTROL_BIT)


class InvalidRecords(Exception):
    """A partition's records refused: the Kafka error, its message, and for errors Kafka
    pins on single records (no key on a compacted topic, timestamp out of range) the
    (index in the batch, message) pairs ProduceResponse v8+ carries as record_errors."""

    def __init__(
        self,
        error: ErrorCode,
        message: str,
        record_errors: tuple[tuple[int, str | None], ...] = (),
    ) -> None:
        super().__init__(message)
        self.error = error
        self.record_errors = record_errors


def parse_batches(data: bytes | memoryview, max_batch_bytes: int) -> list[BatchHeader]:
    """Validate a partition's records blob and return its batch headers.

    Raises InvalidRecords with the Kafka error the whole partition gets: legacy
    magic -> UNSUPPORTED_FOR_MESSAGE_FORMAT, bad framing or CRC -> CORRUPT_MESSAGE,
    a batch over ``max_batch_bytes`` (max.message.bytes) -> MESSAGE_TOO_LARGE, a header
    whose record count disagrees with its last offset delta -> INVALID_RECORD. The records
    inside are checked by protocol.batch_validation.
    """
    view = memoryview(data)
    total = len(view)
    if total == 0:
        raise InvalidRecords(ErrorCode.invalid_record, "produce request carries no record batch")
    headers: list[BatchHeader] = []
    pos = 0
    while pos < total:
        if total - pos < HEADER_SIZE:
            if total - pos > MAGIC_OFFSET and view[pos + MAGIC_OFFSET] < 2:
                raise InvalidRecords(
                    ErrorCode.unsupported_for_message_format,
                    f"message format magic {view[pos + MAGIC_OFFSET]} is not supported; "
                    "use magic 2",
                )
            # Kafka's batch iterator stops at a batch cut short: with nothing before it the
            # request has no batch (INVALID_RECORD), as a truncated batch does below.
            raise InvalidRecords(ErrorCode.invalid_record, "truncated record batch header")
        (
            _base_offset,
            batch_length,
            _leader_epoch,
            magic,
            crc,
            attributes,
            last_offset_delta,
            base_timestamp,
            max_timestamp,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count,
        ) = _HEADER.unpack_from(view, pos)
        if magic != 2:
            if magic in (0, 1):
                raise InvalidRecords(
                    ErrorCode.unsupported_for_message_format,
                    f"message format magic {magic} is not supported; use magic 2",
                )
            raise InvalidRecords(ErrorCode.corrupt_message, f"unknown record batch magic {magic}")
        size = batch_length + LOG_OVERHEAD
        if batch_length < MIN_BATCH_LENGTH:
            raise InvalidRecords(ErrorCode.corrupt_message, "record batch length out of bounds")
        if pos + size > total:
            # Kafka: INVALID_RECORD ("at least one record batch"), its iterator not seeing a
            # batch longer than the bytes left. (After complete batches Kafka would append
            # those and drop the cut tail silently; no client sends that: refused whole.)
            raise InvalidRecords(ErrorCode.invalid_record, "record batch cut short of its length")
        if size > max_batch_bytes:
            raise InvalidRecords(
                ErrorCode.message_too_large,
                f"record batch of {size} bytes exceeds max.message.bytes {max_batch_bytes}",
            )
        if crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size]) != crc:
            raise InvalidRecords(ErrorCode.corrupt_message, "record batch CRC mismatch")
        if last_offset_delta < 0 or records_count != last_offset_delta + 1:
            # Kafka's LogValidator: InvalidRecordException, so INVALID_RECORD.
            raise InvalidRecords(
                ErrorCode.invalid_record,
                f"record count {records_count} does not match "
                f"last offset delta {last_offset_delta}",
            )
        headers.append(
            BatchHeader(
                pos,
                size,
                attributes,
                last_offset_delta,
                base_timestamp,
                max_timestamp,
                producer_id,
                producer_epoch,
                base_sequence,
                records_count,
            )
        )
        pos += size
    return headers


def stamp_log_append_time(batch: bytes | memoryview, append_time_ms: int) -> bytearray:
    """A copy of ``batch`` marked LogAppendTime with maxTimestamp = append time.

    This changes bytes the CRC covers, so the CRC is recomputed (in C). Only topics
    configured with message.timestamp.type=LogAppendTime pay for this copy.
    """
    out = bytearray(batch)
    (attributes,) = _ATTRS.unpack_from(out, ATTRIBUTES_OFFSET)
    _ATTRS.pack_into(out, ATTRIBUTES_OFFSET, attributes | TIMESTAMP_TYPE_BIT)
    _MAX_TS.pack_into(out, MAX_TIMESTAMP_OFFSET, append_time_ms)
    _CRC.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return out


def patched_prefix(base_offset: int, batch_size: int, leader_epoch: int) -> bytes:
    """The first 16 bytes of a stored batch as a consumer must see them.

    Batches are stored as producers sent them (offsets are assigned only after the
    upload). baseOffset and partitionLeaderEpoch lie outside the CRC, so the fetch
    path sends this prefix followed by a slice of the stored bytes from byte 16.
    """
    return _PREFIX.pack(base_offset, batch_size - LOG_OVERHEAD, leader_epoch)


PATCHED_PREFIX_SIZE = _PREFIX.size


def record_heads(records: bytes) -> Iterator[tuple[int, int, int, int]]:
    """(start, end, timestamp delta, offset delta) of each record of an uncompressed records
    section, in order. Only the rare readers inside batches use this (ListOffsets by time,
    the compaction job); the produce and fetch paths never do."""
    pos = 0
    while pos < len(records):
        length, body = _zigzag_varint(records, pos)
        ts_delta, p = _zigzag_varint(records, body + 1)  # after the record's attributes byte
        offset_delta, _ = _zigzag_varint(records, p)
        end = body + length
        yield pos, end, ts_delta, offset_delta
        pos = end


def _zigzag_varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def set_max_timestamp(records: bytearray, batch_offset: int, max_timestamp: int) -> None:
    """Rewrite, in place, the maxTimestamp of the batch at ``batch_offset`` (and its CRC).

    Kafka sets a CreateTime batch's maxTimestamp from its records; a client whose header
    disagrees gets the same correction here (rare: every stock client writes it right)."""
    _MAX_TS.pack_into(records, batch_offset + MAX_TIMESTAMP_OFFSET, max_timestamp)
    (batch_length,) = struct.unpack_from(">i", records, batch_offset + 8)
    covered = memoryview(records)[
        batch_offset + ATTRIBUTES_OFFSET : batch_offset + LOG_OVERHEAD + batch_length
    ]
    _CRC.pack_into(records, batch_offset + CRC_OFFSET, crc32c.crc32c(covered))
