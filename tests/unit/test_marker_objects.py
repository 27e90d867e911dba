"""Marker objects (storage/objects/marker_objects.py): a diskless transaction end's markers
are made from their file's key by every reader (the fetch path's block cache, the jobs'
ranged reads), byte for byte the object an upload would have held, and the store is never
asked about them."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import AsyncIterator, Sequence

import pytest

from jobs.fetch import read_batches
from jobs.plan import BatchRef
from protocol.control_batch import marker_batch, parse_marker
from storage.objects import Chunks, ObjectStore, StoredObject, is_data_key
from storage.objects.block_cache import BlockCache
from storage.objects.marker_objects import (
    is_marker_key,
    marker_batch_of,
    marker_key,
    marker_object_size,
    read_marker_object,
    stored_keys,
)


class NoStore(ObjectStore):
    """A store that must not be asked anything."""

    async def put(self, key: str, chunks: Chunks) -> None:
        raise AssertionError(f"put {key}")

    async def get_range(self, key: str, offset: int, length: int) -> bytes:
        raise AssertionError(f"get {key}")

    async def delete_many(self, keys: Sequence[str]) -> None:
        raise AssertionError(f"delete {keys}")

    async def list_objects(self) -> AsyncIterator[list[StoredObject]]:
        raise AssertionError("list")
        yield []


class DictStore(NoStore):
    def __init__(self, objects: dict[str, bytes]) -> None:
        self.objects = objects

    async def get_range(self, key: str, offset: int, length: int) -> bytes:
        assert not is_marker_key(key)
        return self.objects[key][offset : offset + length]


def test_a_marker_key_describes_the_object_an_upload_would_hold() -> None:
    batch = marker_batch(4242, 7, True, 1_700_000_000_123)
    key = marker_key(4242, 7, True, 1_700_000_000_123, 3)
    assert is_marker_key(key) and not is_data_key(key)
    assert marker_batch_of(key) == batch
    assert marker_object_size(key) == 3 * len(batch)
    whole = batch * 3
    assert read_marker_object(key, 0, 1 << 20) == whole
    for offset, length in itertools.product(range(0, len(whole) + 3, 5), range(0, 160, 7)):
        assert read_marker_object(key, offset, length) == whole[offset : offset + length]
    # Each end's key is its own (files are unique), even for the same description.
    assert marker_key(4242, 7, True, 1_700_000_000_123, 3) != key
    abort = marker_key(1, 32767, False, 0, 1, coordinator_epoch=5)
    assert parse_marker(read_marker_object(abort, 0, 100)) == (1, 32767, False)
    assert read_marker_object(abort, 0, 100) == marker_batch(1, 32767, False, 0, 5)
    assert stored_keys(["a" * 32, key, abort, "merge-" + "b" * 32]) == [
        "a" * 32,
        "merge-" + "b" * 32,
    ]


@pytest.mark.parametrize(
    "bad",
    ["txn-marker:v1:1:1:commit:5:0:0:" + "a" * 32, "txn-marker:v2:1:1:commit:5:0:1:" + "a" * 32],
)
def test_a_key_that_describes_no_marker_object_is_refused(bad: str) -> None:
    with pytest.raises(ValueError):
        read_marker_object(bad, 0, 10)
    with pytest.raises(ValueError):
        marker_key(-1, 0, True, 0, 1)


async def test_the_block_cache_makes_markers_without_the_store() -> None:
    key = marker_key(9, 2, False, 1000, 4)
    batch = marker_batch(9, 2, False, 1000)
    cache = BlockCache(NoStore(), block_size=64, max_bytes=1024)
    n = len(batch)
    assert b"".join(await cache.read(key, 2 * n, n)) == batch
    # Across block boundaries and past the end, as a stored object reads.
    assert b"".join(await cache.read(key, 10, 4 * n)) == (batch * 4)[10:]
    cached = cache.read_cached(key, 3 * n, n)
    assert cached is not None and b"".join(cached) == batch
    assert cache.read_cached(key, 4 * n, 10) == []
    cache.put_object(key, [batch] * 4)  # nothing kept: made on every read
    assert cache.current_bytes == 0 and cache.misses == 0


def test_the_jobs_read_markers_next_to_stored_batches() -> None:
    key = marker_key(9, 2, True, 1000, 2)
    batch = marker_batch(9, 2, True, 1000)
    data = "d" * 32
    store = DictStore({data: b"0123456789"})

    def ref(object_key: str, offset: int, size: int, base: int) -> BatchRef:
        return BatchRef("t", 0, object_key, offset, size, base, base, 0, 1000, -1)

    refs = [ref(data, 0, 4, 0), ref(key, 0, len(batch), 1), ref(key, len(batch), len(batch), 2)]
    got = asyncio.run(read_batches(store, refs))
    assert bytes(got[refs[0]]) == b"0123"
    assert bytes(got[refs[1]]) == bytes(got[refs[2]]) == batch
