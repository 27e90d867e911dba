"""Transactions with the stock clients: commit, abort, read_committed, LSO, fencing,
timeouts, offsets sent to a transaction."""

from __future__ import annotations

import asyncio
import random
import signal
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from ._eos import Progress, assert_exactly_once, fill, start_processor
from ._kafka import (
    aiokafka_consume,
    confluent_consume,
    confluent_consumer,
    confluent_create_topic,
    kafka_python_consume,
    wait_until,
)
from .conftest import SluiceBroker

pytestmark = pytest.mark.e2e

COMMITTED = {"isolation.level": "read_committed"}
UNCOMMITTED = {"isolation.level": "read_uncommitted"}


def txn_producer(bootstrap: str, transactional_id: str | None = None, **extra: object) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": transactional_id or f"txn-{uuid.uuid4().hex[:8]}",
            **extra,
        }
    )
    producer.init_transactions(30)
    return producer


def values(got: list) -> list[bytes]:
    return [g.value for g in got]


def in_offset_order(got: list) -> bool:
    last: dict[int, int] = {}
    for g in got:
        if g.offset <= last.get(g.partition, -1):
            return False
        last[g.partition] = g.offset
    return True


def test_confluent_commit_abort_and_isolation_levels(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap, topic, partitions=3)
    producer = txn_producer(broker.bootstrap)
    for label, commit in (("c1", True), ("a", False), ("c2", True)):
        producer.begin_transaction()
        for i in range(30):
            producer.produce(topic, key=b"k", value=f"{label}-{i}".encode(), partition=i % 3)
        producer.flush(30)  # in the log before the outcome is decided
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)

    committed = confluent_consume(broker.bootstrap, topic, [0, 1, 2], expected=60, **COMMITTED)
    want = {f"{label}-{i}".encode() for label in ("c1", "c2") for i in range(30)}
    assert sorted(values(committed)) == sorted(want)
    assert in_offset_order(committed)
    for p in range(3):  # each partition keeps the producer's order
        mine = [g.value for g in committed if g.partition == p]
        assert mine == sorted(mine, key=lambda v: (v.split(b"-")[0], int(v.split(b"-")[1])))

    everything = confluent_consume(broker.bootstrap, topic, [0, 1, 2], expected=90, **UNCOMMITTED)
    assert len(everything) == 90  # the aborted records too, and no marker shows up
    assert sum(v.startswith(b"a-") for v in values(everything)) == 30

    # Each partition: 10 + 10 + 10 records and three markers, which take an offset each.
    consumer = confluent_consumer(broker.bootstrap, **UNCOMMITTED)
    try:
        for p in range(3):
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), 10, cached=False)
            assert (low, high) == (0, 33)
    finally:
        consumer.close()


def test_read_committed_stops_at_the_open_transaction(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap, topic, partitions=1)
    plain = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    for i in range(5):
        plain.produce(topic, value=f"before-{i}".encode())
    plain.flush(30)
    txn = txn_producer(broker.bootstrap)
    txn.begin_transaction()
    for i in range(5):
        txn.produce(topic, value=f"txn-{i}".encode())
    txn.flush(30)
    for i in range(5):
        plain.produce(topic, value=f"after-{i}".encode())
    plain.flush(30)

    lso_consumer = confluent_consumer(broker.bootstrap, **COMMITTED)
    try:
        _, lso = lso_consumer.get_watermark_offsets(TopicPartition(topic, 0), 10, cached=False)
        assert lso == 5  # ListOffsets latest, read_committed: the open transaction's start
        seen = confluent_consume(broker.bootstrap, topic, [0], expected=5, **COMMITTED)
        assert values(seen) == [f"before-{i}".encode() for i in range(5)]
        dirty = confluent_consume(broker.bootstrap, topic, [0], expected=15, **UNCOMMITTED)
        assert len(dirty) == 15

        txn.commit_transaction(30)
        after = confluent_consume(broker.bootstrap, topic, [0], expected=15, **COMMITTED)
        assert values(after) == (
            [f"before-{i}".encode() for i in range(5)]
            + [f"txn-{i}".encode() for i in range(5)]
            + [f"after-{i}".encode() for i in range(5)]
        )
        _, lso = lso_consumer.get_watermark_offsets(TopicPartition(topic, 0), 10, cached=False)
        assert lso == 16  # 15 records and the commit marker
    finally:
        lso_consumer.close()


