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
from confluent_kafka import (
    AcknowledgeType,
    Consumer,
    KafkaException,
    Producer,
    ShareConsumer,
    TopicPartition,
)
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ResourceType,
)

from sluice.cluster import LocalCluster
from tests.differential.wire import Connection, request_for
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


def _share_group(bootstrap: str, group: str) -> tuple[int, int, dict[str, int]]:
    """(coordinator id, group epoch, member id -> member epoch), from the coordinator."""
    host, port = bootstrap.split(",")[0].rsplit(":", 1)
    conn = Connection(host, int(port))
    try:
        found = conn.send(
            request_for("find_coordinator", 4, {"key_type": 0, "coordinator_keys": [group]})
        )
        coordinator = found.coordinators[0]
    finally:
        conn.close()
    conn = Connection(coordinator.host, coordinator.port)
    try:
        described = conn.send(request_for("share_group_describe", 1, {"group_ids": [group]}))
    finally:
        conn.close()
    [g] = described.groups
    assert g.error_code == 0, g
    return coordinator.node_id, g.group_epoch, {m.member_id: m.member_epoch for m in g.members}


def test_share_group_members_stay_when_the_coordinator_dies(healthy: LocalCluster) -> None:
    """KIP-932: the survivor loads the share group's membership from the coordinator
    database: the same members with the same epochs go on (no UNKNOWN_MEMBER_ID, no
    rejoin), every record is delivered, and none acknowledged is delivered again."""
    bootstrap = healthy.bootstrap
    topic = unique_topic("share-failover")
    create_topic(bootstrap, topic, 2)
    group = f"sg-{topic}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    configs = {"share.auto.offset.reset": "earliest", "share.record.lock.duration.ms": "5000"}
    ops = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=ops)
    admin.incremental_alter_configs([resource])[resource].result(30)
    produce_round_robin(bootstrap, topic, 2, 25, tag="before")
    consumers = [
        ShareConsumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "share.acknowledgement.mode": "explicit",
                "max.poll.records": "5",
            }
        )
        for _ in range(2)
    ]
    delivered: list[str] = []
    acknowledged: set[str] = set()
    errors: list[str] = []

    def poll_all() -> None:
        for c in consumers:
            msgs = list(c.poll(0.3))
            for m in msgs:
                if m.error() is not None:
                    errors.append(str(m.error()))
                    continue
                value = m.value().decode()
                # Accepted and committed before: never delivered again.
                assert value not in acknowledged, value
                delivered.append(value)
                c.acknowledge(m, AcknowledgeType.ACCEPT)
            if msgs:
                try:
                    done = c.commit_sync(30)
                except KafkaException as exc:  # the coordinator or a fetch broker went away
                    errors.append(str(exc))
                    continue
                for m in msgs:
                    tp = TopicPartition(m.topic(), m.partition())
                    if m.error() is None and done.get(tp, None) is None:
                        acknowledged.add(m.value().decode())

    try:
        for c in consumers:
            c.subscribe([topic])
        wait_until(lambda: poll_all() or len(set(delivered)) >= 50, "the first 50 records", 60)
        described: list[tuple[int, int, dict[str, int]]] = []

        def settled() -> bool:
            poll_all()
            described[:] = [_share_group(bootstrap, group)]
            _, epoch, members = described[0]
            return len(members) == 2 and set(members.values()) == {epoch}

        wait_until(settled, "both members at the group epoch", 30)
        [(coordinator, epoch, before)] = described
        survivor = next(b for b in healthy.brokers if b.node_id != coordinator)
        healthy.broker(coordinator).kill()

        produce_round_robin(survivor.bootstrap, topic, 2, 25, tag="after")
        expected = {
            f"{tag}{p}-{i}" for tag in ("before", "after") for p in range(2) for i in range(25)
        }
        wait_until(
            lambda: poll_all() or set(delivered) >= expected, "every record after the failover", 90
        )
        moved, epoch_after, after = _share_group(survivor.bootstrap, group)
        assert moved == survivor.node_id
        # The same members at the same epochs: nobody was told UNKNOWN_MEMBER_ID and rejoined.
        assert (epoch_after, after) == (epoch, before)
        assert not [e for e in errors if "UNKNOWN_MEMBER_ID" in e or "FENCED" in e], errors
    finally:
        for c in consumers:
            c.close()


