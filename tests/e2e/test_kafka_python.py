"""kafka-python: pure-Python client; sends Produce v9 / Fetch v12, idempotent by default."""

from __future__ import annotations

import pytest
from kafka import KafkaProducer
from kafka import TopicPartition as KTP

from ._kafka import (
    Msg,
    assert_same,
    expected_single_partition,
    kafka_python_consume,
    kafka_python_create_topic,
    standard_messages,
)
from .conftest import SluiceBroker

pytestmark = pytest.mark.e2e


def produce(bootstrap: str, topic: str, msgs: list[Msg], **conf: object) -> list[int]:
    producer = KafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=5, request_timeout_ms=15_000, **conf
    )
    try:
        futures = [
            producer.send(topic, key=m.key, value=m.value, headers=list(m.headers), partition=0)
            for m in msgs
        ]
        producer.flush(30)
        # .get() raises the broker's error for that record, if any.
        return [f.get(timeout=30).offset for f in futures]
    finally:
        producer.close(10)


def test_admin_create_and_list(broker: SluiceBroker, topic: str) -> None:
    from kafka.admin import KafkaAdminClient

    kafka_python_create_topic(broker.bootstrap, topic, partitions=2)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        assert topic in admin.list_topics()
        (desc,) = admin.describe_topics([topic])
        assert desc["error_code"] == 0
        # kafka-python 3.x names the field as the protocol does; 2.x said "partition".
        indexes = sorted(p.get("partition_index", p.get("partition")) for p in desc["partitions"])
        assert indexes == [0, 1]
    finally:
        admin.close()


def test_produce_keys_headers_tombstones_roundtrip(broker: SluiceBroker, topic: str) -> None:
    kafka_python_create_topic(broker.bootstrap, topic)
    msgs = standard_messages()
    offsets = produce(broker.bootstrap, topic, msgs, acks="all")
    assert offsets == list(range(len(msgs)))
    got = kafka_python_consume(broker.bootstrap, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
def test_compression(broker: SluiceBroker, topic: str, codec: str) -> None:
    # snappy/lz4/zstd need python-snappy, lz4 and zstandard installed; without them
    # KafkaProducer raises at construction, which is the right loud failure here.
    kafka_python_create_topic(broker.bootstrap, topic)
    msgs = standard_messages(n=300)
    offsets = produce(broker.bootstrap, topic, msgs, compression_type=codec, acks="all")
    assert offsets == list(range(len(msgs)))
    got = kafka_python_consume(broker.bootstrap, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))


@pytest.mark.parametrize("acks", [0, 1, "all"])
def test_acks(broker: SluiceBroker, topic: str, acks: int | str) -> None:
    kafka_python_create_topic(broker.bootstrap, topic)
    msgs = standard_messages(n=100)
    # kafka-python refuses idempotence with acks != all, so turn it off for 0 and 1.
    offsets = produce(broker.bootstrap, topic, msgs, acks=acks, enable_idempotence=(acks == "all"))
    if acks != 0:
        assert offsets == list(range(len(msgs)))
    got = kafka_python_consume(broker.bootstrap, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))


@pytest.mark.parametrize("idempotence", [True, False], ids=["idempotent", "plain"])
def test_idempotence(broker: SluiceBroker, topic: str, idempotence: bool) -> None:
    kafka_python_create_topic(broker.bootstrap, topic)
    msgs = standard_messages(n=300)
    offsets = produce(
        broker.bootstrap,
        topic,
        msgs,
        acks="all",
        enable_idempotence=idempotence,
        batch_size=4096,
    )
    assert offsets == list(range(len(msgs)))
    got = kafka_python_consume(broker.bootstrap, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))


def test_beginning_and_end_offsets(broker: SluiceBroker, topic: str) -> None:
    from kafka import KafkaConsumer

    kafka_python_create_topic(broker.bootstrap, topic, partitions=2)
    produce(broker.bootstrap, topic, [Msg(b"k", b"v", [])] * 7, acks="all")
    consumer = KafkaConsumer(bootstrap_servers=broker.bootstrap, group_id=None)
    try:
        tps = [KTP(topic, 0), KTP(topic, 1)]
        assert consumer.beginning_offsets(tps) == {tps[0]: 0, tps[1]: 0}
        assert consumer.end_offsets(tps) == {tps[0]: 7, tps[1]: 0}
    finally:
        consumer.close()
