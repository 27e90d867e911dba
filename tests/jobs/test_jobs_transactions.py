"""The PySpark jobs on topics written by transactional confluent-kafka producers, with
plain records interleaved: committed and aborted transactions, and one left open.

* analytics and the Iceberg export (and the records DataFrame under them, however the
  batches are split into read tasks) hold exactly the committed records below the last
  stable offset: what a read_committed consumer sees; no aborted record, no marker,
  nothing of the open transaction nor anything after its start. Once it commits, the
  next Iceberg run appends the rest;
* merge: every marker (offset, producer, type), the aborted-transactions index and the
  high watermarks are as before; read_committed and read_uncommitted consumers see what
  they saw, at the same offsets;
* key compaction, as Kafka's cleaner does it: aborted records are discarded and never
  count as a key's latest; nothing at or past the last stable offset is cleaned (a record
  there does not supersede an older one yet); markers stay; both isolation levels then
  show what the model below says, offsets as produced.

The expectations come from a ledger of what the clients produced (offsets from delivery
reports, the fate of each transaction), and a read_committed consumer is first checked
against that ledger, so the jobs are compared with the broker's own view.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Producer, TopicPartition

from broker.config import BrokerConfig
from jobs import analytics, compact, iceberg, merge, runtime
from jobs.decode import ABORT, COMMIT, decode_batch
from jobs.fetch import read_batches
from jobs.plan import BatchRef, ReadTask, Selection, read_tasks, snapshot, task_for
from jobs.read import decode_task
from jobs.rewrite import KEY_PREFIX
from sluice.cluster import LocalCluster
from storage.coordinator import FindRequest, ListBatchesRequest
from tests.e2e._kafka import (
    confluent_consume,
    confluent_consumer,
    confluent_create_topic,
    unique_topic,
)

pytestmark = pytest.mark.e2e

COMMITTED = {"isolation.level": "read_committed"}
UNCOMMITTED = {"isolation.level": "read_uncommitted"}

PLAIN, COMMITTED_TXN, ABORTED_TXN, OPEN_TXN = "plain", "committed", "aborted", "open"

Headers = tuple[tuple[str, bytes | None], ...]
Row = tuple[int, int, bytes | None, bytes | None, Headers]  # partition, offset, key, value, hdrs


@dataclass(frozen=True)
class Rec:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    fate: str

    def row(self) -> Row:
        return (self.partition, self.offset, self.key, self.value, self.headers)


class Ledger:
    """What the clients wrote, where it landed, and what became of it."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.recs: list[Rec] = []
        self.markers = 0  # control batches the transactions wrote (one per partition)
        # (partition, first offset) of each aborted transaction: the aborted index's keys
        self.aborted: set[tuple[int, int]] = set()
        # Idempotent: a retry on a busy machine must not write a record twice (the
        # ledger is exact); its batches carry a producer id without being transactional.
        self.plain = Producer(
            {"bootstrap.servers": bootstrap, "linger.ms": 5, "enable.idempotence": True}
        )
        self._txn: dict[Producer, list[Rec]] = {}

    def producer(self, **extra: object) -> Producer:
        p = Producer(
            {
                "bootstrap.servers": self.bootstrap,
                "transactional.id": f"jobs-txn-{uuid.uuid4().hex[:8]}",
                "linger.ms": 5,
                **extra,
            }
        )
        p.init_transactions(30)
        return p

    def send(
        self,
        producer: Producer | None,
        label: str,
        partitions: Sequence[int],
        keys: Sequence[bytes | None],
        *,
        tombstone: bool = False,
    ) -> None:
        """One record per key and partition, flushed: in the log (its own object) before
        anything else happens."""
        items = [(p, k) for p in partitions for k in keys]
        placed: list[tuple[int, int] | None] = [None] * len(items)
        errors: list[str] = []
        client = producer or self.plain
        if producer is not None and producer not in self._txn:
            producer.begin_transaction()
            self._txn[producer] = []

        def on_delivery(i: int) -> Any:
            def cb(err: Any, msg: Any) -> None:
                if err is not None:
                    errors.append(str(err))
                else:
                    placed[i] = (msg.partition(), msg.offset())

            return cb

        sent = []
        for i, (p, k) in enumerate(items):
            value = None if tombstone else f"{label}-p{p}-{k!r}".encode()
            headers: Headers = (("label", label.encode()), ("empty", None)) if i % 3 == 0 else ()
            client.produce(
                self.topic,
                key=k,
                value=value,
                headers=list(headers) or None,
                partition=p,
                on_delivery=on_delivery(i),
            )
            sent.append((k, value, headers))
        assert client.flush(30) == 0 and not errors, errors
        fate = PLAIN if producer is None else OPEN_TXN
        batch = []
        for (k, value, headers), where in zip(sent, placed, strict=True):
            assert where is not None
            batch.append(Rec(where[0], where[1], k, value, headers, fate))
        if producer is None:
            self.recs += batch
        else:
            self._txn[producer] += batch

    def end(self, producer: Producer, commit: bool) -> None:
        recs = self._txn.pop(producer)
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
        fate = COMMITTED_TXN if commit else ABORTED_TXN
        self.recs += [Rec(r.partition, r.offset, r.key, r.value, r.headers, fate) for r in recs]
        self.markers += len({r.partition for r in recs})
        if not commit:
            for p in {r.partition for r in recs}:
                self.aborted.add((p, min(r.offset for r in recs if r.partition == p)))

    def still_open(self) -> list[Rec]:
        return [r for recs in self._txn.values() for r in recs]

    def all_recs(self) -> list[Rec]:
        return self.recs + self.still_open()

    def lso(self, partitions: int) -> dict[int, int]:
        """Per partition the last stable offset: the open transactions' first offset, else
        the high watermark (every offset taken by a record or a marker)."""
        hw = self.high_watermarks(partitions)
        out = {}
        for p in range(partitions):
            firsts = [r.offset for r in self.still_open() if r.partition == p]
            out[p] = min(firsts, default=hw[p])
        return out

    def high_watermarks(self, partitions: int) -> dict[int, int]:
        # read_uncommitted: librdkafka's default (read_committed) answers the LSO here.
        consumer = confluent_consumer(self.bootstrap, **UNCOMMITTED)
        try:
            return {
                p: consumer.get_watermark_offsets(
                    TopicPartition(self.topic, p), timeout=10, cached=False
                )[1]
                for p in range(partitions)
            }
        finally:
            consumer.close()

    def committed_view(self, lso: dict[int, int]) -> set[Row]:
        """What read_committed shows: plain and committed records below the LSO."""
        return {
            r.row()
            for r in self.recs
            if r.fate in (PLAIN, COMMITTED_TXN) and r.offset < lso[r.partition]
        }


