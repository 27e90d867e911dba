"""Durability across broker restarts, and exactly-once delivery of an idempotent producer
that keeps producing while the broker restarts under it."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from confluent_kafka import Producer

from ._kafka import (
    Msg,
    assert_same,
    confluent_consume,
    confluent_create_topic,
    confluent_produce,
    expected_single_partition,
    kafka_python_consume,
    standard_messages,
)
from .conftest import SluiceBroker

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
    total = 3000
    confluent_create_topic(b.bootstrap, topic, partitions=partitions)
    producer = Producer(
        {
            "bootstrap.servers": b.bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 8192,
            "message.timeout.ms": 90_000,
            # Reconnect quickly once the broker is back, so the test is not mostly backoff.
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
            "retry.backoff.ms": 50,
        }
    )
    errors: list[str] = []
    delivered: list[tuple[int, int, int]] = []  # (partition, offset, seq)
    lock = threading.Lock()

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        with lock:
            if err is not None:
                errors.append(str(err))
            else:
                delivered.append((msg.partition(), msg.offset(), int(msg.value())))

    restarted = threading.Event()

    def restart_midway() -> None:
        # Wait until a third has been acknowledged so the restart really cuts a live stream.
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if len(delivered) >= total // 3:
                    break
            time.sleep(0.01)
        b.restart()
        restarted.set()

    t = threading.Thread(target=restart_midway, daemon=True)
    t.start()
    start = time.monotonic()
    for seq in range(total):
        while True:
            try:
                producer.produce(
                    topic,
                    key=f"k{seq % 17}".encode(),
                    value=str(seq).encode(),
                    on_delivery=on_delivery,
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
        # Pace the stream (~2 s worth) so a good share of it is in flight across the restart.
        if seq % 50 == 0:
            time.sleep(0.03)
    remaining = producer.flush(120)
    t.join(60)
    assert restarted.is_set(), "the broker restart did not happen"
    assert remaining == 0, f"{remaining} undelivered after {time.monotonic() - start:.0f}s"
    assert not errors, f"delivery errors: {errors[:10]}"
    assert len(delivered) == total

    got = confluent_consume(b.bootstrap, topic, partitions=range(partitions), expected=total)
    seqs = [int(g.value or b"-1") for g in got]
    dupes = sorted({s for s in seqs if seqs.count(s) > 1})
    assert not dupes, f"{len(dupes)} duplicated records after restart, e.g. {dupes[:10]}"
    assert sorted(seqs) == list(range(total)), "records lost"
    for p in range(partitions):
        in_part = [g for g in got if g.partition == p]
        offs = [g.offset for g in in_part]
        assert offs == list(range(len(offs))), f"partition {p}: offsets not dense from 0"
        ps = [int(g.value or b"-1") for g in in_part]
        assert ps == sorted(ps), f"partition {p}: records out of send order"
    # Each delivery report's offset names the record that was actually stored there.
    stored = {(g.partition, g.offset): int(g.value or b"-1") for g in got}
    assert all(stored[(p, o)] == s for p, o, s in delivered)
