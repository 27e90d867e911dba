"""Spark Structured Streaming's Kafka source and sink (spark-sql-kafka-0-10, the connector
PySpark users know: ``spark.read.format("kafka")``) against a Sluice broker, beside the jobs
that read the committed batches from the object store.

Every expectation comes from what a stock client (confluent-kafka) produced, as its delivery
reports said (partition, offset, timestamp), or from what it reads back:

* batch reads of a diskless and a classic topic: ``earliest``/``latest``, per-partition JSON
  offsets (``-2``/``-1`` included) and ``startingOffsetsByTimestamp``; with
  ``includeHeaders``, every column (key incl. null and empty, value incl. null, topic,
  partition, offset, timestamp, timestampType, headers with repeated names and null values)
  is asserted exactly;
* ``kafka.isolation.level=read_committed`` over committed and aborted transactions: the
  committed records at their offsets, the aborted ones only when reading uncommitted;
* a streaming read with a checkpoint, run three times (``availableNow``, ``processingTime``
  stopped while records were still arriving, ``availableNow``): the file sink holds every
  record exactly once;
* the Kafka sink, batch and streaming, of rows with key, value, headers and partition
  columns: read back by confluent-kafka as written.

The connector is the one Maven Central serves for PySpark 4.x on Scala 2.13
(sluice/launch/spark-kafka-pom.xml), on the shared session's class path (conftest.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import time
import uuid
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition

from tests.e2e._kafka import (
    Got,
    confluent_admin,
    confluent_consume,
    confluent_create_topic,
    unique_topic,
    wait_until,
)
from tests.e2e.conftest import SluiceBroker

pytestmark = pytest.mark.e2e

KINDS = {"diskless": {}, "classic": {"diskless.enable": "false"}}
# One record as Spark shows it: (partition, offset, key, value, headers, timestamp ms).
Row = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]
COLUMNS = (
    "topic",
    "partition",
    "offset",
    "key",
    "value",
    "headers",
    "unix_millis(timestamp) AS ts",
    "timestampType",
)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """``sluice dev``; or, with SLUICE_SPARK_KAFKA_ORACLE=1, Apache Kafka 4.4 (one KRaft
    node, sluice/launch/kafka.py): the same tests then show what Kafka does, both kinds of
    topic being Kafka's own."""
    workdir = tmp_path_factory.mktemp("spark-kafka")
    if os.environ.get("SLUICE_SPARK_KAFKA_ORACLE"):
        from sluice.launch.kafka import KafkaBroker

        kafka = KafkaBroker(workdir)
        kafka.start()
        try:
            yield kafka
        finally:
            kafka.stop()
        return
    b = SluiceBroker(workdir)
    b.start()
    try:
        yield b
        # Spark's consumers and producers must not have tripped anything inside the broker:
        # a handler exception is answered with a generic error clients retry through.
        logged = b.log_path.read_text(errors="replace")
        assert "Traceback" not in logged, logged[logged.index("Traceback") - 500 :][:4000]
    finally:
        with contextlib.suppress(Exception):
            b.stop()


def create_topic(broker: Any, topic: str, partitions: int, kind: str = "diskless") -> None:
    config = KINDS[kind] if isinstance(broker, SluiceBroker) else {}
    confluent_create_topic(broker.bootstrap, topic, partitions, config=config)


def produce(
    bootstrap: str, topic: str, records: Sequence[dict[str, Any]], **conf: Any
) -> list[Row]:
    """Produce ``records`` (``produce()`` keyword arguments) in order, flushing every few so
    the partitions hold several batches; returns the records where the delivery reports put
    them (partition, offset, timestamp), in order. (A delivery report carries no headers:
    those are the record's own.)"""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, **conf})
    delivered: list[Row] = []
    errors: list[str] = []

    def reporter(record: dict[str, Any]) -> Any:
        def report(err: Any, msg: Any) -> None:
            if err is not None:
                errors.append(str(err))
                return
            headers = list(record.get("headers") or [])
            delivered.append(
                (msg.partition(), msg.offset(), msg.key(), msg.value(), headers, msg.timestamp()[1])
            )

        return report

    for i, record in enumerate(records):
        producer.produce(topic, on_delivery=reporter(record), **record)
        if i % 7 == 6:
            producer.flush(30)
    assert producer.flush(30) == 0
    assert not errors, errors
    return delivered


