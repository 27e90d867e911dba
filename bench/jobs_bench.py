"""Benchmark of the PySpark jobs: decode rate per core, merge throughput, start-up time.

    .venv/bin/python -m bench.jobs_bench                 # PostgreSQL + SeaweedFS (local)
    .venv/bin/python -m bench.jobs_bench --embedded      # SQLite + local directory

1. decode: RecordBatch v2 -> columns (jobs.decode.decode_batch), one core, per codec;
   then decode + Arrow conversion, the whole per-record work of an executor;
2. start-up: a local[2] Spark session created cold, and its first (trivial) job;
3. read: the committed records of a topic through Spark (mapInArrow) on local[2], counted;
4. analytics: ``jobs.analytics`` (all tables, every record) on local[2] and on a local Spark
   standalone cluster (sluice/launch/spark.py: one worker, 2 executors of 1 core): records/s
   per core of each;
5. merge: many small flush objects (every one holding every partition) merged into
   64 MiB objects by ``jobs.merge`` on local[2]: MiB/s of batches read, rewritten, uploaded
   and swapped (Spark start-up excluded, planning included), next to the raw PUT throughput
   of the same store measured in the same run (64 MiB objects, 2 at a time).

Data is written straight through the storage API (``commit_file``), not through brokers,
so the figures are the jobs' alone. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

MiB = 1024 * 1024


def _batch(records: int, value_size: int, codec: int, seed: int) -> bytes:
    from aiokafka.record.default_records import DefaultRecordBatchBuilder

    b = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=codec,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 30,
    )
    rnd = os.urandom(value_size // 2)
    for i in range(records):
        # Half random, half repetitive: compressible like typical JSON-ish payloads.
        value = rnd + (b"%08d" % (seed + i)) * (value_size // 16)
        b.append(
            i, timestamp=1_700_000_000_000 + i, key=b"key-%d" % (i % 1000), value=value, headers=[]
        )
    return bytes(b.build())


def bench_decode(seconds: float = 2.0) -> dict[str, Any]:
    from jobs.decode import columns_to_arrow, decode_batch
    from jobs.read import arrow_schema

    out: dict[str, Any] = {}
    schema = arrow_schema()
    for codec, name in enumerate(["none", "gzip", "snappy", "lz4", "zstd"]):
        batches = [_batch(500, 100, codec, i * 500) for i in range(20)]
        for label, arrow in (("decode", False), ("decode+arrow", True)):
            for data in batches:  # warm-up: imports, allocator, caches
                decode_batch(data, "t", 0, 0)
            n = 0
            start = time.perf_counter()
            while time.perf_counter() - start < seconds:
                for data in batches:
                    d = decode_batch(data, "t", 0, n)
                    if arrow:
                        assert d.columns is not None
                        columns_to_arrow(d.columns, schema)
                    n += 500
            out[f"{label}/{name}"] = round(n / (time.perf_counter() - start))
    return out


async def _populate(
    config: Any, topic: str, objects: int, partitions: int, batch_records: int, value_size: int
) -> int:
    from jobs import runtime
    from storage.catalog import Topic
    from storage.coordinator import BatchToCommit
    from storage.partition_key import PartitionKey

    store = await runtime.store(config)
    coordinator = await runtime.coordinator(config)
    catalog = await runtime.catalog(config)
    t = Topic(topic, uuid.uuid4(), partitions)
    await catalog.create_topic(t)
    await coordinator.create_logs([PartitionKey(t.topic_id, p) for p in range(partitions)])
    batch = _batch(batch_records, value_size, 0, 0)
    total = 0
    sem = asyncio.Semaphore(8)

    async def flush(i: int) -> None:
        nonlocal total
        key = uuid.uuid4().hex
        chunks = [batch] * partitions
        async with sem:
            await store.put(key, chunks)
        commits = [
            BatchToCommit(
                t.topic_id, p, p * len(batch), len(batch), batch_records, 1_700_000_000_000, 0
            )
            for p in range(partitions)
        ]
        await coordinator.commit_file(
            key, len(batch) * partitions, 1, commits, int(time.time() * 1000)
        )
        total += len(batch) * partitions

    await asyncio.gather(*(flush(i) for i in range(objects)))
    return total


def _analytics(spark: Any, config: Any, out: Path, cores: int) -> dict[str, Any]:
    from jobs import analytics

    options = analytics.AnalyticsOptions(str(out), with_records=True)
    analytics.run(spark, config, options)  # warms the Python workers up
    started = time.perf_counter()
    summary = analytics.run(spark, config, options)
    seconds = time.perf_counter() - started
    return {
        "records": summary["records"],
        "seconds": round(seconds, 2),
        "records_per_s": round(summary["records"] / seconds),
        "records_per_s_per_core": round(summary["records"] / seconds / cores),
    }


def _raw_put_ratio(config: Any, cluster: Any, root: Path, merged: dict[str, Any]) -> Any:
    """The merge's MiB/s against the same store's raw writes, measured now."""
    from bench.limits import S3Target, fsync_write_mib_s, raw_put

    if cluster is None:
        raw = fsync_write_mib_s(root, seconds=2.0, size=64 * MiB)
        kind = "fsync'd 64 MiB writes"
    else:
        s3 = cluster.s3
        target = S3Target(s3.endpoint_url, s3.access_key, s3.secret_key, s3.bucket, s3.region)
        raw = raw_put(target, 64 * MiB, 2, seconds=4.0, min_puts=4).mib_s
        kind = "raw PUTs of 64 MiB, 2 at a time"
    return {
        "raw_mib_per_s": round(raw, 1),
        "raw": kind,
        "merge_fraction_of_raw": round(merged["read_mib_per_s"] / raw, 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--embedded", action="store_true", help="SQLite + local directory")
    parser.add_argument("--objects", type=int, default=200, help="flush objects to merge")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--batch-records", type=int, default=200)
    parser.add_argument("--value-size", type=int, default=200)
    args = parser.parse_args()

    result: dict[str, Any] = {"decode_records_per_s_one_core": bench_decode()}
    root = Path(tempfile.mkdtemp(prefix="sluice-jobs-bench-"))
    cluster = None
    try:
        from broker.config import load_config

        if args.embedded:
            config = load_config({"data.dir": str(root / "data")})
            os.makedirs(config.data_dir, exist_ok=True)
        else:
            from sluice.cluster import LocalCluster

            cluster = LocalCluster(root / "cluster", 1)
            cluster.up()
            settings = cluster.broker_settings(cluster.brokers[0])
            config = load_config(
                {
                    k: v
                    for k, v in settings.items()
                    if k.startswith(("object.store", "s3.", "coordinator"))
                }
            )
        from jobs import merge, runtime
        from jobs.read import records
        from jobs.spark import session

        topic = "bench"
        stored = runtime.run(
            _populate(
                config, topic, args.objects, args.partitions, args.batch_records, args.value_size
            )
        )
        started = time.perf_counter()
        spark = session("local[2]")
        result["startup_session_s"] = round(time.perf_counter() - started, 2)
        started = time.perf_counter()
        spark.range(1).count()
        result["startup_first_job_s"] = round(time.perf_counter() - started, 2)

        for _attempt in range(2):  # the first pass also warms the Python workers up
            started = time.perf_counter()
            df, _ = records(spark, config)
            count = df.count()
            seconds = time.perf_counter() - started
        result["read_local2"] = {
            "records": count,
            "seconds": round(seconds, 2),
            "records_per_s": round(count / seconds),
            "records_per_s_per_core": round(count / seconds / 2),
            "stored_mib": round(stored / MiB, 1),
        }
        result["analytics_local2"] = _analytics(spark, config, root / "out-local", cores=2)
        spark.stop()
        from sluice.launch.spark import standalone_cluster

        with standalone_cluster(root / "spark", cores=2) as master:
            on_cluster = session(
                master,
                app_name="sluice-bench",
                conf={"spark.executor.cores": "1", "spark.cores.max": "2"},
            )
            result["analytics_standalone_2_executors"] = _analytics(
                on_cluster, config, root / "out-cluster", cores=2
            )
            on_cluster.stop()
        spark = session("local[2]")
        summary = merge.run(spark, config)
        result["merge_local2"] = {
            "objects_before": summary["objects_before"],
            "objects_written": summary["objects_written"],
            "mib": round(summary["read_bytes"] / MiB, 1),
            "seconds": summary["seconds"],
            "mib_per_s": summary["read_mib_per_s"],
            "statuses": summary["statuses"],
        }
        result["merge_vs_raw_put"] = _raw_put_ratio(config, cluster, root, summary)
        result["backend"] = "sqlite+local" if args.embedded else "postgresql+seaweedfs"
        spark.stop()
        runtime.close_all()
    finally:
        if cluster is not None:
            cluster.down()
            cluster.remove_data()
        shutil.rmtree(root, ignore_errors=True)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
