"""Six brokers in three racks behind a three-voter controller quorum, on SeaweedFS + PostgreSQL.

Placement follows the design (RF = number of racks, one replica per rack, leaders balanced);
a broker that dies is fenced after its session timeout while clients carry on through the
others (Metadata routes around it), and it is back in every ISR as soon as it returns.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import AdminClient, NewPartitions, NewTopic

from sluice.cluster import LocalCluster
from tests.fixtures.cluster import FAST_LIVENESS, running_cluster

from ._kafka import assert_exactly_once, confluent_consume, kcat, stream_through, wait_until

pytestmark = pytest.mark.e2e

RACKS = ("az-a", "az-b", "az-c")
SESSION_MS = int(FAST_LIVENESS["broker.session.timeout.ms"])


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory,
        "six",
        brokers=6,
        racks=RACKS,
        broker_options=FAST_LIVENESS,
        controllers=3,
        controller_options={"broker.session.timeout.ms": str(SESSION_MS)},
    ) as c:
        yield c


def describe(admin: AdminClient, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr)."""
    md = admin.list_topics(topic, timeout=10).topics[topic]
    return {p.id: (p.leader, list(p.replicas), list(p.isrs)) for p in md.partitions.values()}


def test_placement_is_rack_aware_with_balanced_leaders(cluster: LocalCluster, topic: str) -> None:
    rack_of = {b.node_id: b.rack for b in cluster.brokers}
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 6, "six live brokers", 15)
    admin.create_topics([NewTopic(topic, num_partitions=6)])[topic].result(20)
    wait_until(lambda: len(describe(admin, topic)) == 6, "the topic's partitions", 10)
    parts = describe(admin, topic)
    for leader, replicas, isr in parts.values():
        assert len(replicas) == 3 and sorted(rack_of[r] for r in replicas) == sorted(RACKS)
        assert leader in replicas and sorted(isr) == sorted(replicas)
    assert sorted(Counter(leader for leader, _, _ in parts.values()).values()) == [1] * 6

    # RF is managed: asking for 2 is refused with the reason.
    with pytest.raises(KafkaException) as refused:
        admin.create_topics([NewTopic(topic + "-rf2", 1, replication_factor=2)])[
            topic + "-rf2"
        ].result(20)
    assert refused.value.args[0].code() == 38  # INVALID_REPLICATION_FACTOR
    assert "rack" in refused.value.args[0].str()
    # Asking for the managed factor itself is granted, as a Kafka of three brokers grants 3
    # (Kafka Connect's and MirrorMaker 2's internal topics ask for it by default).
    rf3 = topic + "-rf3"
    admin.create_topics([NewTopic(rf3, 1, replication_factor=3)])[rf3].result(20)
    wait_until(lambda: len(describe(admin, rf3)) == 1, "the RF 3 topic", 10)
    for leader, replicas, _ in describe(admin, rf3).values():
        assert sorted(rack_of[r] for r in replicas) == sorted(RACKS) and leader in replicas

    # New partitions follow the same rule.
    admin.create_partitions([NewPartitions(topic, 9)])[topic].result(20)
    wait_until(lambda: len(describe(admin, topic)) == 9, "nine partitions", 10)
    for leader, replicas, _ in describe(admin, topic).values():
        assert sorted(rack_of[r] for r in replicas) == sorted(RACKS) and leader in replicas