def test_a_new_producer_with_the_same_id_fences_the_old_one(
    broker: SluiceBroker, topic: str
) -> None:
    confluent_create_topic(broker.bootstrap, topic, partitions=2)
    txn_id = f"fence-{uuid.uuid4().hex[:8]}"
    zombie = txn_producer(broker.bootstrap, txn_id)
    zombie.begin_transaction()
    for i in range(4):
        zombie.produce(topic, value=f"zombie-{i}".encode(), partition=i % 2)
    zombie.flush(30)

    successor = txn_producer(broker.bootstrap, txn_id)  # aborts the zombie's transaction
    successor.begin_transaction()
    for i in range(4):
        successor.produce(topic, value=f"new-{i}".encode(), partition=i % 2)
    successor.commit_transaction(30)

    with pytest.raises(KafkaException) as raised:
        zombie.commit_transaction(10)
    error = raised.value.args[0]
    assert error.fatal(), error  # fenced: PRODUCER_FENCED / INVALID_PRODUCER_EPOCH
    got = confluent_consume(broker.bootstrap, topic, [0, 1], expected=4, **COMMITTED)
    assert sorted(values(got)) == sorted(f"new-{i}".encode() for i in range(4))


def test_a_timed_out_transaction_is_aborted_and_the_lso_moves_on(
    broker: SluiceBroker, topic: str
) -> None:
    confluent_create_topic(broker.bootstrap, topic, partitions=1)
    abandoned = txn_producer(broker.bootstrap, **{"transaction.timeout.ms": 2000})
    abandoned.begin_transaction()
    for i in range(3):
        abandoned.produce(topic, value=f"lost-{i}".encode())
    abandoned.flush(30)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(3):
        plain.produce(topic, value=f"after-{i}".encode())
    plain.flush(30)
    started = time.monotonic()
    got = confluent_consume(broker.bootstrap, topic, [0], expected=3, timeout=30, **COMMITTED)
    assert values(got) == [f"after-{i}".encode() for i in range(3)]
    # Not before the timeout: the coordinator, not the consumer, ended it.
    assert time.monotonic() - started > 0.5
    with pytest.raises(KafkaException):
        abandoned.commit_transaction(10)


def _group_consumer(bootstrap: str, group: str) -> Consumer:
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )


def _poll_n(consumer: Consumer, n: int, timeout: float = 30) -> list:
    out = []
    deadline = time.monotonic() + timeout
    while len(out) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            out.append(msg)
    assert len(out) == n, f"consumed {len(out)} of {n}"
    return out


