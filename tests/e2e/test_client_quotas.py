"""Client quotas end to end: set and described with @platformatic/kafka's admin client (the
Python clients have no quota APIs), enforced on stock librdkafka producers and consumers.

Short quota windows (3 samples of 1 s) keep the test quick: a client may burst about two
windows' worth before its rate is judged, then it moves at its quota.
"""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from ._kafka import confluent_create_topic
from ._nodejs import platformatic_quotas
from .conftest import BrokerFactory

pytestmark = pytest.mark.e2e

KiB = 1024
MiB = 1024 * KiB
WINDOWS = {"quota.window.num": "3", "quota.window.size.seconds": "1"}


def entity(user: str | None = "ANONYMOUS", client_id: str | None = None) -> list[dict]:
    out = [{"entityType": "user", "entityName": user}]
    if client_id is not None:
        out.append({"entityType": "client-id", "entityName": client_id})
    return out


def alter(bootstrap: str, ents: list[dict], key: str, value: float | None) -> None:
    op = {"key": key, "value": value, "remove": False} if value else {"key": key, "remove": True}
    answer = platformatic_quotas(bootstrap, "alter", [{"entities": ents, "ops": [op]}])
    assert "result" in answer, answer
    assert answer["result"][0]["errorCode"] == 0, answer  # type: ignore[index]


def produce_timed(bootstrap: str, topic: str, client_id: str, total: int) -> tuple[float, int]:
    """(seconds to produce ``total`` bytes in 16 KiB records, largest throttle time seen)."""
    throttles: list[int] = []
    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "client.id": client_id,
            "linger.ms": 5,
            "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000)),
        }
    )
    value = b"x" * (16 * KiB)
    errors: list[object] = []
    started = time.monotonic()
    for _ in range(total // len(value)):
        while True:
            try:
                producer.produce(
                    topic, value, partition=0, on_delivery=lambda e, _m: e and errors.append(e)
                )
                break
            except BufferError:
                producer.poll(0.05)
        producer.poll(0)
    assert producer.flush(120) == 0
    elapsed = time.monotonic() - started
    assert not errors, errors[:3]
    return elapsed, max(throttles, default=0)


def test_producer_byte_rate_throttles_a_stock_producer(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(**WINDOWS)
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    confluent_create_topic(broker.bootstrap, topic)
    limited, free = f"limited-{uuid.uuid4().hex[:6]}", f"free-{uuid.uuid4().hex[:6]}"
    quota = 512 * KiB
    alter(broker.bootstrap, entity(client_id=limited), "producer_byte_rate", quota)
    described = platformatic_quotas(
        broker.bootstrap,
        "describe",
        [{"entityType": "client-id", "matchType": 0, "match": limited}],
    )
    assert described["result"] == [
        {
            "entity": [
                {"entityType": "client-id", "entityName": limited},
                {"entityType": "user", "entityName": "ANONYMOUS"},
            ],
            "values": [{"key": "producer_byte_rate", "value": quota}],
        }
    ], described

    total = 4 * MiB
    elapsed, throttle_ms = produce_timed(broker.bootstrap, topic, limited, total)
    rate = total / elapsed
    print(f"limited producer: {rate / MiB:.2f} MiB/s, max throttle {throttle_ms} ms")
    # About two windows' worth goes through at once, the rest at the quota: 4 MiB in about
    # 5 s (0.7-0.8 MiB/s; unlimited, the same producer does hundreds of MiB/s).
    assert throttle_ms > 0
    assert quota / 2 < rate < quota * 2, f"{rate / MiB:.2f} MiB/s against a 0.5 MiB/s quota"
    # Another client id of the same user has no quota: it is not held back.
    free_elapsed, free_throttle = produce_timed(broker.bootstrap, topic, free, total)
    assert free_throttle == 0 and free_elapsed < elapsed / 2

    # Removing the quota lifts it.
    alter(broker.bootstrap, entity(client_id=limited), "producer_byte_rate", None)
    described = platformatic_quotas(
        broker.bootstrap, "describe", [{"entityType": "client-id", "matchType": 2}]
    )
    assert described["result"] == [], described
    time.sleep(3)  # the old samples leave the window
    lifted_elapsed, lifted_throttle = produce_timed(broker.bootstrap, topic, limited, total)
    assert lifted_throttle == 0 and lifted_elapsed < elapsed / 2


def test_consumer_byte_rate_throttles_a_stock_consumer(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(**WINDOWS)
    topic = f"quota-{uuid.uuid4().hex[:8]}"
    confluent_create_topic(broker.bootstrap, topic)
    total = 4 * MiB
    produce_timed(broker.bootstrap, topic, "filler", total)
    quota = 1 * MiB
    reader = f"reader-{uuid.uuid4().hex[:6]}"
    # The default client id's quota applies to each client id separately.
    alter(
        broker.bootstrap,
        [{"entityType": "client-id", "entityName": None}],
        "consumer_byte_rate",
        quota,
    )

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "client.id": reader,
            "group.id": reader,
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    got = 0
    started = time.monotonic()
    while got < total and time.monotonic() - started < 60:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            got += len(msg.value() or b"")
    elapsed = time.monotonic() - started
    consumer.close()
    assert got >= total
    rate = got / elapsed
    print(f"limited consumer: {rate / MiB:.2f} MiB/s")
    assert quota / 2 < rate < quota * 1.6, f"{rate / MiB:.2f} MiB/s against a 1 MiB/s quota"


def test_request_percentage_throttles_a_busy_client(broker_factory: BrokerFactory) -> None:
    broker = broker_factory(**WINDOWS)
    busy, idle = f"busy-{uuid.uuid4().hex[:6]}", f"idle-{uuid.uuid4().hex[:6]}"
    # A thousandth of a percent of a handler: any few requests exceed it.
    alter(broker.bootstrap, entity(client_id=busy), "request_percentage", 0.001)

    def throttles_seen(client_id: str) -> list[float]:
        seen: list[float] = []
        admin = AdminClient(
            {
                "bootstrap.servers": broker.bootstrap,
                "client.id": client_id,
                "throttle_cb": lambda event: seen.append(event.throttle_time),
            }
        )
        for _ in range(10):  # a throttled client waits its throttle time: stop at the first
            admin.list_topics(timeout=10)
            admin.poll(0.1)
            if seen:
                break
        return seen

    assert any(t > 0 for t in throttles_seen(busy))
    assert throttles_seen(idle) == []
