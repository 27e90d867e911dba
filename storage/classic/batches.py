"""Walking record batches as stored in a classic log: framing, magic and CRC.

A segment file is a plain concatenation of v2 record batches whose baseOffset fields hold
the real offsets. After a crash its tail may be torn (a partial batch) or garbage; a walk
stops at the first batch that is not whole and valid, and recovery truncates there.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from typing import NamedTuple

import crc32c

from protocol.records import ATTRIBUTES_OFFSET, HEADER_SIZE, LOG_OVERHEAD, MIN_BATCH_LENGTH

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp
_HEAD = struct.Struct(">qiibIhiqq")
_BASE_OFFSET = struct.Struct(">q")
_LEADER_EPOCH = struct.Struct(">i")
LEADER_EPOCH_OFFSET = 12


class StoredBatch(NamedTuple):
    position: int  # in the segment file
    size: int  # LOG_OVERHEAD included
    base_offset: int
    last_offset: int
    leader_epoch: int
    max_timestamp: int


def walk(
    data: bytes | memoryview, position: int = 0, check_crc: bool = True
) -> Iterator[StoredBatch]:
    """The whole, valid batches of ``data`` from ``position`` on, until the first that is
    not (``position`` of the data is the file position of ``data[0]``)."""
    view = memoryview(data)
    pos = 0
    total = len(view)
    while total - pos >= HEADER_SIZE:
        base, length, epoch, magic, crc, _attrs, last_delta, _base_ts, max_ts = _HEAD.unpack_from(
            view, pos
        )
        size = length + LOG_OVERHEAD
        if magic != 2 or length < MIN_BATCH_LENGTH or pos + size > total or last_delta < 0:
            return
        if check_crc and crc32c.crc32c(view[pos + ATTRIBUTES_OFFSET : pos + size]) != crc:
            return
        yield StoredBatch(position + pos, size, base, base + last_delta, epoch, max_ts)
        pos += size


def header_batch(head: bytes | memoryview, position: int, available: int) -> StoredBatch | None:
    """The batch whose header (``HEADER_SIZE`` bytes) is ``head``, at file ``position``,
    when it is framed as a v2 batch and ends within ``available`` bytes of the file; its
    body is neither read nor checked (a lookup by offset needs only the header)."""
    if len(head) < HEADER_SIZE:
        return None
    base, length, epoch, magic, _crc, _attrs, last_delta, _base_ts, max_ts = _HEAD.unpack_from(
        head, 0
    )
    size = length + LOG_OVERHEAD
    if magic != 2 or length < MIN_BATCH_LENGTH or size > available or last_delta < 0:
        return None
    return StoredBatch(position, size, base, base + last_delta, epoch, max_ts)


def with_offset_and_epoch(batch: bytes | memoryview, base_offset: int, leader_epoch: int) -> bytes:
    """The batch with its baseOffset and partitionLeaderEpoch set (both outside the CRC)."""
    out = bytearray(batch)
    _BASE_OFFSET.pack_into(out, 0, base_offset)
    _LEADER_EPOCH.pack_into(out, LEADER_EPOCH_OFFSET, leader_epoch)
    return bytes(out)
