"""The diskless fetch path's bytes (broker/logs/diskless/diskless_read.Fetcher.read): each
batch goes out as the record format's patched prefix (offset, length, leader epoch) and the
stored bytes after it, the same whether the cache had the blocks or read them."""

from __future__ import annotations

import struct

from broker.logs.diskless.diskless_read import Fetcher
from protocol.records import PATCHED_PREFIX_SIZE
from storage.coordinator import BatchLocation, FindResult
from storage.objects.block_cache import BlockCache
from tests.unit.test_block_cache import FakeStore


def stored_batch(size: int, fill: int) -> bytes:
    """A stored batch as a producer sent it: base offset 0, its length, epoch -1, a body."""
    return struct.pack(">qii", 0, size - 12, -1) + bytes([fill]) * (size - PATCHED_PREFIX_SIZE)


def sent(fetched: object) -> bytes:
    assert fetched is not None
    return b"".join(bytes(p) for p in fetched.parts)  # type: ignore[attr-defined]


async def test_hits_and_misses_send_the_same_patched_batches() -> None:
    first, second, third = stored_batch(40, 1), stored_batch(25, 2), stored_batch(70, 3)
    store = FakeStore({"obj": first + second + third})
    at = [0, len(first), len(first) + len(second)]
    results = [
        FindResult(0, batches=[BatchLocation("obj", at[0], 40, 100, 104)]),
        FindResult(0),  # no batches: None
        FindResult(
            0,
            batches=[
                BatchLocation("obj", at[1], 25, 105, 105),
                BatchLocation("obj", at[2], 70, 106, 110),
            ],
        ),
    ]
    expected = [
        struct.pack(">qii", 100, 28, 7) + first[PATCHED_PREFIX_SIZE:],
        None,
        struct.pack(">qii", 105, 13, 9)
        + second[PATCHED_PREFIX_SIZE:]
        + struct.pack(">qii", 106, 58, 9)
        + third[PATCHED_PREFIX_SIZE:],
    ]
    fetcher = Fetcher(coordinator=None, cache=BlockCache(store, block_size=16, max_bytes=4096))  # type: ignore[arg-type]
    cold = await fetcher.read(results, [7, 8, 9])  # every block read from the store
    assert store.calls
    calls = len(store.calls)
    warm = await fetcher.read(results, [7, 8, 9])  # every block cached
    assert len(store.calls) == calls
    for answer in (cold, warm):
        assert [None if f is None else sent(f) for f in answer] == expected
        assert [None if f is None else len(f) for f in answer] == [40, None, 95]
