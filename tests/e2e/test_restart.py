"""Durability across broker restarts, and exactly-once delivery of an idempotent producer
that keeps producing while the broker restarts under it."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import pytest

from sluice.launch.process import SluiceProcess, free_port

from ._kafka import (
    Msg,
    assert_exactly_once,
    assert_same,
    confluent_consume,
    confluent_create_topic,
    confluent_produce,
    confluent_topic_partitions,
    expected_single_partition,
    kafka_python_consume,
    standard_messages,
    stream_through,
)
from .conftest import BrokerFactory, SluiceBroker

pytestmark = pytest.mark.e2e


def test_sigterm_exits_cleanly(fresh_broker: SluiceBroker) -> None:
    assert fresh_broker.stop(signal.SIGTERM) == 0, fresh_broker.log_tail()
    fresh_broker.start()
    assert fresh_broker.stop(signal.SIGINT) == 0, fresh_broker.log_tail()


def test_data_survives_restart(fresh_broker: SluiceBroker, topic: str) -> None:
    b = fresh_broker
    confluent_create_topic(b.bootstrap, topic, partitions=2)
    msgs = standard_messages(n=200)
    confluent_produce(b.bootstrap, topic, msgs, **{"compression.type": "zstd"})
    b.restart()
    # Topic, partition count and every record come back; offsets continue, not restart.
    got = confluent_consume(b.bootstrap, topic, partitions=[0, 1], expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))
    more = [Msg(b"after", b"restart")]
    assert confluent_produce(b.bootstrap, topic, more) == [(0, len(msgs))]
    b.restart()
    got = kafka_python_consume(b.bootstrap, topic, expected=len(msgs) + 1)
    assert_same(got, expected_single_partition(msgs + more))


def test_acked_data_survives_sigkill(fresh_broker: SluiceBroker, topic: str) -> None:
    """acks=all means written: a crash right after the ack must not lose the record."""
    b = fresh_broker
    confluent_create_topic(b.bootstrap, topic)
    msgs = standard_messages(n=150)
    confluent_produce(b.bootstrap, topic, msgs, acks="all")
    b.kill()
    b.start()
    got = confluent_consume(b.bootstrap, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))


def test_idempotent_producer_across_restart_exactly_once(
    fresh_broker: SluiceBroker, topic: str
) -> None:
    b = fresh_broker
    partitions = 3
    confluent_create_topic(b.bootstrap, topic, partitions=partitions)
    stream = stream_through(b.bootstrap, topic, 3000, b.restart)
    got = confluent_consume(b.bootstrap, topic, partitions=range(partitions), expected=3000)
    assert_exactly_once(stream, got, partitions)


def test_orphaned_objects_are_swept_and_committed_ones_kept(
    broker_factory: BrokerFactory, topic: str
) -> None:
    """An object no commit names (an upload whose commit failed with an unknown outcome, or a
    crash between upload and commit) is deleted after the grace period; live data stays."""
    b = broker_factory(**{"orphan.check.interval.ms": "300", "orphan.grace.ms": "60000"})
    confluent_create_topic(b.bootstrap, topic)
    msgs = standard_messages(n=50)
    confluent_produce(b.bootstrap, topic, msgs)
    objects = b.data_dir / "objects"
    committed = sorted(p for p in objects.rglob("*") if p.is_file())
    assert committed
    # Make every object look old: only the orphan may go, committed ones are named by files.
    # A failed commit leaves an object named like every flush (a uuid); what is not named so
    # is not the broker's (analytics tables, an Iceberg warehouse in the same bucket) and stays.
    orphan = objects / uuid.uuid4().hex
    orphan.write_bytes(b"x" * 100)
    foreign = objects / "analytics" / "windows" / "part-0.parquet"
    foreign.parent.mkdir(parents=True)
    foreign.write_bytes(b"PAR1")
    for path in [*committed, orphan, foreign]:
        os.utime(path, (time.time() - 3600, time.time() - 3600))
    deadline = time.monotonic() + 10
    while orphan.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not orphan.exists(), b.log_tail()
    assert all(p.exists() for p in committed)
    assert foreign.exists()
    got = confluent_consume(b.bootstrap, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))


def test_dev_carries_topics_over_from_a_data_dir_without_controller(
    tmp_path: Path, topic: str
) -> None:
    """`sluice dev` data dirs from before the embedded controller kept topics in catalog.db:
    the first start with the controller carries them into its metadata log, data included."""
    data_dir = tmp_path / "sluice" / "data"
    config = tmp_path / "old.properties"
    port = free_port()
    config.write_text(
        f"port={port}\ndata.dir={data_dir}\nobject.store=local\ncoordinator=sqlite\n"
        "produce.commit.interval.ms=20\n"
    )
    old = SluiceProcess(["broker", "--config", str(config)], tmp_path / "old.log", port)
    old.start()
    try:
        confluent_create_topic(
            old.bootstrap, topic, partitions=2, config={"retention.ms": "3600000"}
        )
        msgs = standard_messages(n=40)
        confluent_produce(old.bootstrap, topic, msgs)
    finally:
        old.stop()
    new = SluiceBroker(tmp_path / "sluice", port=free_port())
    new.start()
    try:
        assert confluent_topic_partitions(new.bootstrap, topic) == 2
        got = confluent_consume(new.bootstrap, topic, partitions=[0, 1], expected=len(msgs))
        assert_same(got, expected_single_partition(msgs))
        new.restart()  # imported once: a restart neither loses nor duplicates it
        assert confluent_topic_partitions(new.bootstrap, topic) == 2
    finally:
        new.stop()