def rows(got: Sequence[Any]) -> set[Row]:
    """Consumer output (tests.e2e._kafka.Got) as comparable rows; asserts no duplicate."""
    out = {(g.partition, g.offset, g.key, g.value, tuple(g.headers)) for g in got}
    assert len(out) == len(got), "a record came twice"
    return out


def spark_rows(collected: Sequence[Any]) -> set[Row]:
    def b(v: Any) -> bytes | None:
        return None if v is None else bytes(v)

    out = {
        (
            r["partition"],
            r["offset"],
            b(r["key"]),
            b(r["value"]),
            tuple((h["key"], b(h["value"])) for h in (r["headers"] or [])),
        )
        for r in collected
    }
    assert len(out) == len(collected), "a record came twice"
    return out


def read_rows(
    config: BrokerConfig, topic: str, tasks: Sequence[ReadTask] | None = None
) -> set[Row]:
    """What the jobs read (jobs.read.decode_task, the body of every Spark read task), run
    here in the driver: the same code as on executors, without a Spark job per check."""
    snaps = snapshot(config, Selection(topics=(topic,)))
    if tasks is None:
        tasks = read_tasks(snaps, 2)
    out: list[Row] = []
    for task in tasks:
        for _t, p, cols in decode_task(config, task, Selection()):
            out += [
                (p, o, k, v, tuple(h))
                for o, k, v, h in zip(cols.offset, cols.key, cols.value, cols.headers, strict=True)
            ]
    assert len(set(out)) == len(out), "a record came twice"
    return set(out)


def consume(bootstrap: str, topic: str, partitions: int, expected: int, **iso: object) -> set[Row]:
    got = confluent_consume(bootstrap, topic, list(range(partitions)), expected=expected, **iso)
    return rows(got)


# ---------------------------------------------------------------- storage inspection


