"""The jobs on every deployment shape users have: a ``sluice dev`` data directory (topics in
the embedded controller's metadata log) and a cluster with a three-voter controller quorum on
SeaweedFS + PostgreSQL (topics in the quorum's log, read through its API).

Each shape: analytics through the ``sluice jobs`` command a user types (exact counts, every
record's key), then merge and key compaction, read back with a stock consumer.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest
from confluent_kafka.admin import AdminClient

from broker.config import BrokerConfig, load_config
from jobs import compact, iceberg, merge, output, runtime
from sluice.cluster import LocalCluster
from sluice.launch.process import sluice_command
from sluice.launch.spark import standalone_cluster
from tests.e2e._kafka import (
    Msg,
    confluent_consume,
    confluent_create_topic,
    confluent_produce,
    wait_until,
)
from tests.e2e.conftest import SluiceBroker
from tests.fixtures.cluster import running_cluster

from .conftest import BROKER_OPTIONS, storage_settings

pytestmark = pytest.mark.e2e

PARTITIONS = 3
RECORDS = 600


def _produce(bootstrap: str, topic: str) -> set[tuple[int, int, bytes]]:
    """600 records over 3 partitions, keys k0..k49; returns (partition, offset, key)."""
    confluent_create_topic(bootstrap, topic, PARTITIONS)
    placed: set[tuple[int, int, bytes]] = set()
    for p in range(PARTITIONS):
        msgs = [Msg(f"k{i % 50}".encode(), f"v{i}".encode()) for i in range(p, RECORDS, 3)]
        for m, (part, offset) in zip(
            msgs, confluent_produce(bootstrap, topic, msgs, p), strict=True
        ):
            assert m.key is not None
            placed.add((part, offset, m.key))
    return placed


def _job_cli(job: str, args: list[str]) -> dict[str, Any]:
    """`sluice jobs <job>` as a user runs it; returns its JSON summary."""
    done = subprocess.run(
        [*sluice_command(), "jobs", job, *args], capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def _analytics_cli(args: list[str], out: Path, topic: str) -> set[tuple[int, int, bytes]]:
    """`sluice jobs analytics` as a user runs it; returns the records table's keys."""
    summary = _job_cli("analytics", [*args, "--out", str(out), "--topic", topic, "--records"])
    assert (summary["partitions"], summary["records"]) == (PARTITIONS, RECORDS), summary
    table = pq.read_table(out / "records").to_pydict()
    return set(zip(table["partition"], table["offset"], table["key"], strict=True))


def _merge_and_compact(spark: Any, config: BrokerConfig, bootstrap: str, topic: str) -> None:
    """Merge keeps every record; compaction of a compacted topic keeps the latest per key."""
    summary = merge.run(spark, config, selection=merge.Selection(topics=(topic,)))
    assert summary["statuses"] == {"ok": summary["tasks"]}, summary
    got = confluent_consume(bootstrap, topic, range(PARTITIONS), expected=RECORDS, timeout=60)
    assert len(got) == RECORDS and len({(g.partition, g.offset) for g in got}) == RECORDS

    compacted = topic + "-c"
    confluent_create_topic(bootstrap, compacted, 1, {"cleanup.policy": "compact"})
    latest: dict[bytes, tuple[int, bytes]] = {}
    for rnd in range(3):
        msgs = [Msg(f"k{k}".encode(), f"r{rnd}-{k}".encode()) for k in range(20)]
        for m, (_, offset) in zip(
            msgs, confluent_produce(bootstrap, compacted, msgs, 0), strict=True
        ):
            assert m.key is not None and m.value is not None
            latest[m.key] = (offset, m.value)
    tail = confluent_produce(bootstrap, compacted, [Msg(b"tail", b"x")], 0)[0][1]
    summary = compact.run(spark, config, selection=compact.Selection(topics=(compacted,)))
    assert summary["statuses"] == {"ok": summary["tasks"]}, summary
    assert summary["records_dropped"] == 40, summary
    expected = {(offset, key, value) for key, (offset, value) in latest.items()}
    expected.add((tail, b"tail", b"x"))
    got = confluent_consume(bootstrap, compacted, [0], expected=len(expected), timeout=60)
    assert {(g.offset, g.key, g.value) for g in got} == expected


# ---------------------------------------------------------------- sluice dev


@pytest.fixture
def dev(tmp_path: Path) -> Iterator[SluiceBroker]:
    broker = SluiceBroker(tmp_path / "dev")
    broker.start()
    try:
        yield broker
    finally:
        runtime.close_all()
        broker.stop()


def test_jobs_on_a_sluice_dev_data_dir(spark: Any, dev: SluiceBroker, tmp_path: Path) -> None:
    # The reproduction: before, analytics said 0 partitions and --topic was unknown,
    # because the topics live in the embedded controller's log, not the old catalog.
    placed = _produce(dev.bootstrap, "spk")
    keys = _analytics_cli(["--data-dir", str(dev.data_dir)], tmp_path / "out", "spk")
    assert keys == placed
    config = load_config({"data.dir": str(dev.data_dir)})
    _merge_and_compact(spark, config, dev.bootstrap, "spk")


