"""``sluice jobs compact``: key compaction for ``cleanup.policy=compact`` (and
``compact,delete``) topics, with Kafka's log cleaner semantics:

* the latest record per key stays; older records of a key go;
* a tombstone (null value) that is the latest of its key stays until it is older than
  ``delete.retention.ms`` (record timestamp), then goes too;
* the active tail is never compacted: the last batch of each partition, and every batch
  from the first one newer than ``min.compaction.lag.ms``;
* offsets stay: rewritten batches keep their base offset and lastOffsetDelta (records
  keep their offset deltas), batches left empty disappear; gaps appear, as in Kafka;
* records without a key are kept (Kafka refuses them on compacted topics; Sluice does
  not yet, and never drops data it cannot compact); control batches are kept whole.
* transactions: records of aborted transactions are dropped and never count as their
  key's latest; nothing at or past the last stable offset (the first record of a
  transaction still open) is cleaned, and records there do not supersede older ones
  yet; markers (control batches) are all kept, which is always correct: Kafka removes
  a marker only once no record of its transaction is left, after delete.retention.ms,
  and the jobs' own reads need the COMMIT markers of the records that remain.

Two Spark stages: (1) read key, offset, timestamp and tombstone flag of every cleanable
record and find, per key, the latest offset (a shuffle by key: the offset map of Kafka's
cleaner, distributed); (2) per rewrite task (consecutive batches of one partition), drop
the offsets stage 1 marked and write the new object (rewrite.py). Only ranges with
something to drop are rewritten, so a re-run with nothing new is a no-op.

Topic configs ``delete.retention.ms`` and ``min.compaction.lag.ms`` are read from the
topic when set there, else the job's options apply (Kafka's defaults: 1 day and 0).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from broker.config import BrokerConfig

from .plan import MiB, PartitionSnapshot, Selection, now_ms, snapshot, task_for
from .read import records
from .rewrite import RewriteTask, Run, run_task, summarize


@dataclass(frozen=True)
class CompactOptions:
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    target_object_bytes: int = 64 * MiB
    max_commit_delay_ms: int = 300_000


def is_compacted(configs: dict[str, str] | Any) -> bool:
    return "compact" in [p.strip() for p in configs.get("cleanup.policy", "delete").split(",")]


def _int_config(configs: Any, name: str, default: int) -> int:
    value = configs.get(name)
    return int(value) if value is not None else default


def plan(
    snapshots: Sequence[PartitionSnapshot], options: CompactOptions, now: int
) -> list[RewriteTask]:
    """Rewrite tasks over the cleanable batches of each partition."""
    tasks: list[RewriteTask] = []
    for s in snapshots:
        lag = _int_config(s.topic.configs, "min.compaction.lag.ms", options.min_compaction_lag_ms)
        cleanable = []
        stable = s.stable_end
        for b in s.batches[:-1]:  # the last batch is the active tail
            # Kafka's first uncleanable offset: the lag, and the first unstable offset
            # (an open transaction's records may yet commit or abort).
            if b.timestamp > now - lag or b.last_offset >= stable:
                break
            cleanable.append(b)
        current: list[Any] = []
        size = 0
        for b in cleanable:
            if current and size + b.byte_size > options.target_object_bytes:
                run = Run(s.topic.name, s.topic.topic_id, s.partition, s.refs(current))
                tasks.append(RewriteTask(len(tasks), [run]))
                current, size = [], 0
            current.append(b)
            size += b.byte_size
        if current:
            run = Run(s.topic.name, s.topic.topic_id, s.partition, s.refs(current))
            tasks.append(RewriteTask(len(tasks), [run]))
    return tasks


def run(
    spark: Any,
    config: BrokerConfig,
    options: CompactOptions | None = None,
    selection: Selection | None = None,
) -> dict[str, Any]:
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    options = options or CompactOptions()
    started = time.perf_counter()
    now = now_ms()
    selection = selection or Selection()
    snaps = [s for s in snapshot(config, selection) if is_compacted(s.topic.configs)]
    if selection.topics is not None:
        named = {s.topic.name for s in snaps}
        skipped = set(selection.topics) - named
        if skipped:
            raise ValueError(f"not cleanup.policy=compact: {', '.join(sorted(skipped))}")
    tasks = plan(snaps, options, now)
    if not tasks:
        out = summarize([], time.perf_counter() - started)
        out["records_dropped"] = 0
        return out

    # Stage 1: which offsets go. Only key, offset, time and a tombstone flag cross to
    # the JVM (keys_only), each row tagged with its rewrite task.
    # With the snapshot's bounds: the markers of the tasks' transactions may lie past
    # their batches (up to the high watermark) and are looked up there.
    read = [task_for(t.index, [r for run in t.runs for r in run.refs], snaps) for t in tasks]
    df, _ = records(spark, config, keys_only=True, tasks=read, snapshots=snaps)
    horizons = spark.createDataFrame(
        [
            (
                s.topic.name,
                now
                - _int_config(s.topic.configs, "delete.retention.ms", options.delete_retention_ms),
            )
            for s in {s.topic.name: s for s in snaps}.values()
        ],
        "topic string, horizon long",
    )
    # A key's latest is its latest record not aborted (null for a key with only
    # aborted records: they all go anyway).
    latest = F.max(F.when(~F.col("aborted"), F.col("offset"))).over(
        Window.partitionBy("topic", "partition", "key")
    )
    dropped = (
        df.join(F.broadcast(horizons), "topic")
        .withColumn("latest", latest)
        .where(
            F.col("aborted")
            | (
                F.col("key").isNotNull()
                & (
                    (F.col("offset") < F.col("latest"))
                    | (F.col("tombstone") & (F.col("timestamp") < F.col("horizon")))
                )
            )
        )
        .groupBy("task")
        .agg(F.sort_array(F.collect_list("offset")).alias("offsets"))
    )

    # Stage 2: rewrite the tasks with something to drop; the drop lists stay on the
    # executors (never collected to the driver).
    shipped = spark.sparkContext.broadcast(tasks)
    delay = options.max_commit_delay_ms

    def rewrite(row: Any) -> Any:
        task = shipped.value[row["task"]]
        return run_task(config, RewriteTask(task.index, task.runs, row["offsets"]), delay)

    results = dropped.rdd.map(rewrite).collect()
    out = summarize(results, time.perf_counter() - started)
    out["rewrite_tasks_planned"] = len(tasks)
    return out
