"""Planning from a snapshot (no Spark, no storage): which batches the jobs rewrite."""

from __future__ import annotations

from uuid import UUID

from jobs.compact import CompactOptions
from jobs.compact import plan as compact_plan
from jobs.merge import MergeOptions
from jobs.merge import plan as merge_plan
from jobs.plan import PartitionSnapshot, read_tasks
from storage.catalog import Topic
from storage.coordinator import StoredBatch

NOW = 1_700_000_000_000
TOPIC = Topic("t", UUID(int=1), 2)


def b(
    key: str, base: int, last: int, size: int = 100, object_size: int = 1000, ts: int = 0
) -> StoredBatch:
    return StoredBatch(key, 0, size, base, last, 0, ts, -1, object_size, "produce", NOW - 10_000)


def snap(partition: int, *batches: StoredBatch, topic: Topic = TOPIC) -> PartitionSnapshot:
    hwm = batches[-1].last_offset + 1 if batches else 0
    return PartitionSnapshot(topic, partition, 0, hwm, list(batches))


def test_merge_groups_runs_of_small_objects_by_partition() -> None:
    snaps = [
        snap(0, b("a", 0, 1), b("big", 2, 3, object_size=10**9), b("b", 4, 5), b("c", 6, 9)),
        snap(1, b("a", 0, 0), b("b", 1, 1)),
    ]
    tasks = merge_plan(snaps, MergeOptions(small_object_bytes=10_000, target_object_bytes=250), NOW)
    # Runs never cross a batch that stays (the big object) and respect the target size.
    runs = [[(r.partition, r.base_offset) for r in run.refs] for t in tasks for run in t.runs]
    assert runs == [[(0, 0)], [(0, 4), (0, 6)], [(1, 0), (1, 1)]]
    assert [len(t.runs) for t in tasks] == [1, 1, 1]  # 100 + 200 bytes exceed 250
    bigger = merge_plan(
        snaps, MergeOptions(small_object_bytes=10_000, target_object_bytes=300), NOW
    )
    assert [len(t.runs) for t in bigger] == [2, 1]


def test_merge_skips_what_would_copy_one_object_and_young_objects() -> None:
    alone = [snap(0, b("only", 0, 1), b("only", 2, 3))]
    assert merge_plan(alone, MergeOptions(), NOW) == []
    young = [snap(0, b("a", 0, 1), b("b", 2, 3))]
    assert merge_plan(young, MergeOptions(min_age_ms=60_000), NOW) == []
    assert len(merge_plan(young, MergeOptions(), NOW)) == 1


def test_compaction_never_touches_the_active_tail() -> None:
    snaps = [snap(0, b("a", 0, 1, ts=NOW - 5000), b("b", 2, 3, ts=NOW - 10), b("c", 4, 5, ts=NOW))]
    runs = [
        [r.base_offset for r in run.refs]
        for t in compact_plan(snaps, CompactOptions(), NOW)
        for run in t.runs
    ]
    assert runs == [[0, 2]]  # the last batch is the tail
    lagged = compact_plan(snaps, CompactOptions(min_compaction_lag_ms=1000), NOW)
    assert [[r.base_offset for r in run.refs] for t in lagged for run in t.runs] == [[0]]
    configured = Topic("t", UUID(int=1), 1, {"min.compaction.lag.ms": "60000"})
    assert compact_plan([snap(0, *snaps[0].batches, topic=configured)], CompactOptions(), NOW) == []


def test_compaction_stops_at_the_last_stable_offset() -> None:
    s = snap(0, b("a", 0, 1), b("b", 2, 3), b("c", 4, 5), b("d", 6, 7))
    s.last_stable_offset = 4  # a transaction still open begins at offset 4
    runs = [
        [r.base_offset for r in run.refs]
        for t in compact_plan([s], CompactOptions(), NOW)
        for run in t.runs
    ]
    assert runs == [[0, 2]]
    s.last_stable_offset = 3  # inside a batch: that batch is not cleanable either
    runs = [
        [r.base_offset for r in run.refs]
        for t in compact_plan([s], CompactOptions(), NOW)
        for run in t.runs
    ]
    assert runs == [[0]]


def test_read_tasks_group_by_object_and_use_every_core() -> None:
    snaps = [snap(0, b("a", 0, 1), b("b", 2, 3)), snap(1, b("a", 0, 0), b("b", 1, 1))]
    tasks = read_tasks(snaps, parallelism=2)
    assert len(tasks) >= 2
    for t in tasks:
        assert len({r.object_key for r in t.refs}) == 1
        assert all(t.ends[(r.topic, r.partition)] == 4 - 2 * r.partition for r in t.refs)
    assert sorted((r.partition, r.base_offset) for t in tasks for r in t.refs) == [
        (0, 0),
        (0, 2),
        (1, 0),
        (1, 1),
    ]