@dataclass(frozen=True)
class Stored:
    partition: int
    base_offset: int
    last_offset: int
    producer_id: int
    control: int | None  # ABORT / COMMIT for a marker
    offsets: tuple[int, ...]  # the records' offsets (compaction leaves gaps)


def stored(config: BrokerConfig, topic: str) -> list[Stored]:
    """Every stored batch of the topic, decoded from the objects the coordinator names."""

    async def go() -> list[tuple[BatchRef, Any]]:
        [snap_topic] = [
            t for t in await (await runtime.catalog(config)).list_topics() if t.name == topic
        ]
        coordinator = await runtime.coordinator(config)
        listings = await coordinator.list_batches(
            [ListBatchesRequest(snap_topic.topic_id, p) for p in range(snap_topic.partitions)]
        )
        refs = [
            BatchRef(
                topic,
                p,
                b.object_key,
                b.byte_offset,
                b.byte_size,
                b.base_offset,
                b.last_offset,
                b.timestamp_type,
                b.max_timestamp,
                b.log_append_time,
            )
            for p, listing in enumerate(listings)
            for b in listing.batches
        ]
        got = await read_batches(await runtime.store(config), refs)
        return [(r, got[r]) for r in refs]

    out = []
    for r, data in runtime.run(go()):
        d = decode_batch(data, topic, r.partition, r.base_offset)
        offsets = tuple(d.columns.offset) if d.columns is not None else (r.base_offset,)
        out.append(
            Stored(r.partition, r.base_offset, r.last_offset, d.producer_id, d.control, offsets)
        )
    return out


def markers(view: Sequence[Stored]) -> set[tuple[int, int, int, int]]:
    return {
        (s.partition, s.base_offset, s.producer_id, s.control)
        for s in view
        if s.control is not None
    }


def aborted_index(config: BrokerConfig, topic: str) -> set[tuple[int, int, int]]:
    """(partition, producer id, first offset) of every aborted transaction, as Fetch
    read_committed answers list them (the coordinator's aborted-transactions index)."""

    async def go() -> set[tuple[int, int, int]]:
        [t] = [t for t in await (await runtime.catalog(config)).list_topics() if t.name == topic]
        coordinator = await runtime.coordinator(config)
        out: set[tuple[int, int, int]] = set()
        for p in range(t.partitions):
            offset = 0
            while True:
                [res] = await coordinator.find_batches(
                    [FindRequest(t.topic_id, p, offset, 1 << 30)], 1 << 30, read_committed=True
                )
                assert res.error == 0, res
                out |= {(p, a.producer_id, a.first_offset) for a in res.aborted or []}
                if not res.batches:
                    return_lso = res.last_stable_offset
                    assert offset == return_lso, (offset, return_lso)
                    break
                offset = res.batches[-1].last_offset + 1
        return out

    return runtime.run(go())


def high_watermarks(config: BrokerConfig, topic: str) -> dict[int, int]:
    return {s.partition: s.high_watermark for s in snapshot(config, Selection(topics=(topic,)))}


# ---------------------------------------------------------------- analytics and merge


def test_analytics_and_merge_with_transactions(
    spark: Any, cluster: LocalCluster, config: BrokerConfig, tmp_path: Path
) -> None:
    topic = unique_topic("jobs-txn")
    parts = 3
    confluent_create_topic(cluster.bootstrap, topic, parts)
    led = Ledger(cluster.bootstrap, topic)
    a, b = led.producer(), led.producer()
    keys = [b"k1", b"k2", None]
    every = range(parts)
    for rnd in range(2):
        led.send(None, f"plain{rnd}", every, keys)
        led.send(a, f"a{rnd}", every, keys)  # A's transaction begins ...
        led.send(None, f"mid{rnd}", every, [b"m"])
        led.send(b, f"b{rnd}", every, keys)  # ... B's begins inside it
        led.send(a, f"a{rnd}x", [0, 1], [b"k3"])
        led.end(a, commit=rnd == 0)  # A commits in round 0, aborts in round 1
        led.send(None, f"between{rnd}", every, [b"k4"])
        led.end(b, commit=rnd == 1)  # B the other way round
        led.send(a, f"a{rnd}y", [1], keys)
        led.end(a, commit=False)  # an abort in one partition only
    # Left open until the end of the test (its timeout must not end it meanwhile): the
    # last stable offset of partitions 0 and 1 stays at its first record.
    c = led.producer(**{"transaction.timeout.ms": 600_000})
    try:
        led.send(c, "open", [0, 1], [b"k1"])
        # Past the LSO: plain records and a whole committed transaction. Read_committed
        # readers do not see them yet, except in partition 2 where nothing is open.
        led.send(None, "after", every, [b"k2"])
        led.send(a, "a-after", every, [b"k5"])
        led.end(a, commit=True)

        _check_everything(spark, cluster, config, led, parts, tmp_path)
        # The open transaction commits: now everything committed is stable.
        led.end(c, commit=True)
        lso = led.lso(parts)
        assert lso == led.high_watermarks(parts)
        want = led.committed_view(lso)
        assert read_rows(config, topic) == want
        # The Iceberg export resumes at the LSO it stopped at: now it appends the open
        # transaction's records and what came after them, and nothing twice.
        appended = _iceberg(spark, config, topic, tmp_path)
        assert appended == want
        assert _iceberg_next(config, topic, tmp_path) == {str(p): lso[p] for p in every}
    finally:
        if led.still_open():
            c.abort_transaction(30)


