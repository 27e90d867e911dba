"""Read cache of aligned object blocks, in front of an ObjectStore.

Fetches read many small batch ranges of few objects (one object per flush holds many
partitions). Caching aligned blocks turns those into one ranged GET per block, shared
by every consumer; concurrent misses of a block share one load (as Inkless's cache
does). Reads return memoryview slices of the cached blocks: no copy is made here, the
fetch path hands the views to the transport as they are.

A block loaded from the store is one bytes object. A block of an object this broker
just wrote is kept as the views of the produce requests' record data it was written
from (:class:`_Pieces`): caching on write costs no copy either.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Iterable
from itertools import accumulate

from cachetools import LRUCache

from storage.objects import Chunks, ObjectStore
from storage.objects.marker_objects import MARKER_KEY_PREFIX, read_marker_object

BlockKey = tuple[str, int]  # (object key, block index)


class _Pieces:
    """A block made of buffers laid end to end, sliced without joining them."""

    __slots__ = ("_ends", "_views")

    def __init__(self, views: list[memoryview]) -> None:
        self._views = views
        self._ends = list(accumulate(len(v) for v in views))

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    def slice(self, lo: int, hi: int) -> list[memoryview]:
        """Views of bytes ``[lo, hi)`` of the block."""
        out: list[memoryview] = []
        i = bisect_right(self._ends, lo)
        start = self._ends[i - 1] if i else 0
        while start < hi and i < len(self._views):
            view = self._views[i]
            end = start + len(view)
            out.append(view[max(lo - start, 0) : min(hi, end) - start])
            start = end
            i += 1
        return out


Block = bytes | _Pieces


class BlockCache:
    def __init__(
        self,
        store: ObjectStore,
        block_size: int = 8 * 1024 * 1024,
        max_bytes: int = 64 * 1024 * 1024,
    ) -> None:
        if block_size <= 0 or max_bytes <= 0:
            raise ValueError("block_size and max_bytes must be positive")
        self._store = store
        self.block_size = block_size
        self.max_bytes = max_bytes
        self._blocks: LRUCache[BlockKey, Block] = LRUCache(maxsize=max_bytes, getsizeof=len)
        self._loading: dict[BlockKey, asyncio.Task[bytes]] = {}
        self.hits = 0  # blocks served from the cache
        self.misses = 0  # blocks loaded from the store
        self.joined = 0  # blocks awaited from a load another reader had started

    @property
    def current_bytes(self) -> int:
        return int(self._blocks.currsize)

    async def read(self, key: str, offset: int, length: int) -> list[memoryview]:
        """Bytes ``[offset, offset + length)`` of an object as views over cached blocks
        (shorter at the object's end, like ObjectStore.get_range). A marker object
        (storage/objects/marker_objects.py) is made from its key, not read or cached;
        told by its prefix inline, so other keys' reads call nothing more."""
        if offset < 0 or length < 0:
            raise ValueError(f"bad range {offset}+{length}")
        if length == 0:
            return []
        if key.startswith(MARKER_KEY_PREFIX):
            return _marker_views(key, offset, length)
        bs = self.block_size
        first, last = offset // bs, (offset + length - 1) // bs
        blocks = self._cached_prefix(key, first, last)
        ended = bool(blocks) and len(blocks[-1]) < bs
        missing = range(first + len(blocks), last + 1) if not ended else range(0)
        if len(missing) == 1:
            blocks.append(await self._block(key, missing[0]))
        elif missing:
            # Load the rest of a spanning read concurrently, not one block after another.
            blocks += await asyncio.gather(*(self._block(key, i) for i in missing))
        return self._views(blocks, first, offset, length)

    def read_cached(self, key: str, offset: int, length: int) -> list[memoryview] | None:
        """What :meth:`read` returns, without a coroutine, when every block it needs is
        cached; None otherwise (then call :meth:`read`). For readers of many small
        ranges (a fetch of 16 KiB batches reads ~64 per MiB): a coroutine or task per
        range costs more than the read itself when it is a hit."""
        if offset < 0 or length < 0:
            raise ValueError(f"bad range {offset}+{length}")
        if length == 0:
            return []
        if key.startswith(MARKER_KEY_PREFIX):
            return _marker_views(key, offset, length)
        bs = self.block_size
        first, last = offset // bs, (offset + length - 1) // bs
        blocks = self._cached_prefix(key, first, last)
        if first + len(blocks) <= last and not (blocks and len(blocks[-1]) < bs):
            return None
        return self._views(blocks, first, offset, length)

    def _views(self, blocks: list[Block], first: int, offset: int, length: int) -> list[memoryview]:
        bs = self.block_size
        views: list[memoryview] = []
        end = offset + length
        for index, block in enumerate(blocks, first):
            block_start = index * bs
            lo = max(offset - block_start, 0)
            hi = min(end - block_start, len(block))
            if hi > lo:
                if isinstance(block, _Pieces):
                    views.extend(block.slice(lo, hi))
                else:
                    views.append(memoryview(block)[lo:hi])
            if len(block) < bs:
                break  # the object ends in this block
        return views

    def put_object(self, key: str, chunks: Chunks) -> None:
        """Cache a freshly written object, so reads of the newest data (consumers at
        the tail) do not go back to the store for what this broker just wrote."""
        if key.startswith(MARKER_KEY_PREFIX):
            return  # made from its key on every read
        for index, block in enumerate(_split_blocks(chunks, self.block_size)):
            self._insert((key, index), block)

    def invalidate(self, key: str) -> None:
        for block_key in [k for k in self._blocks if k[0] == key]:
            self._blocks.pop(block_key, None)

    def _cached_prefix(self, key: str, first: int, last: int) -> list[Block]:
        """The cached blocks from ``first`` on, up to the first missing one or the
        object's (short) last block: a read ending past the object's end then asks the
        store for nothing that does not exist."""
        blocks: list[Block] = []
        for index in range(first, last + 1):
            block = self._blocks.get((key, index))
            if block is None:
                break
            self.hits += 1
            blocks.append(block)
            if len(block) < self.block_size:
                break
        return blocks

    def _insert(self, block_key: BlockKey, block: Block) -> None:
        # LRUCache refuses a value larger than the whole cache; such a block is simply
        # not kept.
        if len(block) <= self.max_bytes:
            self._blocks[block_key] = block

    async def _block(self, key: str, index: int) -> Block:
        block_key = (key, index)
        block = self._blocks.get(block_key)
        if block is not None:
            self.hits += 1
            return block
        task = self._loading.get(block_key)
        if task is None:
            self.misses += 1
            task = asyncio.ensure_future(self._load(block_key))
            self._loading[block_key] = task
            task.add_done_callback(lambda t: self._loaded(block_key, t))
        else:
            self.joined += 1
        # shield: a reader that is cancelled must not cancel the load others await.
        return await asyncio.shield(task)

    async def _load(self, block_key: BlockKey) -> bytes:
        key, index = block_key
        return await self._store.get_range(key, index * self.block_size, self.block_size)

    def _loaded(self, block_key: BlockKey, task: asyncio.Task[bytes]) -> None:
        if self._loading.get(block_key) is task:
            del self._loading[block_key]
        if task.cancelled():
            return
        # Retrieving the exception marks it handled even when every waiter was
        # cancelled; failures are not cached, the next read tries the store again.
        if task.exception() is None:
            self._insert(block_key, task.result())


def _marker_views(key: str, offset: int, length: int) -> list[memoryview]:
    data = read_marker_object(key, offset, length)
    return [memoryview(data)] if data else []


def _split_blocks(chunks: Chunks, block_size: int) -> Iterable[_Pieces]:
    """Cut a sequence of buffers into aligned blocks of views (no copy)."""
    pending: list[memoryview] = []
    filled = 0
    for chunk in chunks:
        view = memoryview(chunk).cast("B")
        while len(view):
            take = min(block_size - filled, len(view))
            pending.append(view[:take] if take < len(view) else view)
            filled += take
            view = view[take:]
            if filled == block_size:
                yield _Pieces(pending)
                pending, filled = [], 0
    if filled:
        yield _Pieces(pending)
