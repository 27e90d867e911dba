"""A diskless commit whose answer is lost (the coordinator's connection dies after the
statement was sent: committed or not, nobody knows) is resolved before the next commit:
its producers get the answer the commit decided, and a later request of the same producer
is never judged while an earlier one's fate is open.

The coordinator is the real one (each backend); faults are injected around it: an answer
lost after the commit ran or before it reached the database, lookups that fail while the
database is still away. The object store is a real local one."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.logs.diskless import diskless_append
from broker.logs.diskless.diskless_append import Appender
from broker.logs.partition_log import PartitionAppend, PartitionResult
from protocol.records import BatchHeader
from storage.coordinator import (
    BatchCoordinator,
    BatchToCommit,
    CommitResult,
    CoordinatorUnavailable,
)
from storage.objects.block_cache import BlockCache
from storage.objects.local import LocalObjectStore
from storage.partition_key import PartitionKey

TOPIC = uuid.uuid4()
PID = 4242


class LosesAnswers:
    """The real coordinator behind injected faults."""

    def __init__(self, inner: BatchCoordinator) -> None:
        self.inner = inner
        self.lose_after = 0  # commits that run, whose answer is then lost
        self.lose_before = 0  # commits lost on the way (never run), outcome unknown
        self.lookups_down = 0  # commit_outcome calls that fail (the database still away)
        self.committed: list[str] = []  # object keys, in the order they were committed

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def commit_file(
        self, key: str, size: int, node: int, batches: Sequence[BatchToCommit], now: int
    ) -> list[CommitResult]:
        if self.lose_before:
            self.lose_before -= 1
            raise CoordinatorUnavailable("connection reset while sending", outcome_unknown=True)
        result = await self.inner.commit_file(key, size, node, batches, now)
        self.committed.append(key)
        if self.lose_after:
            self.lose_after -= 1
            raise CoordinatorUnavailable("connection reset after sending", outcome_unknown=True)
        return result

    async def commit_outcome(
        self, key: str, batches: Sequence[BatchToCommit]
    ) -> list[CommitResult] | None:
        if self.lookups_down:
            self.lookups_down -= 1
            raise CoordinatorUnavailable("PostgreSQL unavailable")
        return await self.inner.commit_outcome(key, batches)


def idempotent(seq: int, size: int = 100) -> PartitionAppend:
    header = BatchHeader(0, size, 0, 0, 0, 0, PID, 0, seq, 1)
    return PartitionAppend(TOPIC, 0, memoryview(bytes(size)), [header], False)


async def started(coordinator: BatchCoordinator, tmp_path: Path) -> tuple[Appender, LosesAnswers]:
    await coordinator.create_logs([PartitionKey(TOPIC, 0)])
    store = LocalObjectStore(str(tmp_path / "objects"))
    await store.start()
    faulty = LosesAnswers(coordinator)
    appender = Appender(
        store, faulty, BlockCache(store), 1, commit_interval_ms=50,  # type: ignore[arg-type]
        buffer_max_bytes=1 << 20, on_commit=lambda _: None,
    )  # fmt: skip
    return appender, faulty


async def high_watermark(coordinator: BatchCoordinator) -> int:
    return (await coordinator.log_info([PartitionKey(TOPIC, 0)]))[0].high_watermark


OK = int(ErrorCode.none)


async def test_a_commit_that_ran_but_whose_answer_was_lost_is_acknowledged(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    appender, faulty = await started(coordinator, tmp_path)
    faulty.lose_after = 1
    [result] = await appender.submit([idempotent(0)])
    # Before: REQUEST_TIMED_OUT ("possibly persisted") although the record was in the log.
    assert (result.error, result.base_offset) == (OK, 0)
    assert await high_watermark(coordinator) == 1 and len(faulty.committed) == 1
    await appender.close()


async def test_a_commit_that_never_ran_is_committed_by_the_resolution(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    appender, faulty = await started(coordinator, tmp_path)
    faulty.lose_before = 1
    [result] = await appender.submit([idempotent(0)])
    assert (result.error, result.base_offset) == (OK, 0)
    assert await high_watermark(coordinator) == 1
    await appender.close()


async def test_a_later_request_is_judged_only_after_the_earlier_ones_fate_is_known(
    coordinator: BatchCoordinator, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The long nemesis run's duplicate: request 1's commit lost, request 2 committed
    first and refused OUT_OF_ORDER_SEQUENCE_NUMBER, librdkafka bumps its epoch and sends
    request 1's records again under new sequence numbers. Here request 1 is answered
    REQUEST_TIMED_OUT while the database is still away (its producer retries), and request
    2 waits until request 1 is committed: both in order, and the retry is a duplicate."""
    monkeypatch.setattr(diskless_append, "RESOLVE_ANSWER_S", 0.1)
    appender, faulty = await started(coordinator, tmp_path)
    faulty.lose_before = 1
    faulty.lookups_down = 4  # ~0.75 s of lookups failing (0.05 s doubling back-off)
    first = asyncio.ensure_future(appender.submit([idempotent(0)]))
    await asyncio.sleep(0.01)  # the first is flushed on its own
    second = asyncio.ensure_future(appender.submit([idempotent(1)]))
    [answer] = await first
    assert answer == PartitionResult(int(ErrorCode.request_timed_out))
    [later] = await second
    assert (later.error, later.base_offset) == (OK, 1)
    [retry] = await appender.submit([idempotent(0)])
    assert (retry.error, retry.base_offset) == (OK, 0)  # the duplicate: its first offset
    assert await high_watermark(coordinator) == 2
    await appender.close()
