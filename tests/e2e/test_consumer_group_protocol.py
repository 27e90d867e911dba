"""KIP-848 consumer groups (``group.protocol=consumer``) with stock librdkafka, on a
diskless and on a classic topic: the broker assigns, members reconcile incrementally
(revoke before assign), leave, crash (session timeout) and commit with member epochs."""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    Consumer,
    ConsumerGroupState,
    ConsumerGroupType,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from ._groups import (
    MemberProcess,
    Members,
    committed_offsets,
    describe_assignments,
    partitioned,
    produce_round_robin,
)
from ._kafka import confluent_create_topic, unique_topic, wait_until
from .conftest import BrokerFactory, SluiceBroker

pytestmark = pytest.mark.e2e

SESSION_MS = 3000
OPTIONS = {
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.heartbeat.interval.ms": "300",
    "group.min.session.timeout.ms": "1000",
    "group.initial.rebalance.delay.ms": "0",
}
KINDS = {"diskless": {}, "classic": {"diskless.enable": "false"}}


@pytest.fixture
def members() -> Iterator[Members]:
    started = Members()
    try:
        yield started
    finally:
        started.cleanup()


@pytest.fixture
def kip848_broker(broker_factory: BrokerFactory) -> SluiceBroker:
    return broker_factory(**OPTIONS)


def _start(
    members: Members, broker: SluiceBroker, group: str, topic: str, name: str
) -> MemberProcess:
    return members.start(
        "confluent", broker.bootstrap, group, topic, name, commit=True, protocol="consumer"
    )


def _consumed(everyone: list[MemberProcess]) -> Counter[tuple[int, int]]:
    return Counter((p, o) for m in everyone for p, o, _ in m.records())


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_members_share_rebalance_incrementally_leave_and_expire(
    kip848_broker: SluiceBroker, members: Members, kind: str
) -> None:
    bootstrap = kip848_broker.bootstrap
    topic = unique_topic(f"kip848-{kind}")
    confluent_create_topic(bootstrap, topic, 6, config=KINDS[kind])
    produce_round_robin(bootstrap, topic, 6, 5)
    group = f"g-{topic}"
    a = _start(members, kip848_broker, group, topic, "a")
    b = _start(members, kip848_broker, group, topic, "b")
    everyone = [a, b]
    # Reconciliation goes through intermediate states (one member revoked, the other not
    # yet given the partitions): wait for the end state.
    wait_until(
        lambda: partitioned([a, b], 6) and all(len(m.assignment) == 3 for m in (a, b)),
        "a 3/3 split of 6 partitions",
    )
    wait_until(lambda: len(_consumed(everyone)) >= 30, "all 30 records consumed")

    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(timeout=20)
    assert described.type == ConsumerGroupType.CONSUMER
    assert described.state == ConsumerGroupState.STABLE
    assert sorted(m.client_id for m in described.members) == ["a", "b"]
    listed = admin.list_consumer_groups(types={ConsumerGroupType.CONSUMER}).result(timeout=20)
    assert group in {g.group_id for g in listed.valid}

    # A third member: partitions move to it only once revoked elsewhere.
    c = _start(members, kip848_broker, group, topic, "c")
    everyone.append(c)
    wait_until(
        lambda: partitioned([a, b, c], 6) and all(len(m.assignment) == 2 for m in (a, b, c)),
        "a 2/2/2 split after c joined",
    )
    produce_round_robin(bootstrap, topic, 6, 2, tag="more")
    wait_until(lambda: len(_consumed(everyone)) >= 42, "the 12 later records consumed")

    # A clean leave (member epoch -1): the others take over at once.
    b.stop()
    took = wait_until(lambda: partitioned([a, c], 6), "takeover after b left")
    assert took < SESSION_MS / 1000, describe_assignments([a, c])

    # A crash: the session timeout fences c, a gets everything.
    killed_at = time.monotonic()
    c.kill()
    wait_until(lambda: a.assignment == list(range(6)), "takeover after c crashed", 20)
    assert time.monotonic() - killed_at < SESSION_MS / 1000 + 5
    produce_round_robin(bootstrap, topic, 6, 1, tag="late")
    wait_until(lambda: len(_consumed(everyone)) >= 48, "records produced after the crash")

    # Every record committed (each is committed before it is reported) was read once:
    # partitions changed hands only after their previous owner gave them up.
    twice = {k: n for k, n in _consumed(everyone).items() if n > 1}
    failed = [e for m in everyone for e in m.of("commit_failed")]
    assert not failed, failed
    assert not twice, twice
    committed = committed_offsets(bootstrap, group, topic, 6)
    assert committed == {p: 8 for p in range(6)}, committed


def test_a_classic_member_joins_a_consumer_group_and_commits_need_the_member_epoch(
    kip848_broker: SluiceBroker, members: Members
) -> None:
    bootstrap = kip848_broker.bootstrap
    topic = unique_topic("kip848-mixed")
    confluent_create_topic(bootstrap, topic, 2)
    group = f"g-{topic}"
    a = _start(members, kip848_broker, group, topic, "a")
    wait_until(lambda: a.assignment == [0, 1], "the only member owns both partitions")
    # As Kafka: the coordinator serves the classic member's JoinGroup/SyncGroup and assigns.
    classic = members.start("confluent", bootstrap, group, topic, "classic", commit=True)
    wait_until(lambda: partitioned([a, classic], 2), "one partition each", 30)

    # An admin commit (no member, epoch -1) is refused while the group has members.
    outsider = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        with pytest.raises(KafkaException) as refused:
            outsider.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
        assert "UNKNOWN_MEMBER_ID" in str(refused.value), refused.value
    finally:
        outsider.close()


