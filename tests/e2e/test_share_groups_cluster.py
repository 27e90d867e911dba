"""Share groups on a diskless topic of a three-broker cluster (PostgreSQL, SeaweedFS): two
share consumers in different AZs are served by different brokers (each AZ's leader of the
partition), which change one share-partition state in the database; every record is
delivered exactly once when all are accepted."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.cluster import LocalCluster
from tests.fixtures.cluster import fast_cluster

from ._kafka import unique_topic, wait_until

pytestmark = pytest.mark.e2e
RACKS = ("az-a", "az-b", "az-c")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with fast_cluster(tmp_path_factory, "share", brokers=3, racks=RACKS, controllers=1) as c:
        admin = AdminClient({"bootstrap.servers": c.bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, "three brokers", 60)
        yield c


def leader_seen_from(cluster: LocalCluster, az: str, topic: str) -> int:
    admin = AdminClient(
        {"bootstrap.servers": cluster.bootstrap, "client.id": f"a,diskless_az={az}"}
    )
    return admin.list_topics(topic, timeout=10).topics[topic].partitions[0].leader


def test_brokers_of_two_azs_share_one_partition(cluster: LocalCluster) -> None:
    topic = unique_topic("share-az")
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, 1, 1)])[topic].result(30)
    # Each AZ's clients fetch the partition from a broker of their own AZ.
    assert leader_seen_from(cluster, "az-a", topic) != leader_seen_from(cluster, "az-b", topic)
    group = unique_topic("sg")
    consumers = {
        az: ShareConsumer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "group.id": group,
                "client.id": f"app,diskless_az={az}",
                "share.acknowledgement.mode": "explicit",
                "max.poll.records": "5",
            }
        )
        for az in ("az-a", "az-b")
    }
    try:
        for c in consumers.values():
            c.subscribe([topic])
        end = time.monotonic() + 5  # both joined and fetching (the share-partition starts)
        while time.monotonic() < end:
            for c in consumers.values():
                assert not list(c.poll(0.2))
        values = [b"v%03d" % i for i in range(200)]
        producer = Producer({"bootstrap.servers": cluster.bootstrap, "linger.ms": 0})
        for i, v in enumerate(values):
            producer.produce(topic, value=v)
            if i % 5 == 4:
                producer.flush(10)
        assert producer.flush(30) == 0
        got: dict[str, list[bytes]] = {az: [] for az in consumers}
        end = time.monotonic() + 90
        while sum(map(len, got.values())) < len(values) and time.monotonic() < end:
            for az, c in consumers.items():
                msgs = list(c.poll(0.3))
                for m in msgs:
                    assert m.error() is None, m.error()
                    got[az].append(m.value())
                    c.acknowledge(m, AcknowledgeType.ACCEPT)
                if msgs:
                    c.commit_sync(30)
        everything = got["az-a"] + got["az-b"]
        assert sorted(everything) == values  # each record once, across two brokers
        assert got["az-a"] and got["az-b"]
    finally:
        for c in consumers.values():
            c.close()
