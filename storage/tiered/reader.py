"""Reading records from a remote segment: its offset index locates the batch, ranged
reads (through the block cache when given one) fetch the bytes.

Answers as ``storage.classic.Log.read`` does: whole batches from the one holding the
offset, below ``max_offset``, within ``max_bytes`` unless the first batch alone is larger
and ``min_one``. Indexes are small and read whole, kept per segment in a bounded LRU.
"""

from __future__ import annotations

import bisect
import struct
from uuid import UUID

from cachetools import LRUCache

from storage.classic.batches import walk
from storage.objects import ObjectNotFound, ObjectStore
from storage.objects.block_cache import BlockCache

from . import layout
from .metadata import RemoteSegment

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")
_HEADER = 12  # baseOffset + batchLength: enough to learn a batch's size
# A first ranged read of this much usually holds the batches a fetch wants.
READ_AHEAD = 64 * 1024


class _Indexes:
    __slots__ = ("offsets", "positions", "time_offsets", "timestamps")

    def __init__(self, offset_index: bytes, time_index: bytes, base: int) -> None:
        entries = list(_OFFSET_ENTRY.iter_unpack(offset_index[: len(offset_index) // 8 * 8]))
        self.offsets = [base + rel for rel, _ in entries]
        self.positions = [pos for _, pos in entries]
        times = list(_TIME_ENTRY.iter_unpack(time_index[: len(time_index) // 12 * 12]))
        self.timestamps = [ts for ts, _ in times]
        self.time_offsets = [base + rel for _, rel in times]


class RemoteReader:
    def __init__(
        self, store: ObjectStore, cache: BlockCache | None = None, max_indexes: int = 1024
    ) -> None:
        self.store = store
        self.cache = cache
        self._indexes: LRUCache[UUID, _Indexes] = LRUCache(maxsize=max_indexes)

    async def _range(self, key: str, offset: int, length: int) -> bytes:
        if self.cache is not None:
            return b"".join(await self.cache.read(key, offset, length))
        return await self.store.get_range(key, offset, length)

    async def _get(self, key: str, size_hint: int = 1 << 20) -> bytes:
        try:
            out = b""
            while True:
                part = await self.store.get_range(key, len(out), size_hint)
                out += part
                if len(part) < size_hint:
                    return out
        except ObjectNotFound:
            return b""

    async def producer_snapshot(self, segment: RemoteSegment) -> bytes:
        """The segment's producer snapshot object, as the broker wrote it (empty for a
        segment copied without one)."""
        return await self._get(layout.key(segment, layout.PRODUCER_SNAPSHOT))

    async def indexes(self, segment: RemoteSegment) -> _Indexes:
        found = self._indexes.get(segment.segment_id)
        if found is None:
            found = _Indexes(
                await self._get(layout.key(segment, layout.OFFSET_INDEX)),
                await self._get(layout.key(segment, layout.TIME_INDEX)),
                segment.start_offset,
            )
            self._indexes[segment.segment_id] = found
        return found

    async def read(
        self,
        segment: RemoteSegment,
        offset: int,
        max_bytes: int,
        max_offset: int | None = None,
        min_one: bool = True,
    ) -> bytes:
        if not segment.start_offset <= offset <= segment.end_offset:
            raise ValueError(f"offset {offset} not in segment {segment.segment_id}")
        end = segment.end_offset + 1 if max_offset is None else max_offset
        idx = await self.indexes(segment)
        i = bisect.bisect_right(idx.offsets, offset) - 1
        position = idx.positions[i] if i >= 0 else 0
        return await self._read_from(segment, position, offset, max_bytes, end, min_one)

    async def _read_from(
        self,
        segment: RemoteSegment,
        position: int,
        offset: int,
        max_bytes: int,
        max_offset: int,
        min_one: bool,
    ) -> bytes:
        key = layout.key(segment, layout.LOG)
        out: list[bytes] = []
        taken = 0
        pos = position
        while pos < segment.size:
            chunk = await self._range(key, pos, min(READ_AHEAD, segment.size - pos))
            batches = list(walk(chunk, pos, check_crc=False))
            if not batches:
                # One batch larger than the chunk: learn its size, read exactly it.
                head = await self._range(key, pos, _HEADER)
                if len(head) < _HEADER:
                    break
                size = int.from_bytes(head[8:12], "big", signed=True) + _HEADER
                chunk = await self._range(key, pos, size)
                batches = list(walk(chunk, pos, check_crc=False))
                if not batches:
                    break  # corrupt: serve what came before it
            for b in batches:
                if b.last_offset < offset:
                    continue
                if b.base_offset >= max_offset:
                    return b"".join(out)
                if taken + b.size > max_bytes and not (min_one and not out):
                    return b"".join(out)
                start = b.position - pos
                out.append(chunk[start : start + b.size])
                taken += b.size
            pos = batches[-1].position + batches[-1].size
        return b"".join(out)

    async def offset_for_timestamp(
        self, segment: RemoteSegment, timestamp: int
    ) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the segment's first batch whose max timestamp
        is at least ``timestamp``; None if none is."""
        if segment.max_timestamp < timestamp:
            return None
        idx = await self.indexes(segment)
        i = bisect.bisect_left(idx.timestamps, timestamp) - 1
        start = idx.time_offsets[i] if i >= 0 else segment.start_offset
        j = bisect.bisect_right(idx.offsets, start) - 1
        pos = idx.positions[j] if j >= 0 else 0
        key = layout.key(segment, layout.LOG)
        while pos < segment.size:
            chunk = await self._range(key, pos, min(READ_AHEAD, segment.size - pos))
            batches = list(walk(chunk, pos, check_crc=False))
            if not batches:
                head = await self._range(key, pos, _HEADER)
                size = int.from_bytes(head[8:12], "big", signed=True) + _HEADER
                batches = list(walk(await self._range(key, pos, size), pos, check_crc=False))
                if not batches:
                    return None
            for b in batches:
                if b.max_timestamp >= timestamp:
                    return b.base_offset, b.max_timestamp
            pos = batches[-1].position + batches[-1].size
        return None
