"""BlockCache: aligned block loads, shared in-flight loads, LRU by bytes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence

import pytest

from storage.objects import Chunks, ObjectNotFound, ObjectStore, StoredObject
from storage.objects.block_cache import BlockCache

BS = 16


class FakeStore(ObjectStore):
    """In-memory store that records every ranged read; loads can be held or failed."""

    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects
        self.calls: list[tuple[str, int, int]] = []
        self.gate: asyncio.Event | None = None
        self.failures = 0  # the next N reads fail

    async def put(self, key: str, chunks: Chunks) -> None:
        self.objects[key] = b"".join(chunks)

    async def get_range(self, key: str, offset: int, length: int) -> bytes:
        self.calls.append((key, offset, length))
        if self.gate is not None:
            await self.gate.wait()
        if self.failures:
            self.failures -= 1
            raise OSError("store unavailable")
        if key not in self.objects:
            raise ObjectNotFound(key)
        return self.objects[key][offset : offset + length]

    async def delete_many(self, keys: Sequence[str]) -> None:
        for k in keys:
            self.objects.pop(k, None)

    async def list_objects(self) -> AsyncIterator[list[StoredObject]]:
        yield [StoredObject(k, len(v), 0) for k, v in self.objects.items()]


DATA = bytes(range(100))  # 6 full blocks of 16 and one of 4


@pytest.fixture
def store() -> FakeStore:
    return FakeStore({"obj": DATA})


async def settle() -> None:
    """Let started tasks run until they block on the store's gate."""
    for _ in range(5):
        await asyncio.sleep(0)


def joined(views: list[memoryview]) -> bytes:
    return b"".join(views)


async def test_reads_load_aligned_blocks_once(store: FakeStore) -> None:
    cache = BlockCache(store, block_size=BS, max_bytes=1024)
    views = await cache.read("obj", 5, 8)
    assert joined(views) == DATA[5:13]
    assert store.calls == [("obj", 0, BS)]
    views = await cache.read("obj", 0, 16)
    assert joined(views) == DATA[:16]
    assert len(store.calls) == 1
    assert (cache.hits, cache.misses) == (1, 1)


async def test_spanning_read_returns_one_view_per_block_without_copying(
    store: FakeStore,
) -> None:
    cache = BlockCache(store, block_size=BS, max_bytes=1024)
    views = await cache.read("obj", 10, 30)  # blocks 0, 1, 2
    assert [len(v) for v in views] == [6, 16, 8]
    assert joined(views) == DATA[10:40]
    assert sorted(store.calls) == [("obj", 0, BS), ("obj", 16, BS), ("obj", 32, BS)]
    # Views over the cached blocks themselves, not over copies.
    assert all(isinstance(v.obj, bytes) and len(v.obj) == BS for v in views)


async def test_reads_at_the_end_of_an_object_are_short(store: FakeStore) -> None:
    cache = BlockCache(store, block_size=BS, max_bytes=1024)
    assert joined(await cache.read("obj", 90, 50)) == DATA[90:]
    assert joined(await cache.read("obj", 96, 4)) == DATA[96:]
    assert await cache.read("obj", 0, 0) == []
    with pytest.raises(ValueError):
        await cache.read("obj", -1, 4)


async def test_concurrent_reads_of_a_block_share_one_load(store: FakeStore) -> None:
    cache = BlockCache(store, block_size=BS, max_bytes=1024)
    store.gate = asyncio.Event()
    readers = [asyncio.create_task(cache.read("obj", i, 4)) for i in range(8)]
    await settle()
    store.gate.set()
    results = await asyncio.gather(*readers)
    assert [joined(r) for r in results] == [DATA[i : i + 4] for i in range(8)]
    assert store.calls == [("obj", 0, BS)]
    assert (cache.misses, cache.joined) == (1, 7)


async def test_a_cancelled_reader_does_not_cancel_the_shared_load(store: FakeStore) -> None:
    cache = BlockCache(store, block_size=BS, max_bytes=1024)
    store.gate = asyncio.Event()
    first = asyncio.create_task(cache.read("obj", 0, 4))
    second = asyncio.create_task(cache.read("obj", 4, 40))  # spans blocks 0-2
    await settle()
    assert len(store.calls) == 3  # both readers now wait on the load of block 0
    first.cancel()
    await asyncio.sleep(0)
    store.gate.set()
    assert joined(await second) == DATA[4:44]
    assert first.cancelled()
    assert len(store.calls) == 3


async def test_failed_load_reaches_every_waiter_and_is_not_cached(store: FakeStore) -> None:
    cache = BlockCache(store, block_size=BS, max_bytes=1024)
    store.gate = asyncio.Event()
    store.failures = 1
    readers = [asyncio.create_task(cache.read("obj", i, 2)) for i in range(3)]
    await settle()
    store.gate.set()
    results = await asyncio.gather(*readers, return_exceptions=True)
    assert all(isinstance(r, OSError) for r in results)
    assert len(store.calls) == 1
    # The next read goes back to the store and succeeds.
    assert joined(await cache.read("obj", 0, 2)) == DATA[:2]
    assert len(store.calls) == 2
    with pytest.raises(ObjectNotFound):
        await cache.read("missing", 0, 1)


async def test_eviction_is_by_bytes_least_recently_used_first(store: FakeStore) -> None:
    cache = BlockCache(store, block_size=BS, max_bytes=2 * BS)
    await cache.read("obj", 0, 1)  # block 0
    await cache.read("obj", 16, 1)  # block 1
    await cache.read("obj", 0, 1)  # block 0 used again: block 1 is now the oldest
    await cache.read("obj", 32, 1)  # block 2 evicts block 1
    assert cache.current_bytes == 2 * BS
    store.calls.clear()
    await cache.read("obj", 0, 1)
    await cache.read("obj", 32, 1)
    assert store.calls == []
    await cache.read("obj", 16, 1)
    assert store.calls == [("obj", 16, BS)]


async def test_put_object_serves_reads_without_the_store(store: FakeStore) -> None:
    cache = BlockCache(store, block_size=BS, max_bytes=1024)
    data = bytes(range(200, 256)) + bytes(range(0, 14))  # 70 bytes
    # Chunk edges deliberately off the block edges.
    cache.put_object("new", [data[:5], memoryview(data)[5:40], bytearray(data[40:])])
    for offset, length in [(0, 70), (3, 20), (16, 16), (60, 30), (69, 1)]:
        assert joined(await cache.read("new", offset, length)) == data[offset : offset + length]
    assert store.calls == []
    assert cache.current_bytes == 70


async def test_invalidate_forgets_an_object(store: FakeStore) -> None:
    cache = BlockCache(store, block_size=BS, max_bytes=1024)
    cache.put_object("obj", [DATA])
    cache.invalidate("obj")
    assert cache.current_bytes == 0
    await cache.read("obj", 0, 1)
    assert store.calls == [("obj", 0, BS)]