def _iceberg(spark: Any, config: BrokerConfig, topic: str, tmp_path: Path) -> set[Row]:
    """One incremental export run; every row of the table after it."""
    warehouse = str(tmp_path / "warehouse")
    options = iceberg.IcebergOptions(warehouse)
    iceberg.run(spark, config, options, iceberg.Selection(topics=(topic,)))
    table = iceberg.catalog(config, warehouse).load_table(iceberg.table_name(topic))
    cols = table.scan().to_arrow().to_pylist()
    out = {
        (
            r["partition"],
            r["offset"],
            r["key"],
            r["value"],
            tuple((h["key"], h["value"]) for h in r["headers"] or []),
        )
        for r in cols
    }
    assert len(out) == len(cols), "a record exported twice"
    return out


def _iceberg_next(config: BrokerConfig, topic: str, tmp_path: Path) -> dict[str, int]:
    table = iceberg.catalog(config, str(tmp_path / "warehouse")).load_table(
        iceberg.table_name(topic)
    )
    return dict(json.loads(table.properties[iceberg.NEXT_OFFSETS]))


def _check_everything(
    spark: Any,
    cluster: LocalCluster,
    config: BrokerConfig,
    led: Ledger,
    parts: int,
    tmp_path: Path,
) -> None:
    topic = led.topic
    lso = led.lso(parts)
    hw = led.high_watermarks(parts)
    assert lso[2] == hw[2] and lso[0] < hw[0] and lso[1] < hw[1]
    assert sum(hw.values()) == len(led.all_recs()) + led.markers
    want = led.committed_view(lso)
    everything = {r.row() for r in led.all_recs()}
    assert any(r.fate == ABORTED_TXN for r in led.recs)

    # The broker's own view first: the ledger models what stock consumers see.
    assert consume(cluster.bootstrap, topic, parts, len(want), **COMMITTED) == want
    uncommitted = consume(cluster.bootstrap, topic, parts, len(everything), **UNCOMMITTED)
    assert uncommitted == everything

    # Analytics: every table counts exactly the read_committed records.
    out = tmp_path / "analytics"
    options = analytics.AnalyticsOptions(str(out), window_ms=60_000, with_records=True)
    summary = analytics.run(spark, config, options, analytics.Selection(topics=(topic,)))
    got = spark_rows(spark.read.parquet(str(out / "records")).collect())
    assert sorted(got - want) == [] and sorted(want - got) == []
    assert summary["records"] == len(want)
    by_partition = {
        r["partition"]: r for r in spark.read.parquet(str(out / "partitions")).collect()
    }
    [topic_row] = spark.read.parquet(str(out / "topics")).collect()
    assert topic_row["records"] == len(want)
    windows = spark.read.parquet(str(out / "windows")).collect()
    assert sum(w["records"] for w in windows) == len(want)
    for p in range(parts):
        mine = sorted(o for q, o, *_ in want if q == p)
        r = by_partition[p]
        assert (r["records"], r["first_offset"], r["last_offset"]) == (len(mine), mine[0], mine[-1])
        assert (r["high_watermark"], r["last_stable_offset"]) == (hw[p], lso[p])
        assert r["null_keys"] == sum(1 for q, _o, k, *_ in want if q == p and k is None)

    # The Iceberg export too, and it stops at the LSO for the next run to go on from.
    assert _iceberg(spark, config, topic, tmp_path) == want
    assert _iceberg_next(config, topic, tmp_path) == {str(p): lso[p] for p in range(parts)}

    # However the batches are split into read tasks (a transaction's records, the
    # markers deciding them and other transactions in between in different tasks), the
    # records are the same.
    _same_records_in_any_split(config, topic, want)

    # Merge: objects rewritten, markers and the aborted index untouched.
    markers_before = markers(stored(config, topic))
    aborted_before = aborted_index(config, topic)
    assert len(markers_before) == led.markers
    assert {(p, first) for p, _pid, first in aborted_before} == led.aborted
    objects_before = {s.object_key for s in _snapshot_batches(config, topic)}
    assert len(objects_before) >= 10
    result = merge.run(spark, config, selection=merge.Selection(topics=(topic,)))
    assert result["statuses"] == {"ok": result["tasks"]}, result
    assert result["replacements_applied"] > 0 and result["replacements_conflicting"] == 0
    objects_after = {s.object_key for s in _snapshot_batches(config, topic)}
    assert all(k.startswith(KEY_PREFIX) for k in objects_after)
    assert len(objects_after) < len(objects_before)

    view = stored(config, topic)
    assert markers(view) == markers_before
    assert aborted_index(config, topic) == aborted_before
    assert high_watermarks(config, topic) == hw
    for p in range(parts):  # every offset below the high watermark, once
        assert sorted(o for s in view if s.partition == p for o in s.offsets) == list(range(hw[p]))
    assert consume(cluster.bootstrap, topic, parts, len(want), **COMMITTED) == want
    assert consume(cluster.bootstrap, topic, parts, len(everything), **UNCOMMITTED) == everything
    assert read_rows(config, topic) == want