def record_set(partitions: int, per_partition: int, base_ts: int) -> list[dict[str, Any]]:
    """Records as users write them: keys repeated, null and empty; a tombstone and an empty
    value; headers with a repeated name, a null value and binary bytes; explicit
    timestamps rising with the offset (so offsets can be found by time)."""
    out: list[dict[str, Any]] = []
    for i in range(per_partition):
        for p in range(partitions):
            n = i * partitions + p
            key: bytes | None = f"key-{n % 5}".encode()
            value: bytes | None = f"value-{n}-".encode() * (1 + n % 4)
            headers: list[tuple[str, bytes | None]] = []
            if n % 6 == 1:
                key = None
            if n % 11 == 3:
                key = b""
            if n % 13 == 5:
                value = None
            if n % 17 == 8:
                value = b""
            if n % 3 == 0:
                headers = [("seq", str(n).encode()), ("dup", b"first"), ("dup", b"second")]
            if n % 5 == 2:
                headers = [("null", None), ("bin", b"\x00\x01\xfe\xff")]
            if n == 9:
                value = bytes(range(256)) * 400  # a 100 KiB record, a batch of its own
            out.append(
                {
                    "partition": p,
                    "key": key,
                    "value": value,
                    "headers": headers,
                    "timestamp": base_ts + i * 1000 + p,
                }
            )
    return out


def spark_rows(df: Any, topic: str) -> list[Row]:
    """The DataFrame's records as delivery reports show them, by partition and offset; the
    columns Spark adds (topic, timestampType) checked on the way."""
    rows = []
    for r in df.selectExpr(*COLUMNS).collect():
        assert r.topic == topic
        assert r.timestampType == 0  # CreateTime, as produced
        headers = [(h.key, None if h.value is None else bytes(h.value)) for h in r.headers or []]
        rows.append(
            (
                r.partition,
                r.offset,
                None if r.key is None else bytes(r.key),
                None if r.value is None else bytes(r.value),
                headers,
                r.ts,
            )
        )
    return sorted(rows, key=lambda row: (row[0], row[1]))


def assert_rows(got: Sequence[Row], expected: Sequence[Row]) -> None:
    expected = sorted(expected, key=lambda row: (row[0], row[1]))
    for i, (g, e) in enumerate(zip(got, expected, strict=False)):
        assert g == e, f"row #{i} differs:\n  got      {_short(g)}\n  expected {_short(e)}"
    assert len(got) == len(expected), (
        f"{len(got)} rows, expected {len(expected)}: "
        f"{[_short(r) for r in (list(got) + list(expected))[min(len(got), len(expected)) :][:3]]}"
    )


def _short(row: Row) -> str:
    p, o, k, v, h, ts = row

    def cut(b: bytes | None) -> bytes | None:
        return None if b is None else b[:30] + (b"..." if len(b) > 30 else b"")

    return f"p{p}@{o} key={cut(k)!r} value={cut(v)!r} headers={h} ts={ts}"


def kafka_read(spark: Any, bootstrap: str, topic: str, **options: str) -> Any:
    """A batch read of ``topic`` (``subscribe``, unless ``assign`` is among ``options``)."""
    reader = (
        spark.read.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("includeHeaders", "true")
    )
    if "assign" not in options:
        reader = reader.option("subscribe", topic)
    for key, value in options.items():
        reader = reader.option(key, value)
    return reader.load()


