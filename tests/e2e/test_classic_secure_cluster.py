"""Classic topics on a ``sluice cluster up --secure`` cluster with an authorizer: followers
replicate over the SASL_SSL inter-broker listener (TLS checked against the cluster's CA,
SCRAM-SHA-512 login as the brokers' own super user, CLUSTER_ACTION for replication)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.cluster import LocalCluster
from tests.fixtures.cluster import FAST_LIVENESS, running_cluster

from ._kafka import confluent_consume, unique_topic, wait_until

pytestmark = pytest.mark.e2e

RACKS = ("az-a", "az-b", "az-c")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory,
        "classic-secure",
        brokers=3,
        racks=RACKS,
        broker_options={
            **FAST_LIVENESS,
            "replica.fetch.backoff.ms": "200",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:admin",
        },
        controllers=1,
        controller_options={
            "broker.session.timeout.ms": FAST_LIVENESS["broker.session.timeout.ms"]
        },
        secure=True,
    ) as c:
        yield c


def conf(c: LocalCluster) -> dict[str, str]:
    return {
        "bootstrap.servers": c.bootstrap,
        "security.protocol": "SASL_SSL",
        "sasl.mechanisms": "SCRAM-SHA-512",
        "sasl.username": "admin",
        "sasl.password": c.tls.admin_password(),
        "ssl.ca.location": str(c.tls.ca),
    }


def test_classic_rf3_replicates_over_sasl_ssl(cluster: LocalCluster) -> None:
    admin = AdminClient(conf(cluster))
    topic = unique_topic("classic-secure")
    new = NewTopic(topic, 1, 3, config={"diskless.enable": "false", "min.insync.replicas": "3"})
    admin.create_topics([new])[topic].result(20)

    def partition() -> tuple[int, list[int], list[int]]:
        p = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        return p.leader, list(p.replicas), sorted(p.isrs)

    wait_until(lambda: partition()[2] == [1, 2, 3], "a full ISR", 20)
    leader, replicas, _ = partition()
    producer = Producer({**conf(cluster), "acks": "all", "linger.ms": 5})
    errors: list[str] = []
    for i in range(200):
        producer.produce(
            topic, value=b"%d" % i, on_delivery=lambda err, _m: err and errors.append(str(err))
        )
    assert producer.flush(30) == 0 and not errors
    # KIP-392: a consumer in a follower's rack reads from that follower.
    rack_of = {b.node_id: b.rack for b in cluster.brokers}
    follower = next(r for r in replicas if r != leader)
    fetches = 'sluice_requests_total{api="Fetch"}'
    before = cluster.broker(follower).metrics().get(fetches, 0.0)
    got = confluent_consume(
        cluster.bootstrap,
        topic,
        expected=200,
        **{**conf(cluster), "client.rack": rack_of[follower]},
    )
    assert [int(g.value or b"-1") for g in got] == list(range(200))
    assert cluster.broker(follower).metrics().get(fetches, 0.0) > before
    # The brokers' password is nowhere in their logs.
    for b in cluster.brokers:
        assert cluster.tls.broker_password() not in b.log_path.read_text(errors="replace")