# ---------------------------------------------------------------- controller quorum


@pytest.fixture(scope="module")
def quorum(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory,
        "jobs-quorum",
        2,
        broker_options=BROKER_OPTIONS,
        controllers=3,
        before_down=runtime.close_all,
    ) as c:
        # Brokers accept connections before the controllers have unfenced them; topics can
        # only be placed on registered brokers.
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 2, "two brokers", 60)
        yield c


def test_jobs_on_a_cluster_with_a_controller_quorum(
    spark: Any, quorum: LocalCluster, tmp_path: Path
) -> None:
    settings = quorum.broker_settings(quorum.brokers[0])
    controllers = settings["controller.quorum.bootstrap.servers"]
    placed = _produce(quorum.bootstrap, "spk")
    # What a job needs: the storage, and the controllers (with their secret) for topics.
    config_file = tmp_path / "jobs.properties"
    config_file.write_text(
        "".join(f"{k}={v}\n" for k, v in storage_settings(quorum).items())
        + f"controller.secret={settings['controller.secret']}\n"
    )
    job_args = ["--config", str(config_file), "--controller", controllers]
    keys = _analytics_cli(job_args, tmp_path / "out", "spk")
    assert keys == placed
    # The same tables in the object store, where query engines look.
    bucket = storage_settings(quorum)["s3.bucket"]
    _job_cli(
        "analytics", [*job_args, "--out", f"s3://{bucket}/analytics", "--topic", "spk", "--records"]
    )
    store_config = load_config(storage_settings(quorum))
    filesystem = output.s3_filesystem(store_config)
    in_store = {
        name: pq.read_table(f"{bucket}/analytics/{name}", filesystem=filesystem)
        for name in ("windows", "partitions", "topics", "records")
    }
    local = _tables(tmp_path / "out")
    for name in ("windows", "partitions", "topics"):
        rows = sorted(
            in_store[name].to_pylist(), key=lambda r: json.dumps(r, sort_keys=True, default=str)
        )
        assert rows == local[name], name
    records = in_store["records"].to_pydict()
    assert set(zip(records["partition"], records["offset"], records["key"], strict=True)) == placed
    config = load_config(
        {
            **storage_settings(quorum),
            "controller.quorum.bootstrap.servers": controllers,
            "controller.secret": settings["controller.secret"],
        }
    )
    _merge_and_compact(spark, config, quorum.bootstrap, "spk")


def test_sluice_dev_compacts_on_its_own_with_jobs_every(tmp_path: Path) -> None:
    broker = SluiceBroker(tmp_path / "dev")
    broker.args += ["--jobs-every", "3"]
    broker.start()
    try:
        topic = "auto-compacted"
        confluent_create_topic(broker.bootstrap, topic, 1, {"cleanup.policy": "compact"})
        latest: dict[bytes, tuple[int, bytes]] = {}
        for rnd in range(3):
            msgs = [Msg(f"k{k}".encode(), f"r{rnd}-{k}".encode()) for k in range(20)]
            placed = confluent_produce(broker.bootstrap, topic, msgs, 0)
            for m, (_, offset) in zip(msgs, placed, strict=True):
                assert m.key is not None and m.value is not None
                latest[m.key] = (offset, m.value)
        tail = confluent_produce(broker.bootstrap, topic, [Msg(b"tail", b"x")], 0)[0][1]
        expected = {(offset, key, value) for key, (offset, value) in latest.items()}
        expected.add((tail, b"tail", b"x"))
        deadline = time.monotonic() + 240  # Spark's start-up, then one scheduled run
        while True:
            # (compaction leaves offset gaps: read a count, not up to the high watermark)
            got = confluent_consume(broker.bootstrap, topic, [0], expected=len(expected))
            if {(g.offset, g.key, g.value) for g in got} == expected:
                break
            assert time.monotonic() < deadline, (
                f"not compacted: {len(got)} records\n"
                + (broker.data_dir / "jobs.log").read_text()[-3000:]
            )
            time.sleep(2)
        assert '"job": "compact"' in (broker.data_dir / "jobs.log").read_text()
    finally:
        broker.stop()
    # The scheduler stopped with the broker.
    assert not subprocess.run(
        ["pgrep", "-f", f"jobs schedule --data-dir {broker.data_dir}"], capture_output=True
    ).stdout


# ---------------------------------------------------------------- a real Spark cluster


def _tables(out: Path) -> dict[str, list[dict[str, Any]]]:
    """The analytics tables, rows sorted, for comparing two runs."""
    tables = {}
    for name in ("windows", "partitions", "topics", "records"):
        rows = pq.read_table(out / name).to_pylist()
        tables[name] = sorted(rows, key=lambda r: json.dumps(r, sort_keys=True, default=str))
    return tables


