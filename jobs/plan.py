"""Driver-side planning: one consistent coordinator snapshot, split into tasks.

A plan never holds record bytes: only where batches are (object, byte range) and which
offsets they carry. Tasks are plain picklable values shipped to executors.
"""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from broker.config import BrokerConfig
from storage.catalog import Topic
from storage.coordinator import (
    LATEST_TIMESTAMP,
    ListBatchesRequest,
    ListOffsetsRequest,
    StoredBatch,
)

from . import runtime

MiB = 1024 * 1024


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class BatchRef:
    """One stored batch, as a task needs it."""

    topic: str
    partition: int
    object_key: str
    byte_offset: int
    byte_size: int
    base_offset: int
    last_offset: int
    timestamp_type: int
    max_timestamp: int
    log_append_time: int


def ref(topic: str, partition: int, b: StoredBatch) -> BatchRef:
    return BatchRef(
        topic,
        partition,
        b.object_key,
        b.byte_offset,
        b.byte_size,
        b.base_offset,
        b.last_offset,
        b.timestamp_type,
        b.max_timestamp,
        b.log_append_time,
    )


@dataclass(slots=True)
class PartitionSnapshot:
    topic: Topic
    partition: int
    log_start_offset: int
    high_watermark: int
    batches: list[StoredBatch]
    # Where read_committed stops: the first offset of the oldest transaction still open
    # (-1: unknown, taken as the high watermark). Everything below it is decided, and
    # every marker deciding it is in the snapshot (see _snapshot).
    last_stable_offset: int = -1

    @property
    def stable_end(self) -> int:
        if self.last_stable_offset < 0:
            return self.high_watermark
        return min(self.last_stable_offset, self.high_watermark)

    def refs(self, batches: Iterable[StoredBatch] | None = None) -> list[BatchRef]:
        return [ref(self.topic.name, self.partition, b) for b in (batches or self.batches)]


@dataclass(frozen=True, slots=True)
class Selection:
    """Which data a job looks at: topics (None: all), partitions (None: all), an offset
    range applied to every chosen partition, and a record time range (ms, inclusive
    start, exclusive end; None: open)."""

    topics: tuple[str, ...] | None = None
    partitions: tuple[int, ...] | None = None
    from_offset: int = 0
    to_offset: int = -1  # exclusive; -1: the high watermark
    from_time: int | None = None
    to_time: int | None = None


async def selected_topics(config: BrokerConfig, selection: Selection) -> list[Topic]:
    """The topics a selection names (all when it names none), sorted by name; ValueError
    for a name the cluster does not have."""
    catalog = await runtime.catalog(config)
    topics = sorted(await catalog.list_topics(), key=lambda t: t.name)
    if selection.topics is not None:
        wanted = set(selection.topics)
        missing = wanted - {t.name for t in topics}
        if missing:
            raise ValueError(f"unknown topics: {', '.join(sorted(missing))}")
        topics = [t for t in topics if t.name in wanted]
    return topics


async def _snapshot(config: BrokerConfig, selection: Selection) -> list[PartitionSnapshot]:
    topics = await selected_topics(config, selection)
    coordinator = await runtime.coordinator(config)
    keys = [
        (t, p)
        for t in topics
        for p in range(t.partitions)
        if selection.partitions is None or p in selection.partitions
    ]
    # The last stable offsets are read BEFORE the batches: every transaction with a
    # record below an LSO had ended when it was read, so its marker is in the listing
    # taken after it. (Read after, a transaction ending in between would leave records
    # below the LSO whose marker the listing does not have.) LSOs only move forward, so
    # this one is at most the listing's own.
    stable = await coordinator.list_offsets(
        [ListOffsetsRequest(t.topic_id, p, LATEST_TIMESTAMP) for t, p in keys],
        read_committed=True,
    )
    # ONE call, one read transaction: every partition is seen at the same moment.
    listings = await coordinator.list_batches(
        [
            ListBatchesRequest(t.topic_id, p, selection.from_offset, selection.to_offset)
            for t, p in keys
        ]
    )
    out = []
    for (t, p), listing, lso in zip(keys, listings, stable, strict=True):
        if listing.error:
            continue  # deleted between the catalog read and the snapshot
        batches = listing.batches
        if selection.from_time is not None:
            # A batch whose largest timestamp is before the range holds no record in it.
            # (CreateTime records need not be ordered, so no bound for the end.)
            batches = [b for b in batches if b.timestamp >= selection.from_time]
        out.append(
            PartitionSnapshot(
                t,
                p,
                listing.log_start_offset,
                listing.high_watermark,
                batches,
                lso.offset if lso.error == 0 else -1,
            )
        )
    return out


