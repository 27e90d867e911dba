"""Classic topics on a ``sluice cluster up --secure`` cluster with an authorizer: followers
replicate over the SASL_SSL inter-broker listener (TLS checked against the cluster's CA,
SCRAM-SHA-512 login as the brokers' own super user, CLUSTER_ACTION for replication)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from sluice.cluster import LocalCluster

from ._kafka import confluent_consume
from ._secure import classic_cluster, cluster_admin_conf, create_classic_rf3, with_authorizer

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with classic_cluster(
        tmp_path_factory, "classic-secure", with_authorizer("User:admin"), secure=True
    ) as c:
        yield c


def test_classic_rf3_replicates_over_sasl_ssl(cluster: LocalCluster) -> None:
    admin = AdminClient(cluster_admin_conf(cluster))
    topic, leader, replicas = create_classic_rf3(
        admin, "classic-secure", {"min.insync.replicas": "3"}
    )
    producer = Producer({**cluster_admin_conf(cluster), "acks": "all", "linger.ms": 5})
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
        **{**cluster_admin_conf(cluster), "client.rack": rack_of[follower]},
    )
    assert [int(g.value or b"-1") for g in got] == list(range(200))
    assert cluster.broker(follower).metrics().get(fetches, 0.0) > before
    # The brokers' password is nowhere in their logs.
    for b in cluster.brokers:
        assert cluster.tls.broker_password() not in b.log_path.read_text(errors="replace")
