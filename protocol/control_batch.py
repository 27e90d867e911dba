"""Transaction markers: the control batches that end a transaction in a partition.

A marker is a magic-2 batch with the transactional and control attributes, the
producer's id and epoch, no sequence, and exactly one record whose key says COMMIT or
ABORT (version 0, type) and whose value carries the coordinator epoch (version 0, epoch).
Consumers skip control batches; read_committed consumers use ABORT markers to know
where an aborted transaction of a producer ends.
"""

from __future__ import annotations

import struct

import crc32c

from .records import ATTRIBUTES_OFFSET, CONTROL_BIT, CRC_OFFSET, LOG_OVERHEAD, TRANSACTIONAL_BIT

ABORT = 0
COMMIT = 1
CONTROL_RECORD_VERSION = 0

_HEADER = struct.Struct(">qiibIhiqqqhii")
_KEY = struct.Struct(">hh")  # version, type
_VALUE = struct.Struct(">hi")  # version, coordinator epoch


def _varint(value: int) -> bytes:
    """Zigzag varint, as record fields are encoded."""
    v = (value << 1) ^ (value >> 63)
    out = bytearray()
    while v >= 0x80:
        out.append((v & 0x7F) | 0x80)
        v >>= 7
    out.append(v)
    return bytes(out)


def _marker_record(commit: bool, coordinator_epoch: int) -> bytes:
    key = _KEY.pack(CONTROL_RECORD_VERSION, COMMIT if commit else ABORT)
    value = _VALUE.pack(CONTROL_RECORD_VERSION, coordinator_epoch)
    body = (
        b"\x00"  # record attributes
        + _varint(0)  # timestamp delta
        + _varint(0)  # offset delta
        + _varint(len(key))
        + key
        + _varint(len(value))
        + value
        + _varint(0)  # no headers
    )
    return _varint(len(body)) + body


def marker_batch(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    timestamp_ms: int,
    coordinator_epoch: int = 0,
) -> bytes:
    """One marker batch at base offset 0 (the fetch path patches the real offset in)."""
    record = _marker_record(commit, coordinator_epoch)
    size = _HEADER.size + len(record)
    out = bytearray(size)
    _HEADER.pack_into(
        out,
        0,
        0,  # base offset
        size - LOG_OVERHEAD,  # batch length
        0,  # partition leader epoch (patched when served)
        2,  # magic
        0,  # crc, below
        TRANSACTIONAL_BIT | CONTROL_BIT,
        0,  # last offset delta
        timestamp_ms,  # base timestamp
        timestamp_ms,  # max timestamp
        producer_id,
        producer_epoch,
        -1,  # base sequence: markers have none
        1,  # records
    )
    out[_HEADER.size :] = record
    struct.pack_into(">I", out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def parse_marker(batch: bytes) -> tuple[int, int, bool]:
    """(producer id, producer epoch, commit) of a marker batch; for tests and tools."""
    header = _HEADER.unpack_from(batch, 0)
    attributes = header[5]
    if not attributes & CONTROL_BIT:
        raise ValueError("not a control batch")
    key_len_pos = _HEADER.size
    # record: length varint, attributes, ts delta, offset delta, key length (all 1 byte
    # for a marker), then the key.
    key = batch[key_len_pos + 5 : key_len_pos + 5 + _KEY.size]
    _version, kind = _KEY.unpack(key)
    return header[9], header[10], kind == COMMIT
