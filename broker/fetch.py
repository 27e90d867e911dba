"""The fetch path: find batches → ranged reads through the cache → patched bytes.

Stored batches still carry the producer's baseOffset; the answer sends a 16-byte
patched prefix (baseOffset, batchLength, partitionLeaderEpoch — all outside the
CRC) followed by slices of cached blocks, so record bytes are never copied here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.server.metrics import METRICS
from protocol.codec import RecordChunks
from protocol.records import PATCHED_PREFIX_SIZE, patched_prefix
from storage.coordinator import BatchCoordinator, BatchLocation, FindRequest, FindResult
from storage.objects.block_cache import BlockCache
from storage.partition_key import PartitionKey

if TYPE_CHECKING:
    from broker.logs.classic.partition import ClassicPartition
    from broker.logs.partition_log import PartitionLog

LEADER_EPOCH = 0  # the one epoch there is without a controller (see Broker.leader_epoch)
# A replication fetch from a principal without CLUSTER_ACTION (not a replica id a client
# can send: consumers use -1, debugging consumers -2).
DENIED_REPLICA = -1000


def leader_epoch_error(requested: int, current: int) -> int:
    """Kafka's check of a client's current_leader_epoch (KIP-320): -1 is "not given"; older
    than ours FENCED_LEADER_EPOCH (the client refreshes its metadata), newer
    UNKNOWN_LEADER_EPOCH (this broker's metadata lags: the client retries)."""
    if requested < 0 or requested == current:
        return 0
    if requested < current:
        return int(ErrorCode.fenced_leader_epoch)
    return int(ErrorCode.unknown_leader_epoch)


class FetchSlot:
    """One requested partition of a Fetch: an immediate error, an index into the request's
    diskless finds, or a classic replica read from this broker's log (its tiered part
    too); the log that serves it fills it in (``broker.logs``)."""

    __slots__ = (
        "classic",
        "data",
        "error",
        "find_index",
        "log",
        "max_bytes",
        "offset",
        "partition",
        "preferred",
        "reader",
        "replica",
        "topic_key",
    )

    def __init__(
        self,
        topic_key: Any,
        partition: int,
        error: int,
        find_index: int,
        preferred: int = -1,
        log: PartitionKey | None = None,
    ) -> None:
        self.topic_key = topic_key
        self.partition = partition
        self.error = error
        self.find_index = find_index
        self.preferred = preferred  # KIP-392 preferred read replica, -1: none
        self.log = log  # set on redirects: their offsets are answered from log_info
        # A classic partition's replica on this broker (read from its local log).
        self.classic: ClassicPartition | None = None
        self.offset = 0
        self.max_bytes = 0
        self.replica = -1  # a follower's broker id for replication fetches
        self.data: bytes = b""
        # The log that opened the slot and reads it (``PartitionLog.open_read``).
        self.reader: PartitionLog | None = None


class FetchBudget:
    """The size limits of one Fetch answer, applied as Kafka's ``ReplicaManager.readFromLog``
    does: partitions are read in turn, each within its ``partition_max_bytes`` and what is
    left of the request's ``max_bytes``. Only the first batch of the first partition that
    returns data may exceed them (``minOneMessage``, KIP-74), so that a consumer always
    gets past a batch larger than its limits; every partition after it gets only what
    fits (none once the answer is full: no records, error NONE). The answer is thus never
    larger than max(max_bytes, that first batch's size)."""

    __slots__ = ("left", "min_one")

    def __init__(self, max_bytes: int) -> None:
        self.left = max(max_bytes, 0)
        self.min_one = True  # no partition returned data yet

    def copy(self) -> FetchBudget:
        other = FetchBudget(self.left)
        other.min_one = self.min_one
        return other

    def room(self, partition_max_bytes: int) -> int:
        """The bytes the next partition may read (beyond its first batch if ``min_one``)."""
        return max(0, min(partition_max_bytes, self.left))

    def take(self, size: int) -> None:
        """A partition returned ``size`` bytes."""
        if size > 0:
            self.min_one = False
            self.left = max(0, self.left - size)

    def keep(self, result: FindResult, partition_max_bytes: int) -> FindResult:
        """The part of a diskless partition's find result this budget leaves, taken from
        it. (The batch coordinator applies the same rule, but to the diskless partitions
        alone: classic and tiered ones of the same request share the budget.)"""
        room = self.room(partition_max_bytes)
        kept: list[BatchLocation] = []
        size = 0
        for batch in result.batches:
            if size + batch.byte_size > room and not (self.min_one and not kept):
                break
            kept.append(batch)
            size += batch.byte_size
        self.take(size)
        if len(kept) == len(result.batches):
            return result
        aborted = result.aborted
        if aborted is not None:
            # Those overlapping the batches still returned, as the coordinator answers.
            last = kept[-1].last_offset if kept else -1
            aborted = [a for a in aborted if a.first_offset <= last]
        return replace(result, batches=kept, aborted=aborted)


class CommitWatch:
    """Wakes long-polling fetches when a commit moves a partition past their offset."""

    def __init__(self) -> None:
        self._waiters: dict[tuple[UUID, int], list[tuple[asyncio.Future[None], int]]] = {}

    def notify(self, advanced: Sequence[tuple[UUID, int, int]]) -> None:
        for topic_id, partition, end_offset in advanced:
            waiters = self._waiters.get((topic_id, partition))
            if not waiters:
                continue
            for future, offset in waiters:
                if end_offset > offset and not future.done():
                    future.set_result(None)

    def wake(self, keys: Sequence[tuple[UUID, int]] | None) -> None:
        """Wake the waiters of these partitions (all of them for None) whatever their
        offset: another broker's commit, seen without its offsets; they look again."""
        if keys is None:
            waiter_lists = list(self._waiters.values())
        else:
            waiter_lists = [w for k in keys if (w := self._waiters.get(k))]
        for waiters in waiter_lists:
            for future, _offset in waiters:
                if not future.done():
                    future.set_result(None)

    async def wait(self, interests: Sequence[tuple[UUID, int, int]], timeout: float) -> None:
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entries = []
        for topic_id, partition, offset in interests:
            entry = (future, offset)
            self._waiters.setdefault((topic_id, partition), []).append(entry)
            entries.append(((topic_id, partition), entry))
        try:
            await asyncio.wait_for(future, timeout)
        except TimeoutError:
            pass
        finally:
            for key, entry in entries:
                waiters = self._waiters.get(key)
                if waiters is not None:
                    waiters.remove(entry)
                    if not waiters:
                        del self._waiters[key]


class Fetcher:
    def __init__(self, coordinator: BatchCoordinator, cache: BlockCache) -> None:
        self._coordinator = coordinator
        self._cache = cache

    async def find(
        self, requests: Sequence[FindRequest], max_total_bytes: int, read_committed: bool = False
    ) -> list[FindResult]:
        started = time.perf_counter()
        results = await self._coordinator.find_batches(requests, max_total_bytes, read_committed)
        METRICS.find_batches_seconds.observe(time.perf_counter() - started)
        return results

    async def read(
        self, results: Sequence[FindResult], leader_epochs: Sequence[int] | None = None
    ) -> list[RecordChunks | None]:
        """Record bytes for each result (None where it has no batches), with each
        result's partition leader epoch (``leader_epochs``, default LEADER_EPOCH)
        patched into its batches."""
        epochs = leader_epochs or [LEADER_EPOCH] * len(results)
        # Cache hits (the tail, nearly always) are answered inline; only misses become
        # coroutines: with 16 KiB batches a task per batch cost more than the read.
        pieces: list[list[bytes | memoryview]] = []
        misses: list[tuple[int, BatchLocation, int]] = []
        for result, epoch in zip(results, epochs, strict=True):
            for batch in result.batches:
                views = self._cache.read_cached(
                    batch.object_key, batch.byte_offset, batch.byte_size
                )
                if views is None:
                    misses.append((len(pieces), batch, epoch))
                    pieces.append([])
                else:
                    pieces.append(_patched(batch, epoch, views))
        if misses:
            loaded = await asyncio.gather(*(self._read_batch(b, e) for _, b, e in misses))
            for (index, _, _), parts in zip(misses, loaded, strict=True):
                pieces[index] = parts
        out: list[RecordChunks | None] = []
        pos = 0
        for result in results:
            if not result.batches:
                out.append(None)
                continue
            parts: list[bytes | memoryview] = []
            size = 0
            for batch in result.batches:
                parts.extend(pieces[pos])
                size += batch.byte_size
                pos += 1
            METRICS.fetched_bytes.inc(size)
            out.append(RecordChunks(parts, size))
        return out

    async def _read_batch(self, batch: BatchLocation, epoch: int) -> list[bytes | memoryview]:
        views = await self._cache.read(batch.object_key, batch.byte_offset, batch.byte_size)
        return _patched(batch, epoch, views)


def _patched(
    batch: BatchLocation, epoch: int, views: Sequence[memoryview]
) -> list[bytes | memoryview]:
    """The batch as sent: our 16-byte prefix, then its bytes after the stored prefix."""
    parts: list[bytes | memoryview] = [patched_prefix(batch.base_offset, batch.byte_size, epoch)]
    skip = PATCHED_PREFIX_SIZE
    for view in views:
        if skip >= len(view):
            skip -= len(view)
            continue
        parts.append(view[skip:] if skip else view)
        skip = 0
    return parts
