"""``sluice jobs analytics``: Parquet tables over committed records.

Tables (each a Parquet directory under the output directory, overwritten per run, so a
re-run after a crash simply replaces what a crashed run left):

* ``partitions``: per topic and partition: records, key/value/header bytes, null keys,
  tombstones, first/last offset, first/last record timestamp, approximate distinct keys,
  plus the snapshot's log start offset, high watermark, last stable offset and stored
  (batch) bytes. Records are read committed: up to the last stable offset, no record of
  an aborted transaction, no marker;
* ``topics``: the same rolled up per topic (distinct keys approximated across partitions);
* ``windows``: per topic, partition and time window (``window_ms``): records and bytes;
* ``records`` (optional, ``--records``): every record, partitioned by topic, for ad-hoc SQL.

``--out`` is a local (or Hadoop) path, or ``s3://bucket/prefix`` in the object store the broker
config names (jobs/output.py; there the records table is one file per task, not by topic).

Distinct keys are APPROXIMATE: Apache DataSketches HLL sketches (Spark's
``hll_sketch_agg``), ``hll_lg_k`` = 14 by default: about 0.8% relative standard error
(small counts come out exact in practice). Null keys are not counted.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Any

from broker.config import BrokerConfig

from . import output
from .plan import Selection
from .read import records


@dataclass(frozen=True)
class AnalyticsOptions:
    out: str
    window_ms: int = 60_000
    with_records: bool = False
    # DataSketches HLL sketch size: 2^lg_k buckets; relative standard error about
    # 1.04 / sqrt(2^lg_k): 0.8% at 14. Sketches merge, so topics roll up from partitions.
    hll_lg_k: int = 14


def run(
    spark: Any, config: BrokerConfig, options: AnalyticsOptions, selection: Selection | None = None
) -> dict[str, Any]:
    from pyspark import StorageLevel
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    started = time.perf_counter()
    df, snaps = records(spark, config, selection)
    if options.with_records:
        # The records table reads them too: decode once.
        df = df.persist(StorageLevel.MEMORY_AND_DISK)
    key_len = F.coalesce(F.length("key"), F.lit(0)).cast("long")
    value_len = F.coalesce(F.length("value"), F.lit(0)).cast("long")
    header_len = F.coalesce(
        F.aggregate(
            "headers",
            F.lit(0).cast("long"),
            lambda acc, h: (
                acc
                + F.coalesce(F.length(F.encode(h["key"], "UTF-8")), F.lit(0))
                + F.coalesce(F.length(h["value"]), F.lit(0))
            ),
        ),
        F.lit(0).cast("long"),
    )
    window = F.col("timestamp") - F.pmod(F.col("timestamp"), F.lit(options.window_ms))
    # ONE pass over the records: everything is aggregated per time window first, with a
    # mergeable distinct-keys sketch (DataSketches HLL); partitions and topics are then
    # rolled up from that small table, which is the only thing kept in memory.
    windows = (
        df.select(
            "topic",
            "partition",
            "offset",
            "timestamp",
            window.alias("window_start"),
            key_len.alias("kb"),
            value_len.alias("vb"),
            header_len.alias("hb"),
            F.col("key").isNull().cast("long").alias("nk"),
            F.col("value").isNull().cast("long").alias("ts"),
            "key",
        )
        .groupBy("topic", "partition", "window_start")
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.sum("kb").alias("key_bytes"),
            F.sum("vb").alias("value_bytes"),
            F.sum("hb").alias("header_bytes"),
            F.sum("nk").alias("null_keys"),
            F.sum("ts").alias("tombstones"),
            F.min("timestamp").alias("first_timestamp"),
            F.max("timestamp").alias("last_timestamp"),
            F.min("offset").alias("first_offset"),
            F.max("offset").alias("last_offset"),
            F.hll_sketch_agg("key", options.hll_lg_k).alias("keys"),
        )
        .persist(StorageLevel.MEMORY_AND_DISK)
    )
    try:
        rollup = [
            F.sum("records").alias("records"),
            F.sum("key_bytes").alias("key_bytes"),
            F.sum("value_bytes").alias("value_bytes"),
            F.sum("header_bytes").alias("header_bytes"),
            F.sum("null_keys").alias("null_keys"),
            F.sum("tombstones").alias("tombstones"),
            F.min("first_timestamp").alias("first_timestamp"),
            F.max("last_timestamp").alias("last_timestamp"),
        ]
        per_partition = windows.groupBy("topic", "partition").agg(
            *rollup,
            F.min("first_offset").alias("first_offset"),
            F.max("last_offset").alias("last_offset"),
            F.hll_union_agg("keys", True).alias("keys"),
        )
        # What the coordinator says about each partition, from the same snapshot.
        log_schema = T.StructType(
            [
                T.StructField("topic", T.StringType(), False),
                T.StructField("partition", T.IntegerType(), False),
                T.StructField("log_start_offset", T.LongType(), False),
                T.StructField("high_watermark", T.LongType(), False),
                T.StructField("last_stable_offset", T.LongType(), False),
                T.StructField("batches", T.LongType(), False),
                T.StructField("stored_bytes", T.LongType(), False),
            ]
        )
        logs = spark.createDataFrame(
            [
                (
                    s.topic.name,
                    s.partition,
                    s.log_start_offset,
                    s.high_watermark,
                    s.stable_end,
                    len(s.batches),
                    sum(b.byte_size for b in s.batches),
                )
                for s in snaps
            ],
            log_schema,
        )
        counts = ["records", "key_bytes", "value_bytes", "header_bytes", "null_keys", "tombstones"]
        partitions = (
            logs.join(per_partition, ["topic", "partition"], "left")
            .withColumn(
                "approx_distinct_keys",
                F.coalesce(F.hll_sketch_estimate("keys"), F.lit(0)).cast("long"),
            )
            .na.fill(0, counts)
        )
        topics = (
            partitions.groupBy("topic")
            .agg(
                F.count(F.lit(1)).alias("partitions"),
                *(F.sum(c).alias(c) for c in [*counts, "stored_bytes"]),
                F.min("first_timestamp").alias("first_timestamp"),
                F.max("last_timestamp").alias("last_timestamp"),
                F.hll_union_agg("keys", True).alias("keys"),
            )
            .withColumn(
                "approx_distinct_keys",
                F.coalesce(F.hll_sketch_estimate("keys"), F.lit(0)).cast("long"),
            )
            .drop("keys")
        )
        tables = {
            "windows": windows.drop("keys").withColumn(
                "window_end", F.col("window_start") + F.lit(options.window_ms)
            ),
            "partitions": partitions.drop("keys"),
            "topics": topics,
        }
        to_s3 = output.is_s3(options.out)
        for name, table in tables.items():
            if to_s3:
                output.write_small(table, options.out, name, config)
            else:
                table.coalesce(1).write.mode("overwrite").parquet(os.path.join(options.out, name))
        if options.with_records:
            if to_s3:
                output.write_large(df, options.out, "records", config)
            else:
                df.write.mode("overwrite").partitionBy("topic").parquet(
                    os.path.join(options.out, "records")
                )
        totals = windows.agg(F.sum("records"), F.sum("value_bytes")).first()
        return {
            "records": int(totals[0] or 0),
            "value_bytes": int(totals[1] or 0),
            "partitions": len(snaps),
            "seconds": round(time.perf_counter() - started, 3),
            "out": options.out,
        }
    finally:
        windows.unpersist()
        if options.with_records:
            df.unpersist()