def _snapshot_batches(config: BrokerConfig, topic: str) -> list[Any]:
    return [b for s in snapshot(config, Selection(topics=(topic,))) for b in s.batches]


def _same_records_in_any_split(config: BrokerConfig, topic: str, want: set[Row]) -> None:
    snaps = snapshot(config, Selection(topics=(topic,)))
    refs = [r for s in snaps for r in s.refs()]
    decoded = {r: s for r, s in zip(refs, _controls(config, refs), strict=True)}
    by_object: dict[str, list[BatchRef]] = {}
    for r in sorted(refs, key=lambda r: (r.partition, r.base_offset)):
        by_object.setdefault(r.object_key, []).append(r)
    objects = list(by_object.values())
    splits = {
        # Data in one task, every marker in another.
        "markers apart": [
            [r for r in refs if decoded[r] is None],
            [r for r in refs if decoded[r] is not None],
        ],
        # Objects dealt out in turn: each task holds ranges with gaps that other tasks'
        # transactions (and markers) fill.
        "round robin": [
            [r for i, o in enumerate(objects) if i % 3 == n for r in o] for n in range(3)
        ],
        "one batch each": [[r] for r in refs],
    }
    for name, groups in splits.items():
        tasks = [task_for(i, g, snaps) for i, g in enumerate(g for g in groups if g)]
        assert read_rows(config, topic, tasks) == want, name


def _controls(config: BrokerConfig, refs: Sequence[BatchRef]) -> list[int | None]:
    got = runtime.run(_read(config, refs))
    return [decode_batch(got[r], r.topic, r.partition, r.base_offset).control for r in refs]


async def _read(config: BrokerConfig, refs: Sequence[BatchRef]) -> dict[BatchRef, Any]:
    return await read_batches(await runtime.store(config), refs)


# ---------------------------------------------------------------- key compaction