def test_jobs_on_a_spark_standalone_cluster_equal_local(dev: SluiceBroker, tmp_path: Path) -> None:
    placed = _produce(dev.bootstrap, "spk")
    data = ["--data-dir", str(dev.data_dir)]
    with standalone_cluster(tmp_path / "spark") as master:
        on_cluster = ["--master", master]
        keys = _analytics_cli([*data, *on_cluster], tmp_path / "cluster-out", "spk")
        assert keys == placed
        _analytics_cli([*data, "--master", "local[2]"], tmp_path / "local-out", "spk")
        assert _tables(tmp_path / "cluster-out") == _tables(tmp_path / "local-out")

        merged = _job_cli("merge", [*data, *on_cluster, "--topic", "spk"])
        assert merged["statuses"] == {"ok": merged["tasks"]} and merged["tasks"] > 0, merged
        got = confluent_consume(dev.bootstrap, "spk", range(PARTITIONS), expected=RECORDS)
        assert {(g.partition, g.offset, g.key) for g in got} == placed

        confluent_create_topic(dev.bootstrap, "cmp", 1, {"cleanup.policy": "compact"})
        for rnd in range(2):
            msgs = [Msg(f"k{k}".encode(), f"r{rnd}".encode()) for k in range(10)]
            confluent_produce(dev.bootstrap, "cmp", msgs, 0)
        confluent_produce(dev.bootstrap, "cmp", [Msg(b"tail", b"x")], 0)
        compacted = _job_cli("compact", [*data, *on_cluster, "--topic", "cmp"])
        assert compacted["records_dropped"] == 10, compacted
        got = confluent_consume(dev.bootstrap, "cmp", [0], expected=11)
        assert sorted((g.offset, g.value) for g in got) == [
            *[(10 + k, b"r1") for k in range(10)],
            (20, b"x"),
        ]


# ---------------------------------------------------------------- Iceberg tables


def _iceberg_incremental(
    spark: Any, config: BrokerConfig, bootstrap: str, warehouse: str, placed: set[Any]
) -> None:
    """Two runs with records produced in between: the table holds each record once, and
    the second run appended only the new ones (its own snapshot)."""
    options = iceberg.IcebergOptions(warehouse)
    only = iceberg.Selection(topics=("spk",))
    first = iceberg.run(spark, config, options, only)
    assert first["appended"] == RECORDS, first
    more = [Msg(f"k{i}".encode(), b"late") for i in range(30)]
    placed = placed | {
        (p, o, m.key)
        for m, (p, o) in zip(more, confluent_produce(bootstrap, "spk", more, 1), strict=True)
    }
    second = iceberg.run(spark, config, options, only)
    assert second["appended"] == 30, second
    assert iceberg.run(spark, config, options, only)["appended"] == 0
    table = iceberg.catalog(config, warehouse).load_table(iceberg.table_name("spk"))
    rows = table.scan().to_arrow().to_pydict()
    assert len(rows["offset"]) == RECORDS + 30
    assert set(zip(rows["partition"], rows["offset"], rows["key"], strict=True)) == placed
    assert json.loads(table.properties[iceberg.NEXT_OFFSETS]) == {"0": 200, "1": 230, "2": 200}
    assert len([s for s in table.snapshots() if s.summary.operation.value == "append"]) == 2


def test_iceberg_tables_on_a_sluice_dev_data_dir(
    spark: Any, dev: SluiceBroker, tmp_path: Path
) -> None:
    placed = _produce(dev.bootstrap, "spk")
    config = load_config({"data.dir": str(dev.data_dir)})
    _iceberg_incremental(spark, config, dev.bootstrap, str(tmp_path / "warehouse"), placed)


def test_iceberg_tables_in_postgresql_and_the_object_store(
    spark: Any, quorum: LocalCluster
) -> None:
    settings = quorum.broker_settings(quorum.brokers[0])
    config = load_config(
        {
            **storage_settings(quorum),
            "controller.quorum.bootstrap.servers": settings["controller.quorum.bootstrap.servers"],
            "controller.secret": settings["controller.secret"],
        }
    )
    confluent_create_topic(quorum.bootstrap, "ice", 1)
    placed_ice = confluent_produce(quorum.bootstrap, "ice", [Msg(b"a", b"1"), Msg(b"b", b"2")], 0)
    bucket = settings["s3.bucket"]
    warehouse = f"s3://{bucket}/iceberg"
    summary = iceberg.run(
        spark, config, iceberg.IcebergOptions(warehouse), iceberg.Selection(topics=("ice",))
    )
    assert summary["appended"] == 2, summary
    table = iceberg.catalog(config, warehouse).load_table(iceberg.table_name("ice"))
    rows = table.scan().to_arrow().to_pydict()
    assert sorted(zip(rows["offset"], rows["key"], strict=True)) == [
        (placed_ice[0][1], b"a"),
        (placed_ice[1][1], b"b"),
    ]
    assert table.metadata_location.startswith(warehouse)
