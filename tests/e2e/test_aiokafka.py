"""aiokafka: asyncio client; sends Produce v7 / Fetch v11 / Metadata v5 (older, non-flexible)."""

from __future__ import annotations

import pytest
from aiokafka import AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from ._kafka import (
    Msg,
    aiokafka_consume_async,
    assert_same,
    expected_single_partition,
    standard_messages,
)
from .conftest import SluiceBroker

pytestmark = pytest.mark.e2e


async def create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
    await admin.start()
    try:
        resp = await admin.create_topics(
            [NewTopic(topic, num_partitions=partitions, replication_factor=1)]
        )
        # aiokafka returns the raw response instead of raising: check the per-topic code.
        errors = {t[0]: t[1] for t in resp.topic_errors}
        assert errors == {topic: 0}, f"CreateTopics answered {resp}"
    finally:
        await admin.close()


async def produce(bootstrap: str, topic: str, msgs: list[Msg], **conf: object) -> list[int]:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=5, request_timeout_ms=15_000, **conf
    )
    await producer.start()
    try:
        futures = [
            await producer.send(
                topic, key=m.key, value=m.value, headers=list(m.headers), partition=0
            )
            for m in msgs
        ]
        await producer.flush()
        # With acks=0 there is no answer, so aiokafka resolves each send to None.
        return [-1 if (md := await f) is None else md.offset for f in futures]
    finally:
        await producer.stop()


async def test_admin_create_and_describe(broker: SluiceBroker, topic: str) -> None:
    await create_topic(broker.bootstrap, topic, partitions=4)
    admin = AIOKafkaAdminClient(bootstrap_servers=broker.bootstrap)
    await admin.start()
    try:
        assert topic in await admin.list_topics()
        (desc,) = await admin.describe_topics([topic])
        assert desc["error_code"] == 0
        assert sorted(p["partition"] for p in desc["partitions"]) == [0, 1, 2, 3]
    finally:
        await admin.close()


async def test_produce_keys_headers_tombstones_roundtrip(broker: SluiceBroker, topic: str) -> None:
    await create_topic(broker.bootstrap, topic)
    msgs = standard_messages()
    offsets = await produce(broker.bootstrap, topic, msgs, acks="all")
    assert offsets == list(range(len(msgs)))
    got = await aiokafka_consume_async(broker.bootstrap, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))


@pytest.mark.parametrize("codec", ["gzip", "snappy", "lz4", "zstd"])
async def test_compression(broker: SluiceBroker, topic: str, codec: str) -> None:
    # snappy/lz4/zstd need cramjam installed; aiokafka raises at construction without it.
    await create_topic(broker.bootstrap, topic)
    msgs = standard_messages(n=300)
    offsets = await produce(broker.bootstrap, topic, msgs, compression_type=codec, acks="all")
    assert offsets == list(range(len(msgs)))
    got = await aiokafka_consume_async(broker.bootstrap, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))


@pytest.mark.parametrize("acks", [0, 1, "all"])
async def test_acks(broker: SluiceBroker, topic: str, acks: int | str) -> None:
    await create_topic(broker.bootstrap, topic)
    msgs = standard_messages(n=100)
    offsets = await produce(broker.bootstrap, topic, msgs, acks=acks)
    if acks != 0:
        assert offsets == list(range(len(msgs)))
    got = await aiokafka_consume_async(broker.bootstrap, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))


@pytest.mark.parametrize("idempotence", [True, False], ids=["idempotent", "plain"])
async def test_idempotence(broker: SluiceBroker, topic: str, idempotence: bool) -> None:
    await create_topic(broker.bootstrap, topic)
    msgs = standard_messages(n=300)
    offsets = await produce(
        broker.bootstrap,
        topic,
        msgs,
        acks="all",
        enable_idempotence=idempotence,
        max_batch_size=4096,
    )
    assert offsets == list(range(len(msgs)))
    got = await aiokafka_consume_async(broker.bootstrap, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))
