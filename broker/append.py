"""The append path: buffer → one object for many partitions → one commit → answers.

Validated batches from every connection go into one buffer. It is flushed every
``produce.commit.interval.ms`` (counted from the first batch in an empty buffer) or
as soon as it holds ``produce.buffer.max.bytes``. A flush uploads one object and
then makes one coordinator call that assigns offsets to all its batches. Uploads
of consecutive flushes may overlap; commits happen strictly in flush order, so a
producer's pipelined requests keep their sequence order.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import NamedTuple
from uuid import UUID

from kio.schema.errors import ErrorCode

from protocol.records import BatchHeader, stamp_log_append_time
from storage.block_cache import BlockCache
from storage.coordinator import (
    BatchCoordinator,
    BatchToCommit,
    CommitResult,
    CoordinatorUnavailable,
)
from storage.object_store import ObjectStore, ObjectStoreError

from .metrics import METRICS

log = logging.getLogger(__name__)


@dataclass(slots=True)
class PartitionAppend:
    """One partition's records from one produce request, already validated."""

    topic_id: UUID
    partition: int
    records: memoryview
    batches: list[BatchHeader]
    log_append_time: bool


class FlushFailed(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error


class PartitionResult(NamedTuple):
    # A NamedTuple: one per partition of every produce request (frozen dataclasses are
    # several times slower to make).
    error: int
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1


class _Buffer:
    __slots__ = ("appends", "size", "waiters")

    def __init__(self) -> None:
        self.appends: list[PartitionAppend] = []
        self.size = 0
        # (future, number of appends it covers) in submission order
        self.waiters: list[tuple[asyncio.Future[list[PartitionResult]], int]] = []


CommitListener = Callable[[Sequence[tuple[UUID, int, int]]], None]


class Appender:
    def __init__(
        self,
        store: ObjectStore,
        coordinator: BatchCoordinator,
        cache: BlockCache,
        node_id: int,
        commit_interval_ms: int,
        buffer_max_bytes: int,
        on_commit: CommitListener,
    ) -> None:
        self._store = store
        self._coordinator = coordinator
        self._cache = cache
        self._node_id = node_id
        self._interval = commit_interval_ms / 1000
        self._max_bytes = buffer_max_bytes
        self._on_commit = on_commit
        self._buffer = _Buffer()
        self._timer: asyncio.TimerHandle | None = None
        self._previous_commit: asyncio.Future[None] | None = None
        self._flushes: set[asyncio.Task[None]] = set()

    def submit(self, appends: list[PartitionAppend]) -> asyncio.Future[list[PartitionResult]]:
        """Queue a request's partitions; the future resolves after their commit."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[PartitionResult]] = loop.create_future()
        if not appends:
            future.set_result([])
            return future
        buffer = self._buffer
        buffer.appends.extend(appends)
        for append in appends:
            buffer.size += len(append.records)
        buffer.waiters.append((future, len(appends)))
        if buffer.size >= self._max_bytes:
            self._flush()
        elif self._timer is None:
            self._timer = loop.call_later(self._interval, self._flush)
        return future

    def _flush(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        buffer, self._buffer = self._buffer, _Buffer()
        if not buffer.appends:
            return
        previous = self._previous_commit
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._previous_commit = done
        task = asyncio.create_task(self._upload_and_commit(buffer, previous, done))
        self._flushes.add(task)
        task.add_done_callback(self._flushes.discard)

    async def _upload_and_commit(
        self,
        buffer: _Buffer,
        previous: asyncio.Future[None] | None,
        done: asyncio.Future[None],
    ) -> None:
        try:
            results = await self._write(buffer, previous)
        except FlushFailed as exc:
            log.warning("flush of %d bytes failed: %s", buffer.size, exc)
            results = [PartitionResult(int(exc.error))] * len(buffer.appends)
        except Exception:
            log.exception("flush of %d bytes failed", buffer.size)
            results = [PartitionResult(int(ErrorCode.kafka_storage_error))] * len(buffer.appends)
        finally:
            done.set_result(None)
        pos = 0
        for future, count in buffer.waiters:
            if not future.done():
                future.set_result(results[pos : pos + count])
            pos += count

    async def _write(
        self, buffer: _Buffer, previous: asyncio.Future[None] | None
    ) -> list[PartitionResult]:
        now_ms = int(time.time() * 1000)
        chunks: list[bytes | memoryview | bytearray] = []
        to_commit: list[BatchToCommit] = []
        position = 0
        for append in buffer.appends:
            for batch in append.batches:
                data: bytes | memoryview | bytearray = append.records[
                    batch.offset : batch.offset + batch.size
                ]
                if append.log_append_time:
                    data = stamp_log_append_time(data, now_ms)
                chunks.append(data)
                to_commit.append(
                    BatchToCommit(
                        topic_id=append.topic_id,
                        partition=append.partition,
                        byte_offset=position,
                        byte_size=batch.size,
                        record_count=batch.record_count,
                        max_timestamp=batch.max_timestamp,
                        timestamp_type=1 if append.log_append_time else 0,
                        producer_id=batch.producer_id,
                        producer_epoch=batch.producer_epoch,
                        base_sequence=batch.base_sequence,
                    )
                )
                position += batch.size
        key = uuid.uuid4().hex
        started = time.perf_counter()
        try:
            await self._store.put(key, chunks)
            # The PUT alone: waiting for the previous flush's commit is not upload time.
            METRICS.upload_seconds.observe(time.perf_counter() - started)
        except ObjectStoreError as exc:
            # Nothing was acknowledged; producers retry (the error is retriable).
            raise FlushFailed(ErrorCode.kafka_storage_error, f"upload failed: {exc}") from exc
        finally:
            if previous is not None:
                await previous  # commits stay in flush order, failed or not
        self._cache.put_object(key, chunks)
        started = time.perf_counter()
        try:
            committed = await self._coordinator.commit_file(
                key, position, self._node_id, to_commit, now_ms
            )
        except CoordinatorUnavailable as exc:
            await self._discard_uncommitted(key, exc)
            error = (
                ErrorCode.request_timed_out
                if exc.outcome_unknown
                else ErrorCode.kafka_storage_error
            )
            raise FlushFailed(error, f"commit failed: {exc}") from exc
        METRICS.commit_seconds.observe(time.perf_counter() - started)
        METRICS.produced_bytes.inc(position)
        return self._per_partition(buffer.appends, committed)

    async def _discard_uncommitted(self, key: str, exc: CoordinatorUnavailable) -> None:
        """Delete an object whose commit certainly did not happen. When the outcome is
        unknown the object may be referenced, so it stays (an orphan at worst)."""
        self._cache.invalidate(key)
        if exc.outcome_unknown:
            log.warning("commit outcome of %s unknown; keeping the object", key)
            return
        try:
            await self._store.delete_many([key])
        except ObjectStoreError:
            log.warning("could not delete uncommitted object %s; it is left orphaned", key)

    def _per_partition(
        self, appends: list[PartitionAppend], committed: list[CommitResult]
    ) -> list[PartitionResult]:
        """Fold batch results into one result per partition append (Kafka answers per
        partition: the first batch's base offset, the first error)."""
        out: list[PartitionResult] = []
        advanced: list[tuple[UUID, int, int]] = []
        pos = 0
        for append in appends:
            results = committed[pos : pos + len(append.batches)]
            pos += len(append.batches)
            first = results[0]
            error = next((r.error for r in results if r.error), 0)
            if error:
                out.append(PartitionResult(error, log_start_offset=first.log_start_offset))
                continue
            last = results[-1]
            advanced.append(
                (
                    append.topic_id,
                    append.partition,
                    last.base_offset + append.batches[-1].record_count,
                )
            )
            out.append(
                PartitionResult(0, first.base_offset, first.log_append_time, first.log_start_offset)
            )
        if advanced:
            self._on_commit(advanced)
        return out

    async def close(self) -> None:
        """Flush what is buffered and wait for in-flight flushes."""
        self._flush()
        if self._flushes:
            await asyncio.gather(*self._flushes, return_exceptions=True)