@pytest.mark.parametrize("kind", KINDS)
def test_batch_read_with_offsets_and_headers(spark: Any, broker: Any, kind: str) -> None:
    bootstrap, topic = broker.bootstrap, unique_topic(f"spark-read-{kind}")
    create_topic(broker, topic, 3, kind)
    base_ts = int(time.time() * 1000) - 3_600_000
    produced = produce(bootstrap, topic, record_set(3, 20, base_ts))
    assert len(produced) == 60

    # earliest/latest (Spark's defaults for a batch read, named here): everything.
    everything = kafka_read(
        spark, bootstrap, topic, startingOffsets="earliest", endingOffsets="latest"
    )
    assert_rows(spark_rows(everything, topic), produced)

    # Per-partition offsets: -2 is the earliest, -1 the latest; each range [start, end).
    starting = {topic: {"0": 3, "1": -2, "2": 12}}
    ending = {topic: {"0": 11, "1": 6, "2": -1}}
    ranges = {0: (3, 11), 1: (0, 6), 2: (12, 20)}
    sliced = kafka_read(
        spark,
        bootstrap,
        topic,
        startingOffsets=json.dumps(starting),
        endingOffsets=json.dumps(ending),
    )
    want = [r for r in produced if ranges[r[0]][0] <= r[1] < ranges[r[0]][1]]
    assert_rows(spark_rows(sliced, topic), want)
    # The same with partitions assigned rather than subscribed: only those are read.
    assigned = kafka_read(
        spark,
        bootstrap,
        topic,
        assign=json.dumps({topic: [0, 2]}),
        startingOffsets=json.dumps({topic: {"0": 3, "2": 12}}),
        endingOffsets=json.dumps({topic: {"0": 11, "2": -1}}),
    )
    assert_rows(spark_rows(assigned, topic), [r for r in want if r[0] != 1])

    # By timestamp (ListOffsets with a time): the first offset at or after it, per
    # partition; a time after the last record of partition 2 finds none (offset -1), which
    # the "latest" strategy turns into its end.
    ts_of = {(r[0], r[1]): r[5] for r in produced}
    by_time = {topic: {"0": ts_of[(0, 5)], "1": ts_of[(1, 0)] - 1, "2": base_ts + 10**7}}
    timed = kafka_read(
        spark,
        bootstrap,
        topic,
        startingOffsetsByTimestamp=json.dumps(by_time),
        startingOffsetsByTimestampStrategy="latest",
    )
    want = [r for r in produced if (r[0] == 0 and r[1] >= 5) or r[0] == 1]
    assert_rows(spark_rows(timed, topic), want)

    # More read tasks than partitions: Spark splits the offset ranges, and each task's
    # consumer starts in the middle of a batch.
    split = kafka_read(spark, bootstrap, topic, minPartitions="10")
    assert split.rdd.getNumPartitions() > 3  # minPartitions is a hint: 9 here
    assert_rows(spark_rows(split, topic), produced)

    # DeleteRecords below offset 7 of partition 0: "earliest" is the new log start; an
    # offset below it is data loss (the fetch's OFFSET_OUT_OF_RANGE), which fails the read,
    # or with failOnDataLoss=false is skipped.
    admin = confluent_admin(bootstrap)
    for future in admin.delete_records([TopicPartition(topic, 0, 7)]).values():
        future.result(30)
    kept = [r for r in produced if r[0] != 0 or r[1] >= 7]
    assert_rows(spark_rows(kafka_read(spark, bootstrap, topic), topic), kept)
    below = json.dumps({topic: {"0": 2, "1": -2, "2": -2}})
    with pytest.raises(Exception, match="Some data may have been lost"):
        kafka_read(spark, bootstrap, topic, startingOffsets=below).collect()
    lossy = kafka_read(spark, bootstrap, topic, startingOffsets=below, failOnDataLoss="false")
    assert_rows(spark_rows(lossy, topic), kept)