def test_a_consumer_member_upgrades_a_classic_group_online(
    kip848_broker: SluiceBroker, members: Members
) -> None:
    """group.consumer.migration.policy=bidirectional (the default): classic consumers, then
    one with group.protocol=consumer joins: the group becomes a consumer group without
    losing a committed offset or reading a record twice."""
    bootstrap = kip848_broker.bootstrap
    topic = unique_topic("kip848-upgrade")
    confluent_create_topic(bootstrap, topic, 6)
    produce_round_robin(bootstrap, topic, 6, 5)
    group = f"g-{topic}"
    a = members.start("confluent", bootstrap, group, topic, "a", commit=True)
    b = members.start("confluent", bootstrap, group, topic, "b", commit=True)
    everyone = [a, b]
    wait_until(lambda: partitioned([a, b], 6), "the classic members share the partitions", 30)
    wait_until(lambda: len(_consumed(everyone)) >= 30, "all 30 records consumed")
    c = _start(members, kip848_broker, group, topic, "c")
    everyone.append(c)
    wait_until(
        lambda: partitioned([a, b, c], 6) and all(len(m.assignment) == 2 for m in (a, b, c)),
        "a 2/2/2 split after the upgrade",
        60,
    )
    produce_round_robin(bootstrap, topic, 6, 2, tag="more")
    wait_until(lambda: len(_consumed(everyone)) >= 42, "the 12 later records consumed")
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(timeout=20)
    assert described.type == ConsumerGroupType.CONSUMER
    twice = {k: n for k, n in _consumed(everyone).items() if n > 1}
    failed = [e for m in everyone for e in m.of("commit_failed")]
    assert not failed, failed
    assert not twice, twice
    wait_until(
        lambda: committed_offsets(bootstrap, group, topic, 6) == {p: 7 for p in range(6)},
        "every record's offset committed",
    )


def test_an_assigning_consumer_commits_outside_group_management(
    kip848_broker: SluiceBroker,
) -> None:
    """A group.protocol=consumer consumer that assign()s (no subscription) commits with
    epoch -1 and the member id librdkafka made up for itself: accepted while the group
    has no members, as Kafka (librdkafka's 0030 test; ILLEGAL_GENERATION before)."""
    bootstrap = kip848_broker.bootstrap
    topic = unique_topic("kip848-assign")
    confluent_create_topic(bootstrap, topic, 1)
    produce_round_robin(bootstrap, topic, 1, 3, tag="a")
    group = f"g-{topic}"
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "enable.auto.commit": False,
        }
    )
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        msg = c.poll(15)
        assert msg is not None and msg.error() is None and msg.offset() == 0
        [done] = c.commit(asynchronous=False)
        assert (done.error, done.offset) == (None, 1)
        [back] = c.committed([TopicPartition(topic, 0)], 15)
        assert back.offset == 1
    finally:
        c.close()
    assert committed_offsets(bootstrap, group, topic, 1) == {0: 1}


def test_regex_subscription_follows_matching_topics(
    kip848_broker: SluiceBroker, members: Members
) -> None:
    bootstrap = kip848_broker.bootstrap
    prefix = unique_topic("kip848re")
    confluent_create_topic(bootstrap, f"{prefix}-a", 1)
    confluent_create_topic(bootstrap, f"x{prefix}-b", 1)  # not a whole-name match
    produce_round_robin(bootstrap, f"{prefix}-a", 1, 2, tag="a")
    produce_round_robin(bootstrap, f"x{prefix}-b", 1, 2, tag="x")
    member = _start(members, kip848_broker, f"g-{prefix}", f"^{prefix}-.*", "re")
    wait_until(lambda: {v for _, _, v in member.records()} >= {"a0-0", "a0-1"}, "topic a read")
    # A topic created later that matches joins the subscription (a new group epoch).
    confluent_create_topic(bootstrap, f"{prefix}-c", 1)
    produce_round_robin(bootstrap, f"{prefix}-c", 1, 2, tag="c")
    wait_until(lambda: {v for _, _, v in member.records()} >= {"c0-0", "c0-1"}, "topic c read")
    assert not [v for _, _, v in member.records() if v.startswith("x")]


def test_static_member_restart_keeps_its_partitions_without_a_rebalance(
    kip848_broker: SluiceBroker, members: Members
) -> None:
    bootstrap = kip848_broker.bootstrap
    topic = unique_topic("kip848-static")
    confluent_create_topic(bootstrap, topic, 4)
    group = f"g-{topic}"

    def start(name: str, instance: str) -> MemberProcess:
        return members.start(
            "confluent", bootstrap, group, topic, name, instance_id=instance, protocol="consumer"
        )

    stays = start("stays", "s-1")
    restarts = start("restarts", "s-2")
    wait_until(lambda: partitioned([stays, restarts], 4), "two static members split")
    before = restarts.assignment
    stays_events = len(stays.of("assigned")) + len(stays.of("revoked"))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    first = admin.describe_consumer_groups([group])[group].result(timeout=20)

    restarts.stop()  # member epoch -2: it keeps its place for the session timeout
    again = start("restarts", "s-2")
    again.wait(lambda: again.assignment == before, "the same partitions back")
    described = admin.describe_consumer_groups([group])[group].result(timeout=20)
    assert described.state == ConsumerGroupState.STABLE
    assert sorted(m.group_instance_id for m in described.members) == ["s-1", "s-2"]
    assert len(described.members) == len(first.members) == 2
    # The other member was never asked to give anything up or take more.
    assert len(stays.of("assigned")) + len(stays.of("revoked")) == stays_events
