"""confluent-kafka (librdkafka): the client most production users run."""

from __future__ import annotations

import os
import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer

from ._kafka import (
    LIBRDKAFKA_0082_CONSUMER,
    LIBRDKAFKA_0082_RECORD,
    Got,
    Msg,
    assert_same,
    confluent_consume,
    confluent_create_topic,
    confluent_produce,
    expected_single_partition,
    standard_messages,
)
from .conftest import SluiceBroker

pytestmark = pytest.mark.e2e


def test_admin_create_topic_then_metadata_lists_it(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap, topic, partitions=3)
    from confluent_kafka.admin import AdminClient

    md = AdminClient({"bootstrap.servers": broker.bootstrap}).list_topics(timeout=10)
    assert topic in md.topics, sorted(md.topics)
    t = md.topics[topic]
    assert t.error is None, t.error
    assert sorted(t.partitions) == [0, 1, 2]
    for p in t.partitions.values():
        assert p.error is None, p.error
        assert p.leader == 1, "single-node dev broker is node 1 and must lead every partition"
        assert p.replicas == [1]
        assert p.isrs == [1]
    assert set(md.brokers) == {1}
    assert md.brokers[1].host == "127.0.0.1"
    assert md.brokers[1].port == broker.port


def test_create_existing_topic_is_rejected(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap, topic)
    with pytest.raises(KafkaException) as exc:
        confluent_create_topic(broker.bootstrap, topic)
    assert exc.value.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS


def test_produce_keys_headers_tombstones_roundtrip(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap, topic)
    msgs = standard_messages()
    # A null header value is legal on the wire and librdkafka passes it through.
    msgs.append(Msg(b"null-header", b"v", [("present", b"yes"), ("absent", None)]))
    base_ts = int(time.time() * 1000) - 60_000
    timestamps = [base_ts + i for i in range(len(msgs))]
    delivered = confluent_produce(broker.bootstrap, topic, msgs, timestamps=timestamps, acks="all")
    # The delivery report's offset is what apps log and store: it must be the real offset.
    assert delivered == [(0, i) for i in range(len(msgs))]
    got = confluent_consume(broker.bootstrap, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))
    # CreateTime timestamps set by the producer come back unchanged.
    assert [g.timestamp for g in got] == timestamps


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression(broker: SluiceBroker, topic: str, codec: str) -> None:
    msgs = standard_messages(n=300)
    confluent_create_topic(broker.bootstrap, topic)
    confluent_produce(broker.bootstrap, topic, msgs, **{"compression.type": codec, "acks": "all"})
    got = confluent_consume(broker.bootstrap, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))


@pytest.mark.parametrize("acks", ["0", "1", "all"])
def test_acks(broker: SluiceBroker, topic: str, acks: str) -> None:
    msgs = standard_messages(n=100)
    confluent_create_topic(broker.bootstrap, topic)
    delivered = confluent_produce(broker.bootstrap, topic, msgs, acks=acks)
    if acks != "0":
        assert delivered == [(0, i) for i in range(len(msgs))]
    # acks=0 gets no offsets back, but on a healthy broker nothing is lost either.
    got = confluent_consume(broker.bootstrap, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))


@pytest.mark.parametrize("idempotence", [True, False], ids=["idempotent", "plain"])
def test_idempotence(broker: SluiceBroker, topic: str, idempotence: bool) -> None:
    msgs = standard_messages(n=400)
    confluent_create_topic(broker.bootstrap, topic)
    delivered = confluent_produce(
        broker.bootstrap,
        topic,
        msgs,
        **{
            "enable.idempotence": idempotence,
            "acks": "all",
            # Several in-flight batches per connection: the case idempotence is there for.
            "max.in.flight.requests.per.connection": 5,
            "batch.size": 4096,
        },
    )
    assert delivered == [(0, i) for i in range(len(msgs))]
    got = confluent_consume(broker.bootstrap, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))