@pytest.mark.parametrize("kind", KINDS)
def test_read_committed(spark: Any, broker: Any, kind: str) -> None:
    """Transactions committed and aborted, plain records between them: Spark's source with
    ``kafka.isolation.level=read_committed`` reads the committed ones at their offsets (the
    markers and aborted records leave gaps), ``read_uncommitted`` the aborted ones too."""
    bootstrap, topic = broker.bootstrap, unique_topic(f"spark-txn-{kind}")
    create_topic(broker, topic, 2, kind)
    txn = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"spark-{uuid.uuid4().hex[:8]}",
            # The open transaction below outlives two Spark reads: on a loaded machine more
            # than librdkafka's default 60 s, after which the broker aborts it (as Kafka's
            # coordinator does) and the commit is fenced.
            "transaction.timeout.ms": 600_000,
        }
    )
    txn.init_transactions(30)
    committed: list[Row] = []
    aborted: list[Row] = []
    for step in range(6):
        plain = [{"partition": p, "key": b"plain", "value": f"p{step}".encode()} for p in (0, 1)]
        committed += produce(bootstrap, topic, plain)
        txn.begin_transaction()
        fate = "abort" if step % 3 == 1 else "commit"
        delivered: list[Row] = []

        def report(err: Any, msg: Any, out: list[Row] = delivered) -> None:
            assert err is None, err
            out.append(
                (msg.partition(), msg.offset(), msg.key(), msg.value(), [], msg.timestamp()[1])
            )

        for i in range(3):
            txn.produce(
                topic,
                key=fate.encode(),
                value=f"{fate}-{step}-{i}".encode(),
                partition=i % 2,
                on_delivery=report,
            )
        txn.flush(30)
        if fate == "commit":
            txn.commit_transaction(30)
            committed += delivered
        else:
            txn.abort_transaction(30)
            aborted += delivered
    assert len(committed) == 12 + 12 and len(aborted) == 6
    # One more transaction left open, with a plain record after it on partition 0: the
    # latest offset Spark asks for (ListOffsets, read_committed) is then the last stable
    # offset, so neither shows until the transaction ends.
    txn.begin_transaction()
    open_txn: list[Row] = []

    def report_open(err: Any, msg: Any) -> None:
        open_txn.append(
            (msg.partition(), msg.offset(), msg.key(), msg.value(), [], msg.timestamp()[1])
        )

    txn.produce(topic, key=b"open", value=b"open", partition=0, on_delivery=report_open)
    txn.flush(30)
    after_open = produce(bootstrap, topic, [{"partition": 0, "key": b"plain", "value": b"late"}])

    committed_only = {"kafka.isolation.level": "read_committed"}
    read_committed = kafka_read(spark, bootstrap, topic, **committed_only)
    assert_rows(spark_rows(read_committed, topic), committed)
    uncommitted = kafka_read(spark, bootstrap, topic)
    assert_rows(spark_rows(uncommitted, topic), committed + aborted + open_txn + after_open)

    txn.commit_transaction(30)
    read_committed = kafka_read(spark, bootstrap, topic, **committed_only)
    assert_rows(spark_rows(read_committed, topic), committed + open_txn + after_open)


def test_streaming_read_resumes_from_its_checkpoint(
    spark: Any, broker: Any, tmp_path: Path
) -> None:
    """A query with a checkpoint into a file sink (exactly once: its own log names the
    files of committed micro-batches), run three times while the topic grows, the second
    run stopped while it still had records to read: every record lands in the sink once."""
    bootstrap, topic = broker.bootstrap, unique_topic("spark-stream")
    create_topic(broker, topic, 2)
    out, checkpoint = tmp_path / "out", tmp_path / "checkpoint"
    base_ts = int(time.time() * 1000) - 3_600_000
    records = record_set(2, 45, base_ts)
    produced = produce(bootstrap, topic, records[:40])

    def start(trigger: dict[str, Any]) -> Any:
        stream = (
            spark.readStream.format("kafka")
            .option("kafka.bootstrap.servers", bootstrap)
            .option("subscribe", topic)
            .option("includeHeaders", "true")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "16")  # several micro-batches per run
            .load()
        )
        return (
            stream.writeStream.format("parquet")
            .option("path", str(out))
            .option("checkpointLocation", str(checkpoint))
            .trigger(**trigger)
            .start()
        )

    def sunk() -> list[Row]:
        # The file sink's own log (_spark_metadata) lists the files of committed batches.
        return spark_rows(spark.read.parquet(str(out)), topic)

    query = start({"availableNow": True})
    query.awaitTermination(120)
    assert query.exception() is None
    assert [p["numInputRows"] for p in query.recentProgress if p["numInputRows"]] == [16, 16, 8]
    assert_rows(sunk(), produced)

    # A live query, records arriving while it runs; stopped once it has sunk one more
    # micro-batch, possibly in the middle of the next one (its offsets then in the
    # checkpoint's offset log, its output not committed: the next run does it again).
    query = start({"processingTime": "200 milliseconds"})
    try:
        produced += produce(bootstrap, topic, records[40:70])
        wait_until(lambda: len(sunk()) > 40, "the live query sinking a micro-batch", 120)
    finally:
        query.stop()
    assert query.exception() is None

    produced += produce(bootstrap, topic, records[70:])
    query = start({"availableNow": True})
    query.awaitTermination(120)
    assert query.exception() is None
    assert_rows(sunk(), produced)


