"""The read path's shared parts: a fetch's slots (one per partition asked for, whichever
log serves it), the response-size budget they share, and the watch that wakes a long poll
when a partition's data moves. The diskless engine's reader is in
``broker.logs.diskless.diskless_read``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import replace
from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode

from storage.coordinator import BatchLocation, FindResult
from storage.partition_key import PartitionKey

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
    too: the classic engine's ``ClassicSlot`` carries the replica); the log that opens a
    slot fills it in and reads it (``broker.logs``)."""

    __slots__ = (
        "data",
        "error",
        "find_index",
        "log",
        "max_bytes",
        "offset",
        "partition",
        "preferred",
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
        self.offset = 0
        self.max_bytes = 0
        self.replica = -1  # a follower's broker id for replication fetches
        self.data: bytes | memoryview = b""


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