def test_a_kip848_group_of_librdkafka_and_java_members_across_restarts_and_a_kill(
    healthy: LocalCluster, members: Members
) -> None:
    """Issue 30: a KIP-848 group of three consumers, two librdkafka and one Java client,
    each committing every record, through a rolling restart of both brokers (one at a time,
    SIGTERM and start again) and then a SIGKILL of one: every record produced meanwhile is
    consumed, the committed offsets never go back and end at each partition's end; a member
    that leaves has its partitions taken over by the others within a few heartbeat
    intervals (500 ms here), without a stop-the-world rebalance of theirs."""
    bootstrap = healthy.bootstrap
    topic = unique_topic("kip848-mixed")
    create_topic(bootstrap, topic, 6)
    group = f"mixed-{topic}"
    one, two = (
        members.start(
            "confluent", bootstrap, group, topic, name, commit=True,
            session_ms=FAILOVER_SESSION_MS, protocol="consumer",
        )
        for name in ("one", "two")
    )  # fmt: skip
    java = members.start("java", bootstrap, group, topic, "java", commit=True, protocol="consumer")
    everyone = (one, two, java)
    wait_until(lambda: partitioned(everyone, 6), "three members split 6 partitions", 90)
    produced: set[str] = set()
    committed_seen: list[dict[int, int]] = []

    def consumed() -> set[str]:
        return {v for m in everyone for _, _, v in m.records()}

    def round_of(tag: str, via: str) -> None:
        produce_round_robin(via, topic, 6, 5, tag=tag)
        produced.update(f"{tag}{p}-{i}" for p in range(6) for i in range(5))
        wait_until(lambda: produced <= consumed(), f"the {tag} records consumed", 60)

    def committed(via: str) -> dict[int, int]:
        now = committed_offsets(via, group, topic, 6)
        if committed_seen:
            before = committed_seen[-1]
            assert all(now[p] >= before[p] for p in range(6)), (before, now)
        committed_seen.append(now)
        return now

    round_of("start", bootstrap)
    committed(bootstrap)
    for broker in healthy.brokers:  # a rolling restart
        other = next(b for b in healthy.brokers if b is not broker)
        broker.stop()
        round_of(f"without{broker.node_id}-", other.bootstrap)
        committed(other.bootstrap)
        broker.start()
        wait_until(lambda b=broker: _brokers_seen(b.bootstrap) == 2, "the broker back", 60)
        round_of(f"after{broker.node_id}-", bootstrap)
        committed(bootstrap)
    victim, survivor = healthy.brokers
    victim.kill()
    round_of("killed-", survivor.bootstrap)
    per_partition = len(produced) // 6
    wait_until(
        lambda: committed(survivor.bootstrap) == dict.fromkeys(range(6), per_partition),
        "every record committed after the kill",
        60,
    )
    # One librdkafka member leaves: the other two take its partitions over at their next
    # heartbeats (KIP-848: only the leaver's partitions move).
    kept = {m.name: set(m.assignment) for m in (two, java)}
    left_at = time.monotonic()
    one.stop()
    wait_until(lambda: partitioned((two, java), 6), "two members hold all 6 partitions", 30)
    took = time.monotonic() - left_at
    assert took < 5.0, f"the leaver's partitions were taken over after {took:.1f} s"
    for m in (two, java):
        assert kept[m.name] <= set(m.assignment), f"{m} lost partitions: a stop-the-world move"
    round_of("two-left-", survivor.bootstrap)
    assert produced <= consumed()