def test_sink_batch_and_streaming(spark: Any, broker: Any, tmp_path: Path) -> None:
    """``write.format("kafka")`` of rows with key, value, headers and partition columns (a
    diskless topic), then a streaming copy of that topic into a classic one: confluent-kafka
    reads back what was written, partition by partition, in order."""
    from pyspark.sql.types import (
        ArrayType,
        BinaryType,
        IntegerType,
        StringType,
        StructField,
        StructType,
    )

    bootstrap = broker.bootstrap
    written, copied = unique_topic("spark-sink"), unique_topic("spark-sink-copy")
    create_topic(broker, written, 3)
    create_topic(broker, copied, 3, "classic")
    header = StructType([StructField("key", StringType()), StructField("value", BinaryType())])
    schema = StructType(
        [
            StructField("key", BinaryType()),
            StructField("value", BinaryType()),
            StructField("headers", ArrayType(header)),
            StructField("partition", IntegerType()),
        ]
    )
    rows = [
        r
        for r in (
            (
                rec["key"],
                rec["value"],
                [(k, v) for k, v in rec["headers"]],
                rec["partition"],
            )
            for rec in record_set(3, 12, 0)
        )
    ]
    # One Spark partition: its rows reach each Kafka partition in order.
    spark.createDataFrame(rows, schema).coalesce(1).write.format("kafka").option(
        "kafka.bootstrap.servers", bootstrap
    ).option("topic", written).save()
    got = confluent_consume(bootstrap, written, partitions=(0, 1, 2), expected=len(rows))
    want = [(p, k, v, list(h)) for k, v, h, p in rows]
    assert sorted(view(got), key=lambda g: (g[0], g[4])) == [
        (p, k, v, h, i)
        for p in range(3)
        for i, (_, k, v, h) in enumerate(w for w in want if w[0] == p)
    ]

    # Streaming: the written topic copied into the classic one, partition for partition.
    query = (
        spark.readStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("subscribe", written)
        .option("includeHeaders", "true")
        .option("startingOffsets", "earliest")
        .load()
        .selectExpr("key", "value", "headers", "partition")
        .writeStream.format("kafka")
        .option("kafka.bootstrap.servers", bootstrap)
        .option("topic", copied)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(availableNow=True)
        .start()
    )
    query.awaitTermination(120)
    assert query.exception() is None
    copy = confluent_consume(bootstrap, copied, partitions=(0, 1, 2), expected=len(rows))
    by_offset = lambda g: (g[0], g[4])  # noqa: E731
    assert sorted(view(copy), key=by_offset) == sorted(view(got), key=by_offset)


def view(got: Sequence[Got]) -> list[tuple[int, bytes | None, bytes | None, list[Any], int]]:
    """(partition, key, value, headers, offset) of what a consumer read."""
    return [(g.partition, g.key, g.value, list(g.headers), g.offset) for g in got]