def snapshot(config: BrokerConfig, selection: Selection | None = None) -> list[PartitionSnapshot]:
    return runtime.run(_snapshot(config, selection or Selection()))


@dataclass(slots=True)
class ReadTask:
    """Batches one executor task reads. ``ends`` is each partition's high watermark in
    the snapshot (how far to look for the markers of the task's transactions);
    ``stable`` its last stable offset (no record at or past it is read: that is where
    read_committed stops). A partition missing from either has no bound there."""

    index: int
    refs: list[BatchRef]
    ends: dict[tuple[str, int], int] = field(default_factory=dict)
    topic_ids: dict[str, object] = field(default_factory=dict)
    stable: dict[tuple[str, int], int] = field(default_factory=dict)

    @property
    def bytes(self) -> int:
        return sum(r.byte_size for r in self.refs)


def read_tasks(
    snapshots: Sequence[PartitionSnapshot], parallelism: int, max_task_bytes: int = 64 * MiB
) -> list[ReadTask]:
    """Split a snapshot into read tasks grouped by object: the batches of one object are
    read with a few coalesced ranged GETs instead of one per batch. Objects are packed
    into tasks of at most ``max_task_bytes`` (smaller when that leaves cores idle); one
    object larger than that is split by batches."""
    by_object: dict[str, list[BatchRef]] = defaultdict(list)
    for s in snapshots:
        for r in s.refs():
            by_object[r.object_key].append(r)
    total = sum(r.byte_size for refs in by_object.values() for r in refs)
    # Enough tasks to keep every core busy twice over, none above the cap.
    target = max(min(max_task_bytes, total // max(1, 2 * parallelism) + 1), 1)
    objects = [(k, sorted(refs, key=lambda r: r.byte_offset)) for k, refs in by_object.items()]
    groups = pack(sorted(objects, key=lambda o: o[0]), target)
    return [task_for(i, refs, snapshots) for i, refs in enumerate(groups)]


def task_for(index: int, refs: list[BatchRef], snapshots: Sequence[PartitionSnapshot]) -> ReadTask:
    """The read task of ``refs`` (any batches of the snapshot), with the bounds of their
    partitions it needs to resolve transactions."""
    parts = {(r.topic, r.partition) for r in refs}
    ends = {
        (s.topic.name, s.partition): s.high_watermark
        for s in snapshots
        if (s.topic.name, s.partition) in parts
    }
    stable = {
        (s.topic.name, s.partition): s.stable_end
        for s in snapshots
        if (s.topic.name, s.partition) in parts
    }
    names = {t for t, _ in parts}
    topic_ids = {s.topic.name: s.topic.topic_id for s in snapshots if s.topic.name in names}
    return ReadTask(index, refs, ends, topic_ids, stable)


def pack(objects: Sequence[tuple[str, list[BatchRef]]], target: int) -> list[list[BatchRef]]:
    """Greedy packing of objects' batches into groups of about ``target`` bytes."""
    groups: list[list[BatchRef]] = []
    current: list[BatchRef] = []
    size = 0
    for _key, refs in objects:
        for r in refs:
            if current and size + r.byte_size > target:
                groups.append(current)
                current, size = [], 0
            current.append(r)
            size += r.byte_size
    if current:
        groups.append(current)
    return groups
