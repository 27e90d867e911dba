"""Records inside one stored v2 batch, for the log cleaner (never the produce/fetch paths):
each record's offset delta, key and whether it is a tombstone, and the batch rewritten
without some of its records.

A rewritten batch keeps what Kafka's cleaner keeps: base offset, lastOffsetDelta, timestamps,
producer id/epoch/sequence and attributes; the kept records keep their offset deltas (offsets
do not change, gaps appear), the records count, records section and CRC are new.
"""

from __future__ import annotations

import struct
from typing import NamedTuple

import crc32c

from protocol.compression import compress, decompress
from protocol.records import ATTRIBUTES_OFFSET, CRC_OFFSET, HEADER_SIZE, LOG_OVERHEAD

_ATTRS = struct.Struct(">h")
_COUNT = struct.Struct(">i")
_LENGTH = struct.Struct(">i")
_CRC = struct.Struct(">I")
RECORDS_COUNT_OFFSET = 57
CODEC_MASK = 0x07


class CorruptRecords(ValueError):
    pass


class StoredRecord(NamedTuple):
    start: int  # in the uncompressed records section
    end: int
    offset_delta: int
    key: bytes | None
    tombstone: bool


def zigzag_varint(data: bytes | memoryview, pos: int) -> tuple[int, int]:
    """A zigzag varint at ``pos``: (value, next position); CorruptRecords past the end."""
    shift = result = 0
    while True:
        if pos >= len(data) or shift > 63:
            raise CorruptRecords("truncated varint")
        byte = data[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def records_section(batch: bytes | memoryview) -> bytes:
    (attributes,) = _ATTRS.unpack_from(batch, ATTRIBUTES_OFFSET)
    try:
        return decompress(attributes & CODEC_MASK, bytes(batch[HEADER_SIZE:]))
    except Exception as exc:  # any codec's error on bytes that do not decompress
        raise CorruptRecords(f"cannot decompress: {exc!r}") from None


def parse_records(section: bytes, count: int) -> list[StoredRecord]:
    out: list[StoredRecord] = []
    pos = 0
    for _ in range(count):
        length, body = zigzag_varint(section, pos)
        end = body + length
        if length < 0 or end > len(section):
            raise CorruptRecords("record past the end of its batch")
        p = body + 1  # the record's attributes byte
        _ts, p = zigzag_varint(section, p)
        delta, p = zigzag_varint(section, p)
        key_length, p = zigzag_varint(section, p)
        key = None
        if key_length >= 0:
            key = section[p : p + key_length]
            p += key_length
        value_length, p = zigzag_varint(section, p)
        if p > end:
            raise CorruptRecords("record fields past its length")
        out.append(StoredRecord(pos, end, delta, key, value_length < 0))
        pos = end
    if pos != len(section):
        raise CorruptRecords("records section does not end where its records do")
    return out


def batch_records(batch: bytes | memoryview) -> tuple[bytes, list[StoredRecord]]:
    (count,) = _COUNT.unpack_from(batch, RECORDS_COUNT_OFFSET)
    section = records_section(batch)
    return section, parse_records(section, count)


def rewrite(batch: bytes | memoryview, section: bytes, kept: list[StoredRecord]) -> bytes:
    """The batch with only ``kept`` (in order) of its records."""
    (attributes,) = _ATTRS.unpack_from(batch, ATTRIBUTES_OFFSET)
    body = b"".join(section[r.start : r.end] for r in kept)
    codec = attributes & CODEC_MASK
    out = bytearray(batch[:HEADER_SIZE])
    out += compress(codec, body) if codec else body
    _LENGTH.pack_into(out, 8, len(out) - LOG_OVERHEAD)
    _COUNT.pack_into(out, RECORDS_COUNT_OFFSET, len(kept))
    _CRC.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)
