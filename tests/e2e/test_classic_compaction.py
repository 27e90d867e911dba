"""Compaction of a classic topic (cleanup.policy=compact, RF=3) by the brokers' log
cleaner, seen by a stock client: keys overwritten many times, then a consumer from offset 0
(on the leader, and on a follower, which cleaned its own copy) gets the latest value per key,
at its original offset."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import OFFSET_BEGINNING, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from sluice.cluster import LocalCluster

from ._kafka import confluent_consumer, wait_until
from ._secure import classic_cluster, create_classic_rf3

pytestmark = pytest.mark.e2e

KEYS = 10
ROUNDS = 6


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with classic_cluster(
        tmp_path_factory, "classic-compact", {"log.cleaner.backoff.ms": "300"}
    ) as c:
        yield c


def test_keys_overwritten_many_times_keep_their_latest_value(cluster: LocalCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    configs = {
        "cleanup.policy": "compact",
        "segment.ms": "300",  # segments close quickly: only closed ones are cleaned
        "min.cleanable.dirty.ratio": "0.01",
    }
    topic, leader, replicas = create_classic_rf3(admin, "classic-compact", configs)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all", "linger.ms": 5})
    offset = 0
    latest: dict[bytes, int] = {}
    for _round in range(ROUNDS):
        for _ in range(20):
            for k in range(KEYS):
                key = b"key-%d" % k
                producer.produce(topic, key=key, value=b"%d" % offset)
                latest[key] = offset
                offset += 1
        assert producer.flush(20) == 0
        time.sleep(0.4)
    # One more record rolls the last full segment closed.
    producer.produce(topic, key=b"last", value=b"%d" % offset)
    latest[b"last"] = offset
    offset += 1
    assert producer.flush(20) == 0
    total = offset

    def compacted(**extra: object) -> list[tuple[int, bytes, bytes]]:
        """(offset, key, value) from offset 0 up to the last record written."""
        consumer = confluent_consumer(cluster.bootstrap, **extra)
        out: list[tuple[int, bytes, bytes]] = []
        try:
            consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
            deadline = time.monotonic() + 20
            while time.monotonic() < deadline and not (out and out[-1][0] == total - 1):
                msg = consumer.poll(0.2)
                if msg is not None and msg.error() is None:
                    out.append((msg.offset(), msg.key(), msg.value()))
        finally:
            consumer.close()
        return out

    def check(got: list[tuple[int, bytes, bytes]]) -> bool:
        # Offsets are the original ones (each value is its offset) and increase.
        assert all(offset == int(value) for offset, _k, value in got)
        assert [o for o, _k, _v in got] == sorted({o for o, _k, _v in got})
        seen: dict[bytes, int] = {}
        for offset, key, _v in got:
            seen[key] = offset
        assert seen == latest  # the latest value of every key is there
        return len(got) < total // 2

    wait_until(lambda: check(compacted()), "the leader's log compacted", 30)
    # Each replica cleans its own log: a consumer in a follower's rack reads there.
    rack_of = {b.node_id: b.rack for b in cluster.brokers}
    follower = next(r for r in replicas if r != leader)
    wait_until(
        lambda: check(compacted(**{"client.rack": rack_of[follower]})),
        "the follower's log compacted",
        30,
    )