def test_dead_broker_is_fenced_clients_carry_on_and_it_returns(
    cluster: LocalCluster, topic: str
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=6)])[topic].result(20)
    wait_until(lambda: len(describe(admin, topic)) == 6, "the topic's partitions", 10)
    victim = cluster.brokers[4]
    led_by_victim = [
        p for p, (leader, _, _) in describe(admin, topic).items() if leader == victim.node_id
    ]
    assert led_by_victim, "placement gives every broker a leadership"
    # Every topic's partitions with a replica on the victim, and those it leads.
    everything = admin.list_topics(timeout=10).topics.values()
    placed = [(p.leader, p.replicas) for t in everything for p in t.partitions.values()]
    with_victim = sum(1 for _, replicas in placed if victim.node_id in replicas)
    led = sum(1 for leader, _ in placed if leader == victim.node_id)

    def kill_wait_fenced() -> None:
        victim.kill()
        # Fenced after the session timeout: gone from Metadata, which routes around it
        # (leaders and the ISR clients see are alive replicas). The controller itself
        # keeps diskless ISRs and leaders as they are (seed 000; controller unit tests).
        wait_until(
            lambda: all(
                victim.node_id not in isr and leader != victim.node_id
                for leader, _, isr in describe(admin, topic).values()
            ),
            "the dead broker to be fenced",
            SESSION_MS / 1000 + 5,
        )

    stream = stream_through(cluster.bootstrap, topic, 2000, kill_wait_fenced)
    got = confluent_consume(cluster.bootstrap, topic, partitions=range(6), expected=2000)
    assert_exactly_once(stream, got, 6)

    # Each alive leader reports its partitions with the dead replica as under-replicated
    # (informational for diskless); the dead broker's own leaderships stay with it
    # (seed 000), so nobody reports those.
    alive = [b for b in cluster.brokers if b is not victim]

    def reported() -> float:
        urp = "kafka_server_replicamanager_underreplicatedpartitions"
        return sum(b.metrics()[urp] for b in alive)

    assert with_victim - led >= 1
    # (Every broker follows the metadata log on its own: each sees the fence soon.)
    wait_until(lambda: reported() == with_victim - led, "leaders to report it", 5)

    victim.start()
    wait_until(
        lambda: all(
            victim.node_id in isr
            for _, replicas, isr in describe(admin, topic).values()
            if victim.node_id in replicas
        ),
        "the returning broker back in the ISR",
        10,
    )
    # The preferred leader takes its partitions back.
    wait_until(
        lambda: all(describe(admin, topic)[p][0] == victim.node_id for p in led_by_victim),
        "preferred leadership restored",
        10,
    )
    wait_until(lambda: reported() == 0, "no under-replicated partition left", 10)


def test_kcat_and_confluent_through_every_broker(cluster: LocalCluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=6)])[topic].result(20)
    wait_until(lambda: len(describe(admin, topic)) == 6, "the topic's partitions", 10)
    leaders = {p: leader for p, (leader, _, _) in describe(admin, topic).items()}
    assert set(leaders.values()) == {b.node_id for b in cluster.brokers}  # one each
    for partition, leader in leaders.items():
        # kcat bootstrapped on the partition's leader writes there.
        lines = "".join(f"k{partition}:v{partition}-{i}\n" for i in range(20))
        kcat(
            [
                "-b",
                cluster.broker(leader).bootstrap,
                "-P",
                "-t",
                topic,
                "-p",
                str(partition),
                "-K:",
            ],
            stdin=lines.encode(),
        )
    got = confluent_consume(cluster.bootstrap, topic, partitions=range(6), expected=120)
    by_partition = Counter(g.partition for g in got)
    assert by_partition == {p: 20 for p in range(6)}
    assert all(g.value == f"v{g.partition}-{g.offset}".encode() for g in got)


def test_sigterm_under_load_loses_nothing(cluster: LocalCluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=6)])[topic].result(20)
    wait_until(lambda: len(describe(admin, topic)) == 6, "the topic's partitions", 10)
    victim = cluster.brokers[2]
    exit_codes: list[int] = []

    def stop_and_restart() -> None:
        exit_codes.append(victim.stop())  # SIGTERM: flush, answer, deregister
        time.sleep(0.5)
        victim.start()

    stream = stream_through(cluster.bootstrap, topic, 2000, stop_and_restart)
    assert exit_codes == [0], victim.log_tail()
    got = confluent_consume(cluster.bootstrap, topic, partitions=range(6), expected=2000)
    # Every acknowledged record once, and no delivery error reached the application (the
    # client only retried).
    assert_exactly_once(stream, got, 6)
