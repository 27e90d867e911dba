"""Consumer groups on one broker, with the stock clients: subscribe, rebalance, commit.

Members that must be killed or mixed across libraries run as processes of their own
(``_group_member.py``); the rest run in the test process. Brokers use short minimum
session timeouts and no initial rebalance delay, so nothing here waits on defaults.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from ._groups import (
    GROUP_BROKER_OPTIONS,
    SESSION_MS,
    Members,
    assert_resumes,
    committed_offsets,
    consume_and_commit,
    create_topic,
    describe_assignments,
    partitioned,
    produce_round_robin,
)
from ._kafka import unique_topic, wait_until
from .conftest import BrokerFactory, SluiceBroker

pytestmark = pytest.mark.e2e


@pytest.fixture
def members() -> Iterator[Members]:
    started = Members()
    try:
        yield started
    finally:
        started.cleanup()


@pytest.fixture
def group_broker(broker_factory: BrokerFactory) -> SluiceBroker:
    return broker_factory(**GROUP_BROKER_OPTIONS)


# --------------------------------------------------------------------------- rebalancing


def test_three_clients_share_partitions_and_take_over_on_leave_and_crash(
    group_broker: SluiceBroker, members: Members
) -> None:
    bootstrap = group_broker.bootstrap
    topic = unique_topic("mixed")
    create_topic(bootstrap, topic, 6)
    produce_round_robin(bootstrap, topic, 6, 5)
    group = f"mixed-{topic}"
    librd = members.start("confluent", bootstrap, group, topic, "librd")
    kpy = members.start("kafka-python", bootstrap, group, topic, "kpy")
    aio = members.start("aiokafka", bootstrap, group, topic, "aio")
    everyone = [librd, kpy, aio]
    # Protocol selection across libraries: only roundrobin is common to all three.
    wait_until(lambda: partitioned(everyone, 6), "three-way split of 6 partitions")
    assert all(len(m.assignment) == 2 for m in everyone), describe_assignments(everyone)
    wait_until(lambda: sum(len(m.records()) for m in everyone) >= 30, "all 30 records consumed")

    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(timeout=20)
    assert described.state == ConsumerGroupState.STABLE
    assert described.partition_assignor == "roundrobin"
    by_client = {m.client_id: m for m in described.members}
    assert sorted(by_client) == ["aio", "kpy", "librd"]
    for member in everyone:
        shown = by_client[member.name]
        assert shown.host == "/127.0.0.1"
        assert sorted(tp.partition for tp in shown.assignment.topic_partitions) == sorted(
            member.assignment
        )
        assert {tp.topic for tp in shown.assignment.topic_partitions} == {topic}

    # A clean leave: the others take over at once (no session timeout to wait out).
    kpy.stop()
    took = wait_until(lambda: partitioned([librd, aio], 6), "takeover after LeaveGroup")
    assert took < SESSION_MS / 1000, describe_assignments([librd, aio])

    # A crash: noticed by the session timeout, then the survivor takes everything.
    killed_at = time.monotonic()
    aio.kill()
    wait_until(lambda: librd.assignment == list(range(6)), "takeover after a crash", 20)
    took = time.monotonic() - killed_at
    assert took < SESSION_MS / 1000 + 4, f"{took:.1f}s"

    produce_round_robin(bootstrap, topic, 6, 1, tag="late")
    expected = {(p, f"late{p}-0") for p in range(6)}
    librd.wait(
        lambda: {(p, v) for p, _, v in librd.records() if v.startswith("late")} == expected,
        "records produced after the takeover, from every partition",
    )


def test_cooperative_sticky_moves_only_what_it_must(
    group_broker: SluiceBroker, members: Members
) -> None:
    bootstrap = group_broker.bootstrap
    topic = unique_topic("coop")
    create_topic(bootstrap, topic, 6)
    group = f"coop-{topic}"
    start = {"strategy": "cooperative-sticky"}
    first = members.start("confluent", bootstrap, group, topic, "first", **start)
    first.wait(lambda: first.assignment == list(range(6)), "all partitions to the first")
    second = members.start("confluent", bootstrap, group, topic, "second", **start)
    wait_until(lambda: partitioned([first, second], 6), "cooperative split")
    kept, moved = first.assignment, second.assignment
    assert len(kept) == len(moved) == 3
    # Incremental: the first member gave up exactly what moved and never the rest.
    revoked = [p for e in first.of("revoked") for p in e["partitions"]]
    assert sorted(revoked) == moved
    assert [e["partitions"] for e in first.of("assigned") if e["partitions"]] == [list(range(6))]

    second.stop()
    first.wait(lambda: first.assignment == list(range(6)), "the partitions coming back")
    # They come back as an addition, with nothing revoked on the way.
    assert [e["partitions"] for e in first.of("assigned") if e["partitions"]][-1] == moved
    assert sorted(p for e in first.of("revoked") for p in e["partitions"]) == moved


def test_static_member_restart_within_session_timeout_causes_no_rebalance(
    group_broker: SluiceBroker, members: Members
) -> None:
    bootstrap = group_broker.bootstrap
    topic = unique_topic("static")
    create_topic(bootstrap, topic, 4)
    group = f"static-{topic}"
    session = 10_000  # long enough that the restart surely fits in it
    options = {"session_ms": session}
    stays = members.start(
        "confluent", bootstrap, group, topic, "stays", instance_id="s-1", **options
    )
    restarts = members.start(
        "confluent", bootstrap, group, topic, "restarts", instance_id="s-2", **options
    )
    wait_until(lambda: partitioned([stays, restarts], 4), "two static members split")
    before = restarts.assignment
    stays_events = len(stays.of("assigned")) + len(stays.of("revoked"))

    restarts.stop()  # a static member leaves no LeaveGroup behind
    again = members.start(
        "confluent", bootstrap, group, topic, "restarts", instance_id="s-2", **options
    )
    again.wait(lambda: again.assignment == before, "the same partitions back")
    # No rebalance started: a rebalance would hold the group out of Stable until both
    # members rejoined, and the other member would be told to revoke and rejoin.
    admin = AdminClient({"bootstrap.servers": bootstrap})
    described = admin.describe_consumer_groups([group])[group].result(timeout=20)
    assert described.state == ConsumerGroupState.STABLE
    assert sorted(m.group_instance_id for m in described.members) == ["s-1", "s-2"]
    assert len(stays.of("assigned")) + len(stays.of("revoked")) == stays_events
    assert again.of("revoked") == []


# --------------------------------------------------------------------------- commits


def _consume_kafka_python(
    bootstrap: str, group: str, topic: str, count: int
) -> list[tuple[int, int]]:
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=500,
    )
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            for records in consumer.poll(timeout_ms=200, max_records=count - len(got)).values():
                got.extend((r.partition, r.offset) for r in records)
            consumer.commit()  # what poll() returned
    finally:
        consumer.close()
    assert len(got) == count, f"read {len(got)} of {count}"
    return got


async def _consume_aiokafka(
    bootstrap: str, group: str, topic: str, count: int
) -> list[tuple[int, int]]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=SESSION_MS,
        heartbeat_interval_ms=500,
    )
    await consumer.start()
    got: list[tuple[int, int]] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < count and time.monotonic() < deadline:
            batches = await consumer.getmany(timeout_ms=200, max_records=count - len(got))
            for records in batches.values():
                got.extend((r.partition, r.offset) for r in records)
            await consumer.commit()
    finally:
        await consumer.stop()
    assert len(got) == count, f"read {len(got)} of {count}"
    return got


def test_commits_resume_exactly_across_clients(group_broker: SluiceBroker) -> None:
    bootstrap = group_broker.bootstrap
    topic = unique_topic("resume")
    create_topic(bootstrap, topic, 3)
    produce_round_robin(bootstrap, topic, 3, 10)
    group = f"resume-{topic}"

    first = consume_and_commit(bootstrap, group, topic, 12)
    assert committed_offsets(bootstrap, group, topic, 3) == {
        p: max((o + 1 for q, o in first if q == p), default=-1) for p in range(3)
    }
    second = _consume_kafka_python(bootstrap, group, topic, 10)
    assert_resumes(first, second)
    produce_round_robin(bootstrap, topic, 3, 4)
    third = asyncio.run(_consume_aiokafka(bootstrap, group, topic, 20))
    assert_resumes(first + second, third)
    # Every record exactly once over the three consumers, in order per partition.
    everything = first + second + third
    assert sorted(everything) == [(p, o) for p in range(3) for o in range(14)]
    assert committed_offsets(bootstrap, group, topic, 3) == {0: 14, 1: 14, 2: 14}


def test_committed_offsets_survive_a_broker_restart(group_broker: SluiceBroker) -> None:
    bootstrap = group_broker.bootstrap
    topic = unique_topic("restart")
    create_topic(bootstrap, topic, 2)
    produce_round_robin(bootstrap, topic, 2, 10)
    group = f"restart-{topic}"
    first = consume_and_commit(bootstrap, group, topic, 7)
    group_broker.restart()
    assert committed_offsets(bootstrap, group, topic, 2) == {
        p: max((o + 1 for q, o in first if q == p), default=-1) for p in range(2)
    }
    second = consume_and_commit(bootstrap, group, topic, 13)
    assert_resumes(first, second)
    assert sorted(first + second) == [(p, o) for p in range(2) for o in range(10)]


# --------------------------------------------------------------------------- admin


def test_admin_lists_describes_and_deletes_groups(group_broker: SluiceBroker) -> None:
    from kafka import TopicPartition as KafkaTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import NoError

    bootstrap = group_broker.bootstrap
    topic = unique_topic("admin")
    create_topic(bootstrap, topic, 2)
    produce_round_robin(bootstrap, topic, 2, 3)
    group = f"admin-{topic}"
    consume_and_commit(bootstrap, group, topic, 6)

    admin = AdminClient({"bootstrap.servers": bootstrap})
    listed = admin.list_consumer_groups().result(timeout=20)
    mine = [g for g in listed.valid if g.group_id == group]
    assert len(mine) == 1 and mine[0].state == ConsumerGroupState.EMPTY
    request = ConsumerGroupTopicPartitions(group, [TopicPartition(topic, p) for p in range(2)])
    offsets = admin.list_consumer_group_offsets([request])[group].result(timeout=20)
    assert sorted((tp.partition, tp.offset) for tp in offsets.topic_partitions) == [(0, 3), (1, 3)]

    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        described = kadmin.describe_groups([group])[group]
        assert (described["error"], described["group_state"], described["members"]) == (
            None,
            "Empty",
            [],
        )
        assert group in {g["group_id"] for g in kadmin.list_groups()}
        committed = kadmin.list_group_offsets(group)[group]
        assert committed[KafkaTopicPartition(topic, 1)].offset == 3
        # OffsetDelete of one partition, then DeleteGroups of the whole group.
        deleted = kadmin.delete_group_offsets(group, [KafkaTopicPartition(topic, 0)])
        assert deleted == {KafkaTopicPartition(topic, 0): NoError}
        assert committed_offsets(bootstrap, group, topic, 2) == {0: -1, 1: 3}
        assert kadmin.delete_groups([group]) == {group: "OK"}
    finally:
        kadmin.close()
    assert committed_offsets(bootstrap, group, topic, 2) == {0: -1, 1: -1}
    unknown = admin.describe_consumer_groups(["no-such-group"])["no-such-group"]
    assert unknown.result(timeout=20).state == ConsumerGroupState.DEAD


def test_offsets_of_a_deleted_topic_are_gone(group_broker: SluiceBroker) -> None:
    bootstrap = group_broker.bootstrap
    topic = unique_topic("deleted")
    create_topic(bootstrap, topic, 1)
    produce_round_robin(bootstrap, topic, 1, 3)
    group = f"deleted-{topic}"
    consume_and_commit(bootstrap, group, topic, 3)
    assert committed_offsets(bootstrap, group, topic, 1) == {0: 3}
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.delete_topics([topic])[topic].result(timeout=20)
    create_topic(bootstrap, topic, 1)  # same name, new topic: starts without offsets
    assert committed_offsets(bootstrap, group, topic, 1) == {0: -1}
