"""The PySpark jobs end to end: stock clients produce to a cluster of two brokers on
SeaweedFS and PostgreSQL, the jobs run on local[2] Spark, stock clients read back.

* analytics: the Parquet tables equal what was produced;
* merge: runs while a producer and a consumer do; the consumer sees every record once,
  the topic's objects drop to a few, the merged-away objects are deleted after the grace;
* key compaction: latest value per key, tombstones by age, offsets as produced;
* a merge whose driver is killed midway, then re-run: consistent at every point.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

import pytest

from broker.config import BrokerConfig
from jobs import analytics, compact, merge, runtime
from jobs.rewrite import KEY_PREFIX, PAUSE_ENV
from sluice.cluster import LocalCluster
from storage.coordinator import ListBatchesRequest, StoredBatch
from tests.e2e._kafka import (
    Got,
    Msg,
    assert_exactly_once,
    confluent_consume,
    confluent_consumer,
    confluent_create_topic,
    confluent_produce,
    stream_through,
    unique_topic,
)

from .conftest import storage_settings
from .test_source import sluice_dev_metadata_log

pytestmark = pytest.mark.e2e

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


# ---------------------------------------------------------------- storage inspection


def topic_batches(config: BrokerConfig, topic: str) -> list[StoredBatch]:
    return [b for _, b in partition_batches(config, topic)]


def partition_batches(config: BrokerConfig, topic: str) -> list[tuple[int, StoredBatch]]:
    async def go() -> list[tuple[int, StoredBatch]]:
        topics = await (await runtime.catalog(config)).list_topics()
        t = next(t for t in topics if t.name == topic)
        coordinator = await runtime.coordinator(config)
        listings = await coordinator.list_batches(
            [ListBatchesRequest(t.topic_id, p) for p in range(t.partitions)]
        )
        return [(p, b) for p, listing in enumerate(listings) for b in listing.batches]

    return runtime.run(go())


def bucket_keys(config: BrokerConfig) -> set[str]:
    async def go() -> set[str]:
        store = await runtime.store(config)
        keys: set[str] = set()
        async for page in store.list_objects():
            keys.update(o.key for o in page)
        return keys

    return runtime.run(go())


def wait_until(check: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(0.2)


def content(got: list[Got]) -> list[tuple[Any, ...]]:
    return sorted((g.partition, g.offset, g.key, g.value, tuple(g.headers)) for g in got)


def test_a_sluice_dev_dir_in_the_working_directory_is_not_read(
    cluster: LocalCluster, config: BrokerConfig, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # After `sluice dev` (README, "Run it") ./.sluice holds another cluster's metadata log; a
    # job pointed at this cluster's PostgreSQL once read its topics from there ("unknown
    # topics"), so the suite failed when run from the checkout.
    sluice_dev_metadata_log(tmp_path / ".sluice")
    monkeypatch.chdir(tmp_path)
    topic = unique_topic("cwd")
    confluent_create_topic(cluster.bootstrap, topic, 2)
    runtime.close_all()  # this process's clients were opened elsewhere: resolve again
    try:
        names = runtime.run(_topic_names(config))
    finally:
        runtime.close_all()
    assert topic in names


async def _topic_names(config: BrokerConfig) -> set[str]:
    return {t.name for t in await (await runtime.catalog(config)).list_topics()}


# ---------------------------------------------------------------- analytics


def test_analytics_equals_what_was_produced(
    spark: Any, cluster: LocalCluster, config: BrokerConfig, tmp_path: Path
) -> None:
    topic = unique_topic("analytics")
    confluent_create_topic(cluster.bootstrap, topic, 3)
    rng = random.Random(7)
    base = 1_700_000_000_000
    sent: list[tuple[int, int, int, Msg]] = []  # partition, offset, timestamp, message
    n = 1500
    msgs = []
    for i in range(n):
        key = None if i % 50 == 0 else f"user-{i % 37}".encode()
        value = None if i % 40 == 1 else rng.randbytes(rng.randrange(0, 300))
        headers = [("trace", str(i).encode()), ("empty", None)] if i % 4 == 0 else []
        msgs.append(Msg(key, value, headers))
    # Every codec, explicit partitions and timestamps (not in order), spread over minutes.
    for c, codec in enumerate(CODECS):
        for p in range(3):
            idx = [i for i in range(n) if i % 3 == p and i % len(CODECS) == c]
            stamps = [base + (i * 997) % 400_000 for i in idx]
            placed = confluent_produce(
                cluster.bootstrap,
                topic,
                [msgs[i] for i in idx],
                partition=p,
                timestamps=stamps,
                **{"compression.type": codec},
            )
            for i, ts, (part, offset) in zip(idx, stamps, placed, strict=True):
                sent.append((part, offset, ts, msgs[i]))

    out = tmp_path / "analytics"
    options = analytics.AnalyticsOptions(str(out), window_ms=60_000, with_records=True)
    summary = analytics.run(spark, config, options, analytics.Selection(topics=(topic,)))
    assert summary["records"] == n

    def size(b: bytes | None) -> int:
        return len(b) if b is not None else 0

    by_partition: dict[int, list[tuple[int, int, Msg]]] = defaultdict(list)
    for p, offset, ts, m in sent:
        by_partition[p].append((offset, ts, m))
    rows = {r["partition"]: r for r in spark.read.parquet(str(out / "partitions")).collect()}
    assert set(rows) == {0, 1, 2}
    for p, items in by_partition.items():
        r = rows[p]
        keys = {m.key for _, _, m in items if m.key is not None}
        assert r["topic"] == topic
        assert r["records"] == len(items)
        assert r["key_bytes"] == sum(size(m.key) for _, _, m in items)
        assert r["value_bytes"] == sum(size(m.value) for _, _, m in items)
        assert r["header_bytes"] == sum(
            len(k.encode()) + size(v) for _, _, m in items for k, v in m.headers
        )
        assert r["null_keys"] == sum(1 for _, _, m in items if m.key is None)
        assert r["tombstones"] == sum(1 for _, _, m in items if m.value is None)
        assert (r["first_offset"], r["last_offset"]) == (0, len(items) - 1)
        assert r["high_watermark"] == len(items) and r["log_start_offset"] == 0
        assert r["first_timestamp"] == min(ts for _, ts, _ in items)
        assert r["last_timestamp"] == max(ts for _, ts, _ in items)
        # Approximate (HyperLogLog++, 1% rsd): exact at this size, allowed 3% off.
        assert abs(r["approx_distinct_keys"] - len(keys)) <= max(1, 0.03 * len(keys))
        assert r["stored_bytes"] > 0 and r["batches"] >= len(CODECS)

    topic_row = spark.read.parquet(str(out / "topics")).collect()
    assert [(t["topic"], t["records"], t["partitions"]) for t in topic_row] == [(topic, n, 3)]

    windows = Counter((p, ts - ts % 60_000) for p, _, ts, _ in sent)
    got_windows = {
        (w["partition"], w["window_start"]): w["records"]
        for w in spark.read.parquet(str(out / "windows")).collect()
    }
    assert got_windows == dict(windows)

    recs = spark.read.parquet(str(out / "records")).collect()
    got = sorted(
        (
            r["partition"],
            r["offset"],
            r["timestamp"],
            r["key"],
            r["value"],
            tuple((h["key"], h["value"]) for h in r["headers"]),
        )
        for r in recs
    )
    expected = sorted(
        (p, offset, ts, m.key, m.value, tuple(m.headers)) for p, offset, ts, m in sent
    )
    assert got == expected


# ---------------------------------------------------------------- merge


def test_merge_while_producing_and_consuming(
    spark: Any, cluster: LocalCluster, config: BrokerConfig
) -> None:
    topic = unique_topic("merge")
    partitions = 4
    total = 6000
    confluent_create_topic(cluster.bootstrap, topic, partitions)

    got: list[Got] = []
    stop = threading.Event()

    def consume() -> None:
        consumer = confluent_consumer(cluster.bootstrap, **{"fetch.wait.max.ms": 50})
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition

        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        try:
            while not stop.is_set():
                msg = consumer.poll(0.1)
                if msg is None or msg.error() is not None:
                    continue
                got.append(Got(msg.partition(), msg.offset(), msg.key(), msg.value(), []))
        finally:
            consumer.close()

    reader = threading.Thread(target=consume, daemon=True)
    reader.start()
    results: list[dict[str, Any]] = []
    before: dict[str, set[str]] = {}

    def run_merge() -> None:
        before["objects"] = {b.object_key for b in topic_batches(config, topic)}
        results.append(merge.run(spark, config, selection=merge.Selection(topics=(topic,))))

    # The merge starts once a third of the records are acknowledged, while the producer
    # (idempotent, paced) and the consumer go on.
    stream = stream_through(cluster.bootstrap, topic, total, run_merge, after_fraction=1 / 3)
    wait_until(lambda: len(got) >= total, 60, f"the consumer to read {total} records")
    time.sleep(0.5)  # anything extra (a duplicate) would arrive now
    stop.set()
    reader.join(10)
    assert_exactly_once(stream, got, partitions)

    first = results[0]
    assert first["statuses"] == {"ok": first["tasks"]}, first
    assert first["replacements_applied"] > 0 and first["replacements_conflicting"] == 0
    assert len(before["objects"]) >= 10, "too few flushes to merge"

    # Again, with the producer done: the rest is merged too, into a few objects.
    second = merge.run(spark, config, selection=merge.Selection(topics=(topic,)))
    assert second["statuses"].get("failed", 0) == 0, second
    objects_now = {b.object_key for b in topic_batches(config, topic)}
    assert len(objects_now) <= 2 and all(k.startswith(KEY_PREFIX) for k in objects_now)
    # A third run finds nothing to do.
    assert merge.run(spark, config, selection=merge.Selection(topics=(topic,)))["tasks"] == 0

    # The objects merged away are deleted by the brokers' cleaner after the grace period.
    wait_until(
        lambda: not (before["objects"] & bucket_keys(config)),
        20,
        "the merged-away objects to be deleted",
    )
    assert objects_now <= bucket_keys(config)
    # And a fresh consumer reads it all again, offsets unchanged.
    again = confluent_consume(cluster.bootstrap, topic, list(range(partitions)), expected=total)
    assert sorted((g.partition, g.offset, g.value) for g in again) == sorted(
        (g.partition, g.offset, g.value) for g in got
    )


# ---------------------------------------------------------------- key compaction


def test_key_compaction_keeps_latest_per_key_with_offsets(
    spark: Any, cluster: LocalCluster, config: BrokerConfig
) -> None:
    topic = unique_topic("compact")
    # Kafka (and Sluice) refuse keyless records on a compacted topic, so the unkeyed records
    # below are written while the topic is still cleanup.policy=delete; it becomes
    # compact,delete before the job runs, as when an operator switches a topic's policy.
    confluent_create_topic(cluster.bootstrap, topic, 2, {"cleanup.policy": "delete"})
    now = int(time.time() * 1000)
    old = now - 2 * 86_400_000  # older than delete.retention.ms (1 day)
    latest: dict[tuple[int, bytes], tuple[int, bytes | None]] = {}  # (p, key) -> offset, value
    unkeyed: list[tuple[int, int]] = []
    for rnd in range(4):
        for p in range(2):
            msgs, stamps = [], []
            for k in range(15):
                key = f"k{k}".encode()
                value: bytes | None = f"r{rnd}-p{p}-{k}".encode()
                ts = now - 1000
                if rnd == 3 and k % 5 == 0:
                    value = None  # a fresh tombstone: kept
                if rnd == 2 and k % 5 == 1:
                    value, ts = None, old  # an old tombstone, superseded anyway in round 3
                if rnd == 3 and k % 5 == 2:
                    value, ts = None, old  # an old tombstone, latest: dropped
                msgs.append(Msg(key, value))
                stamps.append(ts)
            msgs.append(Msg(None, f"unkeyed-{rnd}".encode()))
            stamps.append(now - 1000)
            placed = confluent_produce(
                cluster.bootstrap,
                topic,
                msgs,
                partition=p,
                timestamps=stamps,
                **{"compression.type": CODECS[rnd % len(CODECS)]},
            )
            for m, (part, offset) in zip(msgs, placed, strict=True):
                if m.key is None:
                    unkeyed.append((part, offset))
                else:
                    latest[(part, m.key)] = (offset, m.value)
    _set_cleanup_policy(cluster.bootstrap, topic, "compact,delete")
    # The active tail: one more record per partition, never compacted.
    tail = {
        p: confluent_produce(cluster.bootstrap, topic, [Msg(b"tail", b"x")], partition=p)[0][1]
        for p in range(2)
    }
    high = {p: tail[p] + 1 for p in range(2)}

    summary = compact.run(spark, config, selection=compact.Selection(topics=(topic,)))
    assert summary["statuses"] == {"ok": summary["tasks"]}, summary
    assert summary["replacements_applied"] == 2 and summary["records_dropped"] > 0

    expected = {
        (p, offset, key, value)
        for (p, key), (offset, value) in latest.items()
        if not (value is None and key in {f"k{k}".encode() for k in range(2, 15, 5)})
    }
    expected |= {(p, offset, None, f"unkeyed-{offset // 16}".encode()) for p, offset in unkeyed}
    expected |= {(p, tail[p], b"tail", b"x") for p in range(2)}
    got = confluent_consume(cluster.bootstrap, topic, [0, 1], expected=len(expected), timeout=30)
    assert {(g.partition, g.offset, g.key, g.value) for g in got} == expected
    assert len(got) == len(expected)
    # The high watermark does not move; a fresh tombstone is still there for consumers.
    assert any(g.value is None for g in got)
    assert {p: max(g.offset for g in got if g.partition == p) + 1 for p in range(2)} == high

    # Nothing new to compact: a re-run changes nothing.
    again = compact.run(spark, config, selection=compact.Selection(topics=(topic,)))
    assert again["replacements_applied"] == 0 and again["records_dropped"] == 0
    # Updates younger than min.compaction.lag.ms stay even when superseded.
    confluent_produce(cluster.bootstrap, topic, [Msg(b"k1", b"new"), Msg(b"k1", b"newer")], 0)
    confluent_produce(cluster.bootstrap, topic, [Msg(b"tail", b"y")], partition=0)
    lagged = compact.run(
        spark,
        config,
        compact.CompactOptions(min_compaction_lag_ms=3_600_000),
        compact.Selection(topics=(topic,)),
    )
    assert lagged["replacements_applied"] == 0
    # A topic without cleanup.policy=compact is refused.
    plain = unique_topic("plain")
    confluent_create_topic(cluster.bootstrap, plain, 1)
    with pytest.raises(ValueError, match=r"cleanup\.policy"):
        compact.run(spark, config, selection=compact.Selection(topics=(plain,)))


def _set_cleanup_policy(bootstrap: str, topic: str, policy: str) -> None:
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry("cleanup.policy", policy, incremental_operation=AlterConfigOpType.SET)
        ],
    )
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(timeout=20)


# ---------------------------------------------------------------- crash and re-run


def test_merge_driver_killed_midway_then_rerun_is_consistent(
    spark: Any, cluster: LocalCluster, config: BrokerConfig, tmp_path: Path
) -> None:
    topic = unique_topic("crash")
    partitions = 4
    confluent_create_topic(cluster.bootstrap, topic, partitions)
    for rnd in range(12):  # 12 flushes, each holding every partition
        msgs = [Msg(f"k{i}".encode(), f"{rnd}-{i}".encode() * 20) for i in range(40)]
        confluent_produce(cluster.bootstrap, topic, msgs, partition=None)
    produced = confluent_consume(cluster.bootstrap, topic, list(range(partitions)))
    batches = topic_batches(config, topic)
    assert len({b.object_key for b in batches}) >= 10

    props = tmp_path / "storage.properties"
    props.write_text("".join(f"{k}={v}\n" for k, v in storage_settings(cluster).items()))
    sluice = Path(sys.executable).parent / "sluice"
    cmd = [str(sluice), "jobs", "merge", "--config", str(props), "--topic", topic]
    # Tiny objects, so the job makes many commits; each is followed by a pause, so the
    # kill lands between commits of one run.
    cmd += ["--target-object-bytes", "3000", "--master", "local[1]"]
    log_path = tmp_path / "job.log"
    with open(log_path, "wb") as log:
        job = subprocess.Popen(
            cmd,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, PAUSE_ENV: "1.0"},
            start_new_session=True,
        )
    try:

        def merged() -> int:
            return sum(
                1 for b in topic_batches(config, topic) if b.object_key.startswith(KEY_PREFIX)
            )

        wait_until(lambda: merged() > 0 or job.poll() is not None, 120, "the job's first commit")
        assert job.poll() is None, log_path.read_text()[-3000:]
        job.send_signal(signal.SIGKILL)  # the driver, at once
        job.wait(10)
        done = merged()
    finally:
        # The driver's JVM exits when its stdin closes; make sure nothing is left behind.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(job.pid, signal.SIGKILL)
    assert 0 < done < len(batches), f"not midway: {done} of {len(batches)} batches merged"

    def consistent() -> None:
        now = partition_batches(config, topic)
        # Every pointer names an object that exists; each partition's batches still
        # cover its offsets exactly once (a merge leaves no gap and no overlap).
        assert {b.object_key for _, b in now} <= bucket_keys(config)
        for p in range(partitions):
            ranges = sorted((b.base_offset, b.last_offset) for q, b in now if q == p)
            assert ranges[0][0] == 0
            assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(ranges))
        got = confluent_consume(cluster.bootstrap, topic, list(range(partitions)))
        assert content(got) == content(produced)

    consistent()
    # The re-run finishes the job; a further run has nothing left.
    rerun = merge.run(
        spark,
        config,
        merge.MergeOptions(target_object_bytes=3000),
        merge.Selection(topics=(topic,)),
    )
    assert rerun["statuses"].get("failed", 0) == 0 and rerun["replacements_applied"] > 0, rerun
    consistent()
    assert all(b.object_key.startswith(KEY_PREFIX) for b in topic_batches(config, topic))
    final = merge.run(
        spark,
        config,
        merge.MergeOptions(target_object_bytes=3000),
        merge.Selection(topics=(topic,)),
    )
    assert final["tasks"] == 0, json.dumps(final)
    # Objects the killed job uploaded but never committed are orphans: the brokers' sweep
    # deletes them once older than orphan.grace.ms; every object left is referenced.
    referenced = {b.object_key for b in topic_batches(config, topic)}
    wait_until(
        lambda: (
            {k for k in bucket_keys(config) if k.startswith(KEY_PREFIX)}
            <= referenced | _other_merged(config, topic)
        ),
        30,
        "orphans of the killed job to be swept",
    )


def _other_merged(config: BrokerConfig, topic: str) -> set[str]:
    """Merged objects other tests' topics use (the bucket is shared by the module)."""

    async def go() -> set[str]:
        topics = await (await runtime.catalog(config)).list_topics()
        coordinator = await runtime.coordinator(config)
        requests = [
            ListBatchesRequest(t.topic_id, p)
            for t in topics
            if t.name != topic
            for p in range(t.partitions)
        ]
        listings = await coordinator.list_batches(requests)
        return {b.object_key for listing in listings for b in listing.batches}

    return runtime.run(go())
