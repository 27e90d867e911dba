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
