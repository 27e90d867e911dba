"""BlockCache.read_cached (hits without a coroutine) and cached-on-write blocks kept as
the views they were written from."""

from __future__ import annotations

from storage.objects.block_cache import BlockCache
from tests.unit.test_block_cache import BS, DATA, FakeStore


def joined(views: list[memoryview] | None) -> bytes:
    assert views is not None
    return b"".join(bytes(v) for v in views)


async def test_read_cached_answers_hits_and_refuses_misses() -> None:
    store = FakeStore({"obj": DATA})
    cache = BlockCache(store, block_size=BS, max_bytes=1024)
    assert cache.read_cached("obj", 5, 30) is None  # nothing cached: no store call either
    assert store.calls == []
    await cache.read("obj", 5, 30)  # loads blocks 0..2
    calls = list(store.calls)
    assert joined(cache.read_cached("obj", 5, 30)) == DATA[5:35]
    assert cache.read_cached("obj", 40, 20) is None  # block 3 is not cached
    assert cache.read_cached("obj", 0, 0) == []
    assert store.calls == calls


async def test_read_cached_stops_at_the_objects_end() -> None:
    store = FakeStore({"obj": DATA})
    cache = BlockCache(store, block_size=BS, max_bytes=1024)
    await cache.read("obj", 96, 4)  # the short last block
    assert joined(cache.read_cached("obj", 96, 100)) == DATA[96:]


async def test_written_objects_are_cached_as_views_of_the_chunks() -> None:
    store = FakeStore({})
    cache = BlockCache(store, block_size=BS, max_bytes=1024)
    first, second = bytes(range(10)), bytes(range(10, 50))
    cache.put_object("new", [first, memoryview(second)])
    views = cache.read_cached("new", 8, 30)
    assert joined(views) == (first + second)[8:38]
    # No copy: the views point into the written buffers themselves.
    assert views is not None and {v.obj for v in views} <= {first, second}
