"""Consumer groups on two brokers sharing PostgreSQL and S3 (SeaweedFS), started with
`sluice.cluster.LocalCluster`.

Each group has one coordinator among the live brokers. When it dies, the survivor
takes the group over: it loads the group's membership snapshot, so the members go on
with their member id, generation and assignment (no rebalance), and the committed
offsets live in PostgreSQL and so also survive a restart of every broker.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient

from sluice.cluster import LocalCluster
from tests.fixtures.cluster import FAST_LIVENESS, running_cluster

from ._groups import (
    GROUP_BROKER_OPTIONS,
    Members,
    assert_resumes,
    committed_offsets,
    consume_and_commit,
    create_topic,
    partitioned,
    produce_round_robin,
)
from ._kafka import unique_topic, wait_until

pytestmark = pytest.mark.e2e

# Long enough for the members to find the new coordinator before their own session
# (librdkafka rejoins when it gets no heartbeat answer for that long).
FAILOVER_SESSION_MS = 10_000
# A killed broker leaves the live list (and its groups move) in ~2 s. KIP-848 members get
# the failover session timeout from the broker.
BROKER_OPTIONS = {
    **GROUP_BROKER_OPTIONS,
    **FAST_LIVENESS,
    "group.consumer.session.timeout.ms": str(FAILOVER_SESSION_MS),
    "group.consumer.heartbeat.interval.ms": "500",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory, "groups-cluster", 2, broker_options=BROKER_OPTIONS) as c:
        yield c


def _brokers_seen(bootstrap: str) -> int:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    return len(admin.list_topics(timeout=10).brokers)


@pytest.fixture
def healthy(cluster: LocalCluster) -> LocalCluster:
    """Both brokers running and seeing each other (so they agree on coordinators)."""
    for b in cluster.brokers:
        b.log_mark = b.log_size()
        if not b.alive():
            b.start()
    for b in cluster.brokers:
        wait_until(lambda b=b: _brokers_seen(b.bootstrap) == 2, f"broker {b.node_id} sees both")
    return cluster


@pytest.fixture
def members() -> Iterator[Members]:
    started = Members()
    try:
        yield started
    finally:
        started.cleanup()


def test_group_survives_the_death_of_its_coordinator(
    healthy: LocalCluster, members: Members
) -> None:
    bootstrap = healthy.bootstrap
    topic = unique_topic("failover")
    create_topic(bootstrap, topic, 4)
    produce_round_robin(bootstrap, topic, 4, 5, tag="before")
    group = f"failover-{topic}"
    one = members.start("confluent", bootstrap, group, topic, "one", commit=True)
    two = members.start("kafka-python", bootstrap, group, topic, "two", commit=True)
    wait_until(lambda: partitioned([one, two], 4), "two members split 4 partitions")

    def values() -> set[str]:
        return {v for m in (one, two) for _, _, v in m.records()}

    wait_until(lambda: len(values()) == 20, "the first 20 records consumed")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    coordinator = admin.describe_consumer_groups([group])[group].result(timeout=20).coordinator.id
    survivor = next(b for b in healthy.brokers if b.node_id != coordinator)
    healthy.broker(coordinator).kill()

    # Produced through the survivor: the members keep consuming, now coordinated there.
    produce_round_robin(survivor.bootstrap, topic, 4, 5, tag="after")
    expected = {f"{tag}{p}-{i}" for tag in ("before", "after") for p in range(4) for i in range(5)}
    wait_until(lambda: values() == expected, "every record after the failover", 40)
    wait_until(lambda: partitioned([one, two], 4), "the group formed again", 20)
    survivor_admin = AdminClient({"bootstrap.servers": survivor.bootstrap})
    moved = survivor_admin.describe_consumer_groups([group])[group].result(timeout=20)
    assert moved.coordinator.id == survivor.node_id
    # The commits made through either coordinator are all there.
    wait_until(
        lambda: (
            committed_offsets(survivor.bootstrap, group, topic, 4) == dict.fromkeys(range(4), 10)
        ),
        "committed offsets at the end of every partition",
        20,
    )


def _described(bootstrap: str, group: str) -> tuple[int, str, dict[str, list[int]]]:
    """(coordinator id, state, member id -> assigned partitions) as the admin sees them."""
    admin = AdminClient({"bootstrap.servers": bootstrap})
    found = admin.describe_consumer_groups([group])[group].result(timeout=20)
    members = {
        m.member_id: sorted(tp.partition for tp in m.assignment.topic_partitions)
        for m in found.members
    }
    return found.coordinator.id, str(found.state.name), members


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
def test_members_keep_their_generation_when_the_coordinator_dies(
    healthy: LocalCluster, members: Members, protocol: str
) -> None:
    """Classic: same member ids and generation. KIP-848 (consumer): same member ids,
    member epochs and assignments, loaded from the coordinator database."""
    bootstrap = healthy.bootstrap
    topic = unique_topic(f"keep-generation-{protocol}")
    create_topic(bootstrap, topic, 4)
    group = f"keep-{topic}"
    one, two = (
        members.start(
            "confluent", bootstrap, group, topic, name, commit=True,
            session_ms=FAILOVER_SESSION_MS, protocol=protocol,
        )
        for name in ("one", "two")
    )  # fmt: skip
    wait_until(lambda: partitioned([one, two], 4), "two members split 4 partitions")
    produce_round_robin(bootstrap, topic, 4, 5, tag="before")

    def values() -> list[str]:
        return [v for m in (one, two) for _, _, v in m.records()]

    wait_until(lambda: len(values()) == 20, "the first 20 records consumed")
    coordinator, state, before = _described(bootstrap, group)
    assert state == "STABLE" and len(before) == 2
    rebalances = [(len(m.of("assigned")), len(m.of("revoked"))) for m in (one, two)]
    assignments = [m.assignment for m in (one, two)]
    survivor = next(b for b in healthy.brokers if b.node_id != coordinator)
    healthy.broker(coordinator).kill()
    killed_at = time.monotonic()

    produce_round_robin(survivor.bootstrap, topic, 4, 5, tag="after")
    wait_until(lambda: len(values()) >= 40, "the records produced after the failover", 40)
    # The members commit through the new coordinator, as members of the old generation.
    wait_until(
        lambda: (
            committed_offsets(survivor.bootstrap, group, topic, 4) == dict.fromkeys(range(4), 10)
        ),
        "every record committed through the new coordinator",
        30,
    )
    # Still so a session timeout after the move: the members heartbeat there with
    # their member id and generation (else they would have been removed by now).
    settled_after = killed_at + FAILOVER_SESSION_MS / 1000 + 2
    wait_until(
        lambda: (
            time.monotonic() > settled_after
            and _described(survivor.bootstrap, group) == (survivor.node_id, "STABLE", before)
        ),
        "the new coordinator shows the same members and assignment",
        40,
    )
    # No rebalance on either member, and so nothing consumed twice.
    assert [(len(m.of("assigned")), len(m.of("revoked"))) for m in (one, two)] == rebalances
    assert [m.assignment for m in (one, two)] == assignments
    expected = {f"{tag}{p}-{i}" for tag in ("before", "after") for p in range(4) for i in range(5)}
    assert sorted(values()) == sorted(expected)


def test_a_transaction_commits_a_members_offsets_across_the_coordinator_change(
    healthy: LocalCluster,
) -> None:
    """Consume-transform-produce (KIP-447): the producer's TxnOffsetCommit names the
    consumer's member id and generation. After the group's coordinator died, the new
    one still knows them: the transaction commits instead of having to abort."""
    bootstrap = healthy.bootstrap
    topic = unique_topic("txn-failover")
    create_topic(bootstrap, topic, 2)
    produce_round_robin(bootstrap, topic, 2, 3)
    group = f"txn-{topic}"
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "session.timeout.ms": FAILOVER_SESSION_MS,
        }
    )
    try:
        consumer.subscribe([topic])
        got: list[str] = []

        def read_all() -> bool:
            msg = consumer.poll(0.2)
            if msg is not None and msg.error() is None:
                got.append(msg.value().decode())
            return len(got) == 6

        wait_until(read_all, "the 6 records consumed")
        metadata = consumer.consumer_group_metadata()
        positions = consumer.position(consumer.assignment())
        coordinator, state, _ = _described(bootstrap, group)
        assert state == "STABLE"
        survivor = next(b for b in healthy.brokers if b.node_id != coordinator)
        healthy.broker(coordinator).kill()
        wait_until(lambda: _brokers_seen(survivor.bootstrap) == 1, "the survivor alone")

        # A producer started now (its transaction coordinator is the survivor) commits
        # the offsets with the member id and generation the consumer had before.
        producer = Producer(
            {"bootstrap.servers": survivor.bootstrap, "transactional.id": f"txn-{topic}"}
        )
        producer.init_transactions(30)
        producer.begin_transaction()
        producer.produce(topic, value=b"processed", partition=0)
        producer.send_offsets_to_transaction(positions, metadata, 30)
        producer.commit_transaction(30)
        assert committed_offsets(survivor.bootstrap, group, topic, 2) == {0: 3, 1: 3}
    finally:
        consumer.close()


def test_committed_offsets_survive_a_restart_of_every_broker(healthy: LocalCluster) -> None:
    bootstrap = healthy.bootstrap
    topic = unique_topic("full-restart")
    create_topic(bootstrap, topic, 2)
    produce_round_robin(bootstrap, topic, 2, 10)
    group = f"full-restart-{topic}"
    first = consume_and_commit(bootstrap, group, topic, 7)
    before = committed_offsets(bootstrap, group, topic, 2)

    for b in healthy.brokers:
        b.stop()
    for b in healthy.brokers:
        b.start()
    for b in healthy.brokers:
        wait_until(lambda b=b: _brokers_seen(b.bootstrap) == 2, f"broker {b.node_id} back")

    assert committed_offsets(bootstrap, group, topic, 2) == before
    second = consume_and_commit(bootstrap, group, topic, 13)
    assert_resumes(first, second)
    assert sorted(first + second) == [(p, o) for p in range(2) for o in range(10)]