def test_offsets_sent_to_a_transaction_commit_and_abort_with_it(
    broker: SluiceBroker, topic: str
) -> None:
    source, sink = topic, topic + "-out"
    confluent_create_topic(broker.bootstrap, source, partitions=1)
    confluent_create_topic(broker.bootstrap, sink, partitions=1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(20):
        plain.produce(source, value=f"in-{i}".encode())
    plain.flush(30)
    group = f"eos-{uuid.uuid4().hex[:8]}"
    consumer = _group_consumer(broker.bootstrap, group)
    consumer.assign([TopicPartition(source, 0, 0)])
    producer = txn_producer(broker.bootstrap)
    try:
        for commit in (True, False):
            msgs = _poll_n(consumer, 10)
            producer.begin_transaction()
            for m in msgs:
                producer.produce(sink, value=m.value().replace(b"in", b"out"))
            producer.send_offsets_to_transaction(
                [TopicPartition(source, 0, msgs[-1].offset() + 1)],
                consumer.consumer_group_metadata(),
                30,
            )
            # Pending in the transaction: a read_committed consumer asks with
            # require_stable and is told UNSTABLE_OFFSET_COMMIT, which librdkafka retries
            # until the transaction ends (here: until its own timeout).
            with pytest.raises(KafkaException, match="Timed out"):
                consumer.committed([TopicPartition(source, 0)], 2)
            if commit:
                producer.commit_transaction(30)
            else:
                producer.abort_transaction(30)
            [offset] = consumer.committed([TopicPartition(source, 0)], 10)
            assert offset.offset == 10  # the aborted transaction's offsets never applied
    finally:
        consumer.close()
    got = confluent_consume(broker.bootstrap, sink, [0], expected=10, **COMMITTED)
    assert values(got) == [f"out-{i}".encode() for i in range(10)]


def test_kafka_python_transactions(broker: SluiceBroker, topic: str) -> None:
    from kafka import KafkaProducer

    confluent_create_topic(broker.bootstrap, topic, partitions=2)
    producer = KafkaProducer(
        bootstrap_servers=broker.bootstrap, transactional_id=f"kp-{uuid.uuid4().hex[:8]}"
    )
    try:
        producer.init_transactions()
        for label, commit in (("c1", True), ("a", False), ("c2", True)):
            producer.begin_transaction()
            for i in range(10):
                producer.send(topic, value=f"{label}-{i}".encode(), partition=i % 2)
            producer.flush()
            if commit:
                producer.commit_transaction()
            else:
                producer.abort_transaction()
    finally:
        producer.close()
    got = kafka_python_consume(
        broker.bootstrap, topic, [0, 1], expected=20, isolation_level="read_committed"
    )
    assert sorted(values(got)) == sorted(
        f"{label}-{i}".encode() for label in ("c1", "c2") for i in range(10)
    )
    assert in_offset_order(got)


def test_aiokafka_transactions(broker: SluiceBroker, topic: str) -> None:
    from aiokafka import AIOKafkaProducer

    confluent_create_topic(broker.bootstrap, topic, partitions=2)

    async def produce() -> None:
        producer = AIOKafkaProducer(
            bootstrap_servers=broker.bootstrap, transactional_id=f"aio-{uuid.uuid4().hex[:8]}"
        )
        await producer.start()
        try:
            for label, commit in (("c1", True), ("a", False), ("c2", True)):
                await producer.begin_transaction()
                for i in range(10):
                    await producer.send_and_wait(
                        topic, value=f"{label}-{i}".encode(), partition=i % 2
                    )
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        finally:
            await producer.stop()

    asyncio.run(produce())
    got = aiokafka_consume(
        broker.bootstrap, topic, partitions=[0, 1], expected=20, isolation_level="read_committed"
    )
    assert sorted(values(got)) == sorted(
        f"{label}-{i}".encode() for label in ("c1", "c2") for i in range(10)
    )
    assert in_offset_order(got)
    # read_uncommitted sees the aborted ones too.
    dirty = aiokafka_consume(broker.bootstrap, topic, partitions=[0, 1], expected=30)
    assert len(dirty) == 30


def test_consume_transform_produce_is_exactly_once_across_sigkills(
    broker: SluiceBroker, topic: str, tmp_path: Path
) -> None:
    """The processor is SIGKILLed at random points and restarted; the output holds each
    input exactly once (read_committed)."""
    source, sink, n = topic, topic + "-out", 3000
    confluent_create_topic(broker.bootstrap, source, partitions=3)
    confluent_create_topic(broker.bootstrap, sink, partitions=3)
    fill(broker.bootstrap, source, n, 3)
    group, txn_id = f"eos-{uuid.uuid4().hex[:8]}", f"eos-{uuid.uuid4().hex[:8]}"
    rng = random.Random(7)
    progress = Progress(broker.bootstrap, group, source, 3)
    try:
        for round_ in range(4):
            proc = start_processor(
                broker.bootstrap, source, sink, group, txn_id, tmp_path / "processor.log"
            )
            try:
                if round_ < 3 and progress() < n:
                    # Let it get going (past its start-up), then kill it mid-stream.
                    start = progress()
                    wait_until(lambda s=start: progress() > s, "a processor commit", 60)
                    time.sleep(rng.uniform(0.0, 1.0))
                    proc.send_signal(signal.SIGKILL)
                    proc.wait(10)
                else:
                    wait_until(lambda: progress() >= n, "all input processed", 120)
            finally:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait(10)
        assert progress() == n
    finally:
        progress.close()
    assert_exactly_once(broker.bootstrap, sink, n, 3)


def test_admin_lists_and_describes_transactions(broker: SluiceBroker, topic: str) -> None:
    """What `kafka-transactions.sh list/describe` shows, through kafka-python's admin."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import TransactionalIdNotFoundError

    confluent_create_topic(broker.bootstrap, topic, partitions=2)
    txn_id = f"admin-{uuid.uuid4().hex[:8]}"
    producer = txn_producer(broker.bootstrap, txn_id, **{"transaction.timeout.ms": 45_000})
    producer.begin_transaction()
    producer.produce(topic, value=b"x", partition=1)
    producer.flush(30)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000)
    try:
        desc = admin.describe_transactions([txn_id])[txn_id]
        assert str(desc.state.value) == "Ongoing"
        assert desc.transaction_timeout_ms == 45_000
        assert {(tp.topic, tp.partition) for tp in desc.topic_partitions} == {(topic, 1)}
        assert desc.transaction_start_time_ms > 0
        listed = [t for ts in admin.list_transactions().values() for t in ts]
        mine = [t for t in listed if t.transactional_id == txn_id]
        assert len(mine) == 1 and mine[0].producer_id == desc.producer_id
        ongoing = admin.list_transactions(state_filters=["Ongoing"])
        assert txn_id in {t.transactional_id for ts in ongoing.values() for t in ts}
        # DescribeProducers (`kafka-transactions.sh describe-producers`): the open
        # transaction began at offset 0 of partition 1.
        from kafka import TopicPartition as KTP

        states = admin.describe_producers([KTP(topic, 1), KTP(topic, 0)])
        [active] = states[KTP(topic, 1)].active_producers
        assert active.producer_id == desc.producer_id
        assert active.current_transaction_start_offset == 0
        assert states[KTP(topic, 0)].active_producers == []

        producer.commit_transaction(30)
        states = admin.describe_producers([KTP(topic, 1)])
        assert states[KTP(topic, 1)].active_producers[0].current_transaction_start_offset == -1
        desc = admin.describe_transactions([txn_id])[txn_id]
        assert str(desc.state.value) == "CompleteCommit" and not desc.topic_partitions
        ongoing = admin.list_transactions(state_filters=["Ongoing"])
        assert txn_id not in {t.transactional_id for ts in ongoing.values() for t in ts}
        with pytest.raises(TransactionalIdNotFoundError):
            admin.describe_transactions([f"missing-{uuid.uuid4().hex[:8]}"])
    finally:
        admin.close()


def test_idle_transactional_ids_are_forgotten(tmp_path: Path) -> None:
    """transactional.id.expiration.ms: an id with no transaction for that long is gone."""
    from kafka.admin import KafkaAdminClient
    from kafka.errors import TransactionalIdNotFoundError

    broker = SluiceBroker(tmp_path, {"transactional.id.expiration.ms": "1500"})
    broker.start()
    try:
        topic = f"idle-{uuid.uuid4().hex[:8]}"
        confluent_create_topic(broker.bootstrap, topic, partitions=1)
        producer = txn_producer(broker.bootstrap, "idle-id")
        producer.begin_transaction()
        producer.produce(topic, value=b"x")
        producer.commit_transaction(30)
        admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=15_000)
        try:
            assert admin.describe_transactions(["idle-id"])["idle-id"].producer_id >= 0

            def forgotten() -> bool:
                try:
                    admin.describe_transactions(["idle-id"])
                except TransactionalIdNotFoundError:
                    return True
                return False

            wait_until(forgotten, "the idle id to be forgotten", 30)
        finally:
            admin.close()
        txn_producer(broker.bootstrap, "idle-id")  # starts afresh
    finally:
        broker.stop()


def test_kafkajs_transactions(broker: SluiceBroker, topic: str) -> None:
    from ._nodejs import kafkajs_transactions

    confluent_create_topic(broker.bootstrap, topic, partitions=2)
    got = kafkajs_transactions(broker.bootstrap, topic, 10)
    assert sorted(got["values"]) == sorted(f"committed-{i}" for i in range(10))  # type: ignore[arg-type]
