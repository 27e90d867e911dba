"""Hand-built magic-2 record batches for the hostile-input tests.

The stock clients never send a batch with a bad CRC, so to check that the broker rejects one
(CORRUPT_MESSAGE) we need to build the bytes ourselves. This follows the on-wire layout of
Kafka's DefaultRecordBatch; nothing here is used to talk to the broker in the normal tests.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field

import crc32c

# Fixed part of a v2 batch: baseOffset(8) batchLength(4) partitionLeaderEpoch(4) magic(1)
# crc(4) attributes(2) lastOffsetDelta(4) baseTimestamp(8) maxTimestamp(8) producerId(8)
# producerEpoch(2) baseSequence(4) recordCount(4).
BATCH_HEADER_SIZE = 61
# The CRC covers everything from the attributes field on; baseOffset, batchLength,
# partitionLeaderEpoch and magic are outside it so a broker can patch them without re-hashing.
CRC_OFFSET = 17
CRC_COVERED_FROM = 21


@dataclass(frozen=True)
class Record:
    key: bytes | None
    value: bytes | None
    headers: Sequence[tuple[str, bytes | None]] = field(default_factory=tuple)


def _zigzag(n: int) -> int:
    return (n << 1) ^ (n >> 63)


def varint(n: int) -> bytes:
    """Signed zig-zag varint, as Kafka records use for every length and delta."""
    z = _zigzag(n) & 0xFFFFFFFFFFFFFFFF
    out = bytearray()
    while True:
        byte = z & 0x7F
        z >>= 7
        if z:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def _bytes_field(b: bytes | None) -> bytes:
    if b is None:
        return varint(-1)
    return varint(len(b)) + b


def encode_record(rec: Record, offset_delta: int, timestamp_delta: int = 0) -> bytes:
    body = bytearray()
    body += b"\x00"  # record attributes: unused, always 0
    body += varint(timestamp_delta)
    body += varint(offset_delta)
    body += _bytes_field(rec.key)
    body += _bytes_field(rec.value)
    body += varint(len(rec.headers))
    for hkey, hval in rec.headers:
        body += _bytes_field(hkey.encode())
        body += _bytes_field(hval)
    return varint(len(body)) + bytes(body)


def build_batch(
    records: Sequence[Record],
    *,
    base_timestamp_ms: int,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A valid, uncompressed magic-2 batch (CreateTime, not transactional)."""
    if not records:
        raise ValueError("a record batch needs at least one record")
    payload = b"".join(encode_record(r, i) for i, r in enumerate(records))
    return build_raw_batch(
        payload,
        records_count=len(records),
        base_timestamp_ms=base_timestamp_ms,
        base_offset=base_offset,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
    )


def build_raw_batch(
    payload: bytes,
    *,
    records_count: int,
    base_timestamp_ms: int,
    last_offset_delta: int | None = None,
    max_timestamp_ms: int | None = None,
    attributes: int = 0,
    base_offset: int = 0,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A batch around ``payload`` (the records section, compressed or not, as given) with a
    valid CRC: whatever the header claims, only the checksum is guaranteed right."""
    after_crc = (
        struct.pack(
            ">hiqqqhii",
            attributes,  # bits 0-2 codec, 3 LogAppendTime, 4 transactional, 5 control
            records_count - 1 if last_offset_delta is None else last_offset_delta,
            base_timestamp_ms,
            base_timestamp_ms if max_timestamp_ms is None else max_timestamp_ms,
            producer_id,
            producer_epoch,
            base_sequence,
            records_count,
        )
        + payload
    )
    crc = crc32c.crc32c(after_crc)
    batch_length = len(after_crc) + 4 + 1 + 4  # crc + magic + partitionLeaderEpoch
    head = struct.pack(">qiibI", base_offset, batch_length, -1, 2, crc)
    batch = head + after_crc
    assert len(head) == CRC_COVERED_FROM
    return batch


def with_bad_crc(batch: bytes) -> bytes:
    """Same batch, CRC field flipped, so only the checksum is wrong."""
    (crc,) = struct.unpack_from(">I", batch, CRC_OFFSET)
    return batch[:CRC_OFFSET] + struct.pack(">I", crc ^ 0xFFFFFFFF) + batch[CRC_OFFSET + 4 :]


def crc_ok(batch: bytes) -> bool:
    (crc,) = struct.unpack_from(">I", batch, CRC_OFFSET)
    return crc == crc32c.crc32c(batch[CRC_COVERED_FROM:])
