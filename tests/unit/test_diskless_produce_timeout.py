"""An acks=all diskless produce is answered REQUEST_TIMED_OUT once the request's timeout has
passed, as Kafka answers a produce whose replication outlasts it; the commit goes on, and the
producer's retry (committed after it) is answered as its duplicate. Before, a stalled commit
held the answer without bound (the nemesis saw 44 s), far past the client's own timeout.

The coordinator is the real one (each backend) behind an injected delay; the object store is
a real local one."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from kio.schema.errors import ErrorCode

from broker.logs.diskless.diskless_append import Appender
from broker.logs.partition_log import PartitionAppend
from storage.coordinator import BatchCoordinator, BatchToCommit, CommitResult
from storage.objects.block_cache import BlockCache
from storage.objects.local import LocalObjectStore
from storage.partition_key import PartitionKey

from .test_lost_commit_answer import TOPIC, high_watermark, idempotent


class Slow:
    """The real coordinator, its commits held ``delay`` seconds first."""

    def __init__(self, inner: BatchCoordinator, delay: float) -> None:
        self.inner = inner
        self.delay = delay

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def commit_file(
        self, key: str, size: int, node: int, batches: Sequence[BatchToCommit], now: int
    ) -> list[CommitResult]:
        await asyncio.sleep(self.delay)
        return await self.inner.commit_file(key, size, node, batches, now)


async def test_an_acks_all_produce_is_answered_at_its_timeout_and_its_retry_is_a_duplicate(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    await coordinator.create_logs([PartitionKey(TOPIC, 0)])
    store = LocalObjectStore(str(tmp_path / "objects"))
    await store.start()
    slow = Slow(coordinator, 0.6)
    appender = Appender(
        store, slow, BlockCache(store), 1, commit_interval_ms=50,  # type: ignore[arg-type]
        buffer_max_bytes=1 << 20, on_commit=lambda _: None,
    )  # fmt: skip
    loop = asyncio.get_running_loop()
    started = loop.time()
    [first] = await appender.submit([idempotent(0)], timeout_ms=150)
    assert first.error == ErrorCode.request_timed_out
    assert loop.time() - started < 0.5  # not held until the commit
    # The producer retries the same batch; the original commits meanwhile, then the retry
    # is recognised as its duplicate: one record, answered with its offset.
    [retry] = await appender.submit([idempotent(0)], timeout_ms=5000)
    assert (retry.error, retry.base_offset) == (ErrorCode.none, 0)
    assert await high_watermark(coordinator) == 1
    # Without a timeout (acks=1) the answer waits for the commit.
    [plain] = await appender.submit([idempotent(1)])
    assert (plain.error, plain.base_offset) == (ErrorCode.none, 1)
    await appender.close()


class CountsPuts(LocalObjectStore):
    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.put_bytes: list[int] = []

    async def put(self, key: str, data: Any) -> None:
        self.put_bytes.append(sum(len(c) for c in data) if isinstance(data, list) else len(data))
        await super().put(key, data)


async def counted(
    coordinator: BatchCoordinator, tmp_path: Path, delay: float
) -> tuple[Appender, CountsPuts]:
    """An appender on a store that counts its PUTs, commits held ``delay`` seconds."""
    await coordinator.create_logs([PartitionKey(TOPIC, 0)])
    store = CountsPuts(str(tmp_path / "objects"))
    await store.start()
    appender = Appender(
        store, Slow(coordinator, delay), BlockCache(store), 1,  # type: ignore[arg-type]
        commit_interval_ms=50, buffer_max_bytes=1 << 20, on_commit=lambda _: None,
    )  # fmt: skip
    return appender, store


async def test_a_retry_of_an_unanswered_batch_waits_for_it_instead_of_being_written_again(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    """Under overload a producer's request times out while its batch is still on its way to
    the coordinator, and the producer sends the batch again, and again at every timeout.
    Each copy written would make the next objects larger and the commits slower still; the
    retry is answered with the first attempt's answer instead, as Kafka answers a retry of a
    batch it appended."""
    await coordinator.create_logs([PartitionKey(TOPIC, 1)])
    appender, store = await counted(coordinator, tmp_path, 0.6)
    [first] = await appender.submit([idempotent(0)], timeout_ms=100)
    assert first.error == ErrorCode.request_timed_out
    # Two retries while the first is uploaded and committed, the second in a request with
    # a new batch for another partition.
    other = idempotent(0)
    other = PartitionAppend(TOPIC, 1, other.records, other.batches, False)
    retry = appender.submit([idempotent(0)], timeout_ms=5000)
    both = appender.submit([other, idempotent(0)], timeout_ms=5000)
    [answer] = await retry
    assert (answer.error, answer.base_offset) == (ErrorCode.none, 0)
    assert [(r.error, r.base_offset) for r in await both] == [(0, 0), (0, 0)]
    # Written once: the first object holds the batch, the second only partition 1's.
    assert store.put_bytes == [100, 100]
    assert await high_watermark(coordinator) == 1
    # Once answered, the same batch again is a new attempt, judged by the coordinator (a
    # duplicate of what it holds).
    [late] = await appender.submit([idempotent(0)], timeout_ms=5000)
    assert (late.error, late.base_offset) == (ErrorCode.none, 0)
    assert store.put_bytes == [100, 100, 100]
    await appender.close()


async def test_a_different_batch_under_the_same_sequence_is_not_taken_for_a_retry(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    """Only the same bytes are a retry (each batch's CRC is compared): another batch claiming
    the same producer sequence is written and judged by the coordinator."""
    appender, store = await counted(coordinator, tmp_path, 0.3)
    original = appender.submit([idempotent(0)], timeout_ms=5000)
    changed = idempotent(0)
    data = bytearray(changed.records)
    data[17] = 1  # another CRC
    changed = PartitionAppend(TOPIC, 0, memoryview(bytes(data)), changed.batches, False)
    second = appender.submit([changed], timeout_ms=5000)
    assert [(r.error, r.base_offset) for r in await original] == [(0, 0)]
    # Written (both batches are in the object), not attached to the first; the coordinator
    # takes it for a duplicate of the first by its sequence numbers, as Kafka's producer
    # state would.
    assert sum(store.put_bytes) == 200
    assert [(r.error, r.base_offset) for r in await second] == [(0, 0)]
    assert await high_watermark(coordinator) == 1
    await appender.close()