def test_idempotent_zstd_many_partitions_keyed(broker: SluiceBroker, topic: str) -> None:
    """The common production setup: idempotent, compressed, keyed, several partitions."""
    confluent_create_topic(broker.bootstrap, topic, partitions=6)
    msgs = [Msg(f"user-{i % 50}".encode(), f"event-{i}".encode(), []) for i in range(3000)]
    delivered = confluent_produce(
        broker.bootstrap,
        topic,
        msgs,
        partition=None,
        **{"enable.idempotence": True, "compression.type": "zstd", "linger.ms": 10},
    )
    got = confluent_consume(broker.bootstrap, topic, partitions=range(6), expected=len(msgs))
    by_pos = {(g.partition, g.offset): g for g in got}
    assert len(by_pos) == len(got) == len(msgs), "duplicate (partition, offset) in fetch output"
    # Each delivery report points at exactly the record that was sent.
    for (p, off), m in zip(delivered, msgs, strict=True):
        g = by_pos[(p, off)]
        assert (g.key, g.value) == (m.key, m.value)
    # Same key -> same partition, and per-partition offsets are dense from 0.
    key_to_part: dict[bytes | None, int] = {}
    for (p, _), m in zip(delivered, msgs, strict=True):
        assert key_to_part.setdefault(m.key, p) == p
    for p in range(6):
        offs = sorted(g.offset for g in got if g.partition == p)
        assert offs == list(range(len(offs)))


def test_librdkafka_0082_reads_records_near_its_fetch_limit(
    broker: SluiceBroker, topic: str
) -> None:
    """librdkafka's test 0082 on a diskless topic: 10 records of 900 KiB in each of 3
    partitions, read with fetch.max.bytes=1000000 and receive.message.max.bytes=1000512
    (an answer past that limit is refused by the client, which then fetches again)."""
    confluent_create_topic(broker.bootstrap, topic, partitions=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for p in range(3):
        for i in range(10):
            value = b"%04d" % i + os.urandom(LIBRDKAFKA_0082_RECORD)
            producer.produce(topic, value=value, partition=p)
    assert producer.flush(60) == 0
    got = confluent_consume(
        broker.bootstrap, topic, (0, 1, 2), expected=30, timeout=40, **LIBRDKAFKA_0082_CONSUMER
    )
    assert sorted((g.partition, g.offset) for g in got) == [
        (p, o) for p in range(3) for o in range(10)
    ]
    assert all(int((g.value or b"")[:4]) == g.offset for g in got)


def test_produce_to_partition_out_of_range_fails(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap, topic, partitions=2)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "message.timeout.ms": 5000})
    errors: list[KafkaError] = []
    producer.produce(topic, b"x", partition=5, on_delivery=lambda e, m: errors.append(e))
    producer.flush(15)
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError._UNKNOWN_PARTITION, errors[0]


def test_consume_from_middle_offset(broker: SluiceBroker, topic: str) -> None:
    from confluent_kafka import TopicPartition

    from ._kafka import confluent_consumer

    confluent_create_topic(broker.bootstrap, topic)
    msgs = [Msg(b"k", f"v{i}".encode(), []) for i in range(500)]
    # Small batches so offset 321 lands inside a batch, not on its first record: the broker
    # returns the whole batch and the client must skip the records before the asked offset.
    confluent_produce(broker.bootstrap, topic, msgs, **{"batch.size": 2000})
    consumer = confluent_consumer(broker.bootstrap)
    try:
        consumer.assign([TopicPartition(topic, 0, 321)])
        got: list[Got] = []
        deadline = time.monotonic() + 20
        while len(got) < 500 - 321 and time.monotonic() < deadline:
            m = consumer.poll(0.2)
            if m is not None and m.error() is None:
                got.append(Got(0, m.offset(), m.key(), m.value(), []))
    finally:
        consumer.close()
    assert [g.offset for g in got] == list(range(321, 500))
    assert [g.value for g in got] == [f"v{i}".encode() for i in range(321, 500)]
