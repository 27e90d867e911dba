"""After a diskless flush fails with a storage error, the producer's next batches, sent before
it heard, reach the coordinator with a gap: they are answered KAFKA_STORAGE_ERROR (retried in
order, same sequence numbers), as Kafka refuses requests to a log that failed to append, not
OUT_OF_ORDER_SEQUENCE_NUMBER, which makes librdkafka bump its epoch and send again records a
timed-out request may have written (long run #5's duplicates).

The coordinator is the real one (each backend); the object store is a real local one whose
next PUT is made to fail."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

from kio.schema.errors import ErrorCode

from broker.logs.diskless.diskless_append import Appender
from storage.coordinator import BatchCoordinator
from storage.objects import Chunks, ObjectStoreError
from storage.objects.block_cache import BlockCache
from storage.objects.local import LocalObjectStore
from storage.partition_key import PartitionKey

from .test_lost_commit_answer import TOPIC, idempotent


class FailsPuts(LocalObjectStore):
    fail_next = 0

    async def put(self, key: str, chunks: Chunks) -> None:
        if self.fail_next:
            self.fail_next -= 1
            raise ObjectStoreError(f"put {key}: injected")
        await super().put(key, chunks)


async def appender_on(store: LocalObjectStore, coordinator: object) -> Appender:
    await store.start()
    return Appender(
        store, coordinator, BlockCache(store), 1, commit_interval_ms=20,  # type: ignore[arg-type]
        buffer_max_bytes=1 << 20, on_commit=lambda _: None,
    )  # fmt: skip


async def storage_error_then_retries(appender: Appender, fail_next: Callable[[], None]) -> None:
    """Seq 0 written; seq 1's flush fails (``fail_next``) while seq 2 is on its way in the
    next flush: both are answered KAFKA_STORAGE_ERROR, and their retries, in order with the
    same sequence numbers, are written once, one after the other."""
    [zero] = await appender.submit([idempotent(0)])
    assert zero.error == 0
    fail_next()
    first = asyncio.ensure_future(appender.submit([idempotent(1)]))
    await asyncio.sleep(0.05)  # its flush is under way: the next request is another flush
    second = asyncio.ensure_future(appender.submit([idempotent(2)]))
    [one], [two] = await first, await second
    assert one.error == ErrorCode.kafka_storage_error
    assert two.error == ErrorCode.kafka_storage_error  # was OUT_OF_ORDER_SEQUENCE_NUMBER
    [one] = await appender.submit([idempotent(1)])
    [two] = await appender.submit([idempotent(2)])
    assert (one.error, two.error) == (0, 0)
    assert two.base_offset == one.base_offset + 1


async def test_the_batches_after_a_failed_upload_are_a_storage_error_not_a_gap(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    await coordinator.create_logs([PartitionKey(TOPIC, 0)])
    store = FailsPuts(str(tmp_path / "objects"))
    appender = await appender_on(store, coordinator)

    def fail_next() -> None:
        store.fail_next = 1

    await storage_error_then_retries(appender, fail_next)
    # A gap that is not this broker's doing is still one.
    [four] = await appender.submit([idempotent(4)])
    assert four.error == ErrorCode.out_of_order_sequence_number
    await appender.close()


class FailsOneCommit:
    """The real coordinator, whose next commit fails with an error that is no outage (a
    backend's unexpected answer: long run #5's commit refused whole for a sealed log)."""

    def __init__(self, coordinator: BatchCoordinator) -> None:
        self._coordinator = coordinator
        self.fail_next = 0

    def __getattr__(self, name: str) -> object:
        return getattr(self._coordinator, name)

    async def commit_file(self, *args: object, **kwargs: object) -> object:
        if self.fail_next:
            self.fail_next -= 1
            raise RuntimeError("injected: an unexpected answer")
        return await self._coordinator.commit_file(*args, **kwargs)  # type: ignore[arg-type]


async def test_the_batches_after_an_unexpected_commit_failure_are_a_storage_error_too(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    await coordinator.create_logs([PartitionKey(TOPIC, 0)])
    failing = FailsOneCommit(coordinator)
    appender = await appender_on(LocalObjectStore(str(tmp_path / "objects")), failing)

    def fail_next() -> None:
        failing.fail_next = 1

    await storage_error_then_retries(appender, fail_next)
    await appender.close()
