"""``sluice jobs merge``: rewrite many small flush objects into larger ones.

Every produce flush writes one object holding many partitions' batches, so a busy
cluster makes many small objects, each costing a GET per consumer read of any partition
in it. This job rewrites the live batches of small objects into objects grouped by
partition and offset (up to ``target_object_bytes``), swapping batch pointers atomically
(``replace_batches``): offsets never change, so producers and consumers go on during the
job and a consumer reading across a swap sees every record once. Old objects become
deleting when no batch is left in them; the brokers' cleaner deletes them after
``file.delete.delay.ms``.

Idempotent: a re-run plans from a new snapshot, in which merged objects are large (or
already hold exactly what a task would write, which is skipped).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from broker.config import BrokerConfig

from .plan import MiB, PartitionSnapshot, Selection, now_ms, snapshot
from .rewrite import RewriteTask, Run, TaskResult, run_task, summarize


@dataclass(frozen=True)
class MergeOptions:
    # Objects smaller than this are merged (a flush is at most produce.buffer.max.bytes).
    small_object_bytes: int = 16 * MiB
    target_object_bytes: int = 64 * MiB
    # Objects committed more recently than this are left alone (hot data is read from the
    # brokers' caches anyway; merging it early would only move it twice).
    min_age_ms: int = 0
    max_commit_delay_ms: int = 300_000


def plan(
    snapshots: Sequence[PartitionSnapshot],
    options: MergeOptions,
    now: int,
    parallelism: int = 1,
) -> list[RewriteTask]:
    """Tasks (one new object each) over runs of consecutive batches in small objects.

    Objects are cut at ``target_object_bytes``, or smaller when that would leave cores
    idle (never below ``small_object_bytes``, so merged objects are not small again)."""
    live = Counter(b.object_key for s in snapshots for b in s.batches)
    candidates = sum(
        b.byte_size
        for s in snapshots
        for b in s.batches
        if b.object_size < options.small_object_bytes
    )
    target = min(
        options.target_object_bytes,
        max(options.small_object_bytes, -(-candidates // max(1, parallelism))),
    )
    runs: list[Run] = []
    for s in snapshots:
        current: list[Any] = []
        size = 0
        for b in s.batches:
            small = b.object_size < options.small_object_bytes
            old_enough = b.committed_at <= now - options.min_age_ms
            if not (small and old_enough) or (current and size + b.byte_size > target):
                if current:
                    runs.append(Run(s.topic.name, s.topic.topic_id, s.partition, s.refs(current)))
                current, size = [], 0
                if not (small and old_enough):
                    continue
            current.append(b)
            size += b.byte_size
        if current:
            runs.append(Run(s.topic.name, s.topic.topic_id, s.partition, s.refs(current)))

    groups: list[list[Run]] = []
    size = 0
    for run in runs:
        if groups and groups[-1] and size + run.bytes <= target:
            groups[-1].append(run)
            size += run.bytes
        else:
            groups.append([run])
            size = run.bytes
    tasks = []
    for group in groups:
        keys = {r.object_key for run in group for r in run.refs}
        if len(keys) == 1 and live[next(iter(keys))] == sum(len(run.refs) for run in group):
            continue  # it would copy one object as it is: nothing gained
        tasks.append(RewriteTask(len(tasks), group))
    return tasks


def run(
    spark: Any,
    config: BrokerConfig,
    options: MergeOptions | None = None,
    selection: Selection | None = None,
) -> dict[str, Any]:
    options = options or MergeOptions()
    started = time.perf_counter()
    snaps = snapshot(config, selection)
    tasks = plan(snaps, options, now_ms(), spark.sparkContext.defaultParallelism)
    objects_before = len({b.object_key for s in snaps for b in s.batches})
    results = execute(spark, config, tasks, options.max_commit_delay_ms)
    out = summarize(results, time.perf_counter() - started)
    out["objects_before"] = objects_before
    out["source_objects"] = len({r.object_key for t in tasks for run in t.runs for r in run.refs})
    return out


def execute(
    spark: Any, config: BrokerConfig, tasks: Sequence[RewriteTask], max_commit_delay_ms: int
) -> list[TaskResult]:
    if not tasks:
        return []
    sc = spark.sparkContext
    shipped = sc.broadcast(list(tasks))
    return list(
        sc.parallelize(range(len(tasks)), len(tasks))
        .map(lambda i: run_task(config, shipped.value[i], max_commit_delay_ms))
        .collect()
    )