def test_key_compaction_with_transactions(
    spark: Any, cluster: LocalCluster, config: BrokerConfig
) -> None:
    topic = unique_topic("compact-txn")
    parts = 2
    confluent_create_topic(cluster.bootstrap, topic, parts, {"cleanup.policy": "compact"})
    led = Ledger(cluster.bootstrap, topic)
    a, b = led.producer(), led.producer()
    every = range(parts)
    ks = [f"k{i}".encode() for i in range(10)]
    led.send(None, "v0", every, ks)
    led.send(a, "a1", every, ks[:5])
    led.end(a, commit=True)
    # B's aborted records come last for every key: they must not win.
    led.send(b, "ab1", every, ks)
    led.send(a, "a2", every, [b"k5"])
    led.send(None, "v1", every, [b"k6"])
    led.end(b, commit=False)
    led.end(a, commit=True)
    led.send(None, "gone", every, [b"k7"], tombstone=True)  # a fresh tombstone: kept
    led.send(b, "ab2", every, [b"k2", b"k3"])
    led.end(b, commit=False)
    c = led.producer(**{"transaction.timeout.ms": 600_000})
    try:
        led.send(c, "open", every, [b"k8"])  # the LSO of both partitions
        # Past the LSO: not cleanable yet, and they do not supersede older records.
        led.send(None, "after", every, [b"k1", b"k9"])
        led.send(a, "a3", every, [b"k0"])
        led.end(a, commit=True)
        led.send(None, "tail", every, [b"tail"])

        lso = led.lso(parts)
        hw = led.high_watermarks(parts)
        markers_before = markers(stored(config, topic))
        aborted_before = aborted_index(config, topic)
        assert len(markers_before) == led.markers

        summary = compact.run(spark, config, selection=compact.Selection(topics=(topic,)))
        assert summary["statuses"] == {"ok": summary["tasks"]}, summary
        kept = _compacted(led.all_recs(), lso)
        assert summary["records_dropped"] == len(led.all_recs()) - len(kept)
        _check_compacted(cluster, config, led, parts, kept, lso, hw)
        assert markers(stored(config, topic)) == markers_before
        assert aborted_index(config, topic) == aborted_before
        # Nothing new to clean: a re-run changes nothing.
        again = compact.run(spark, config, selection=compact.Selection(topics=(topic,)))
        assert again["replacements_applied"] == 0 and again["records_dropped"] == 0

        # The open transaction commits: what lay past the LSO becomes cleanable (all but
        # the last batch: the active tail), and the newer records win now.
        led.end(c, commit=True)
        c_markers = markers(stored(config, topic)) - markers_before
        assert len(c_markers) == parts
        hw = led.high_watermarks(parts)
        lso = led.lso(parts)
        assert lso == hw
        summary = compact.run(spark, config, selection=compact.Selection(topics=(topic,)))
        assert summary["statuses"] == {"ok": summary["tasks"]}, summary
        # The last batch of each partition is now C's marker: every record is cleanable.
        survivors = {k.row() for k in kept}
        kept2 = _compacted([r for r in led.all_recs() if r.row() in survivors], hw)
        _check_compacted(cluster, config, led, parts, kept2, lso, hw)
        assert markers(stored(config, topic)) == markers_before | c_markers
        assert aborted_index(config, topic) == aborted_before
    finally:
        if led.still_open():
            c.abort_transaction(30)


def _compacted(recs: Sequence[Rec], bound: dict[int, int]) -> list[Rec]:
    """Kafka's cleaner over the records below ``bound`` (the first uncleanable offset):
    aborted records go; of the rest, the latest per key stays (fresh tombstones too)."""
    latest: dict[tuple[int, bytes | None], int] = {}
    for r in recs:
        if r.offset < bound[r.partition] and r.fate != ABORTED_TXN:
            k = (r.partition, r.key)
            latest[k] = max(latest.get(k, -1), r.offset)
    out = []
    for r in recs:
        uncleanable = r.offset >= bound[r.partition]
        if uncleanable or (r.fate != ABORTED_TXN and latest[(r.partition, r.key)] == r.offset):
            out.append(r)
    return out


def _check_compacted(
    cluster: LocalCluster,
    config: BrokerConfig,
    led: Ledger,
    parts: int,
    kept: Sequence[Rec],
    lso: dict[int, int],
    hw: dict[int, int],
) -> None:
    topic = led.topic
    committed = {
        r.row() for r in kept if r.fate in (PLAIN, COMMITTED_TXN) and r.offset < lso[r.partition]
    }
    # Aborted records that survived (none below the LSO) would show to read_uncommitted.
    everything = {r.row() for r in kept}
    assert consume(cluster.bootstrap, topic, parts, len(committed), **COMMITTED) == committed
    assert consume(cluster.bootstrap, topic, parts, len(everything), **UNCOMMITTED) == everything
    assert high_watermarks(config, topic) == hw
    view = stored(config, topic)
    data_offsets = {(s.partition, o) for s in view if s.control is None for o in s.offsets}
    assert data_offsets == {(r.partition, r.offset) for r in kept}
    assert ABORT in {s.control for s in view} and COMMIT in {s.control for s in view}
