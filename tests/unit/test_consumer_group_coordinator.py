"""KIP-848 consumer groups on the coordinator: timers (session and rebalance timeouts),
storage across a change of coordinator, commits with member epochs, and the boundary
with classic groups. Two brokers' group services share one SQLite store; the clock is
manual (the group_brokers and clock fixtures: tests/fixtures/group_services.py)."""

from __future__ import annotations

from dataclasses import replace
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.groups.consumer_group import ConsumerGroupState, TopicInfo
from broker.groups.consumer_group_heartbeat import HeartbeatRequest, HeartbeatResult
from broker.groups.consumer_migration import MigrationPolicy
from broker.groups.group_coordinator import LeavingMember
from broker.groups.service import GroupService
from tests.fixtures.group_services import GroupBrokers, ManualClock

from .test_group_coordinator import SESSION, new_member
from .test_group_coordinator import join as join_classic
from .test_group_failover import G

E = ErrorCode
T = UUID(int=7)
CONSUMER_SESSION_MS = 45_000  # GroupConfig's default, Kafka's
REBALANCE_MS = 10_000


class Topics:
    def get(self, name: str) -> TopicInfo | None:
        return TopicInfo("t", T, 4) if name == "t" else None

    def matching(self, pattern: str) -> set[str]:
        return set()

    def partition_racks(self, topic_id: UUID, partitions: int) -> list[frozenset[str] | None]:
        return [None] * partitions  # diskless: every partition in every rack


lookup = Topics()


async def join(service: GroupService, member_id: str) -> HeartbeatResult:
    request = HeartbeatRequest(
        G, member_id, 0, rebalance_timeout_ms=REBALANCE_MS, subscribed_topic_names=("t",),
        owned={},
    )  # fmt: skip
    return await service.consumer.heartbeat(request, 1, lookup)


async def beat(
    service: GroupService, member_id: str, epoch: int, owned: set[int] | None
) -> HeartbeatResult:
    request = HeartbeatRequest(
        G, member_id, epoch, owned=None if owned is None else {T: frozenset(owned)}
    )
    return await service.consumer.heartbeat(request, 1, lookup)


async def stable_pair(service: GroupService) -> dict[str, tuple[int, set[int]]]:
    """Members a and b reconciled; member -> (epoch, partitions)."""
    await join(service, "a")
    await join(service, "b")
    held = {"a": set(range(4)), "b": set()}
    epochs = {"a": 2, "b": 3}  # a new group's first epoch is 2, as on Kafka 4.4
    for _ in range(4):
        for m in ("a", "b"):
            answer = await beat(service, m, epochs[m], held[m])
            assert answer.error == E.none, answer
            epochs[m] = answer.member_epoch
            if answer.assignment is not None:
                held[m] = set(answer.assignment.get(T, ()))
    group = service.consumer.groups[G]
    assert group.state is ConsumerGroupState.STABLE, group
    return {m: (epochs[m], held[m]) for m in ("a", "b")}


async def test_members_keep_epochs_and_assignments_on_a_new_coordinator(
    group_brokers: GroupBrokers,
) -> None:
    before = await stable_pair(group_brokers.one)
    assert sorted(len(ps) for _, ps in before.values()) == [2, 2]
    epoch = group_brokers.one.consumer.groups[G].group_epoch
    await group_brokers.one.coordinator.snapshots_settled()
    group_brokers.kill_one()
    for member, (member_epoch, partitions) in before.items():
        answer = await beat(group_brokers.two, member, member_epoch, partitions)
        assert (answer.error, answer.member_epoch) == (E.none, member_epoch)
    group = group_brokers.two.consumer.groups[G]
    assert group.group_epoch == epoch and group.state is ConsumerGroupState.STABLE
    assert {m: set(group.members[m].current.assigned[T]) for m in before} == {
        m: ps for m, (_, ps) in before.items()
    }


async def test_a_silent_member_is_fenced_after_the_session_timeout(
    group_brokers: GroupBrokers, clock: ManualClock
) -> None:
    before = await stable_pair(group_brokers.one)
    b_epoch, b_held = before["b"]
    clock.advance(CONSUMER_SESSION_MS - 1000)
    assert (await beat(group_brokers.one, "b", b_epoch, b_held)).error == E.none
    clock.advance(1500)  # a's session is over, b's is not
    group = group_brokers.one.consumer.groups[G]
    assert list(group.members) == ["b"]
    answer = await beat(group_brokers.one, "b", b_epoch, b_held)
    assert answer.assignment == {T: frozenset(range(4))}
    assert (await beat(group_brokers.one, "a", before["a"][0], set())).error == E.unknown_member_id


async def test_a_groups_own_session_timeout_fences_its_members(
    group_brokers: GroupBrokers, clock: ManualClock
) -> None:
    """consumer.session.timeout.ms set on the group (KIP-848) outlasts the broker's 45 s."""
    own_session_ms = 55_000

    async def group_timings(group_id: str) -> tuple[int, int, int]:
        return (own_session_ms, 5000, 0) if group_id == G else (CONSUMER_SESSION_MS, 5000, 0)

    group_brokers.one.consumer.group_timings = group_timings
    before = await stable_pair(group_brokers.one)
    b_epoch, b_held = before["b"]
    clock.advance(CONSUMER_SESSION_MS + 1000)  # past the broker's timeout, not the group's
    assert sorted(group_brokers.one.consumer.groups[G].members) == ["a", "b"]
    assert (await beat(group_brokers.one, "b", b_epoch, b_held)).error == E.none
    clock.advance(own_session_ms - CONSUMER_SESSION_MS)  # a's own session is over
    assert list(group_brokers.one.consumer.groups[G].members) == ["b"]


async def test_a_member_that_does_not_revoke_is_fenced_after_its_rebalance_timeout(
    group_brokers: GroupBrokers, clock: ManualClock
) -> None:
    await join(group_brokers.one, "a")
    assert (await join(group_brokers.one, "b")).assignment == {}
    asked = await beat(group_brokers.one, "a", 2, set(range(4)))
    assert len(asked.assignment[T]) == 2  # revoke the other two
    for _ in range(3):  # a heartbeats but keeps the partitions
        clock.advance(REBALANCE_MS / 4)
        assert (await beat(group_brokers.one, "a", 2, set(range(4)))).error == E.none
        assert (await beat(group_brokers.one, "b", 3, set())).error == E.none
    clock.advance(REBALANCE_MS / 4 + 1)
    assert list(group_brokers.one.consumer.groups[G].members) == ["b"]
    answer = await beat(group_brokers.one, "b", 3, set())
    assert answer.assignment == {T: frozenset(range(4))}


async def test_commits_carry_the_member_epoch(group_brokers: GroupBrokers) -> None:
    before = await stable_pair(group_brokers.one)
    coordinator = group_brokers.one.coordinator
    epoch = before["a"][0]
    assert coordinator.check_commit(G, "a", None, epoch) == E.none
    assert coordinator.check_commit(G, "a", None, epoch - 1) == E.stale_member_epoch
    assert coordinator.check_commit(G, "x", None, epoch) == E.unknown_member_id
    # No member, epoch -1 (an admin): only while the group is empty.
    assert coordinator.check_commit(G, "", None, -1) == E.unknown_member_id
    assert coordinator.check_fetch(G, "a", epoch) == E.none
    assert coordinator.check_fetch(G, "a", epoch + 1) == E.stale_member_epoch
    assert coordinator.check_fetch(G, "x", epoch) == E.unknown_member_id
    assert coordinator.check_fetch(G, None, -1) == E.none
    fetched = await group_brokers.one.offsets.fetch({G: None}, {G: ("a", epoch + 1)})
    assert fetched[G].error == E.stale_member_epoch
    consumer = group_brokers.one.consumer
    for m, (e, _) in before.items():
        request = HeartbeatRequest(G, m, -1)
        assert (await consumer.heartbeat(request, 1, lookup)).member_epoch == -1, e
    assert coordinator.check_commit(G, "", None, -1) == E.none


async def test_classic_and_consumer_groups_do_not_mix(
    group_brokers: GroupBrokers, clock: ManualClock
) -> None:
    coordinator = group_brokers.one.coordinator
    for service in (coordinator, group_brokers.one.consumer):
        service.config = replace(service.config, consumer_migration_policy=MigrationPolicy.DISABLED)
    # A classic group with a member: a consumer-protocol join is refused, as Kafka does
    # with group.consumer.migration.policy=disabled.
    classic = new_member(coordinator, group=G, session=SESSION)
    clock.advance(0)
    assert classic.result().error == E.none
    refused = await join(group_brokers.one, "a")
    assert refused.error == E.group_id_not_found
    assert refused.message == f"Group {G} is not a consumer group."
    left = coordinator.leave_group(G, [LeavingMember(classic.result().member_id, None)])
    assert left == (E.none, [E.none])
    # Empty now: the consumer member's join turns it into a consumer group.
    assert (await join(group_brokers.one, "a")).error == E.none
    assert G in group_brokers.one.consumer.groups and G not in coordinator.groups
    # And a classic JoinGroup to it is refused.
    refused_classic = join_classic(coordinator, group=G, session=SESSION)
    assert refused_classic.result().error == E.inconsistent_group_protocol


async def test_admin_views_of_a_consumer_group(group_brokers: GroupBrokers) -> None:
    admin = group_brokers.one.admin
    await join(group_brokers.one, "a")
    error, listed = await admin.list_groups([], ["consumer"])
    assert error == E.none
    assert listed == [
        {"group_id": G, "protocol_type": "consumer", "group_state": "Stable",
         "group_type": "consumer"}
    ]  # fmt: skip
    assert (await admin.list_groups([], ["classic"]))[1] == []
    assert [g["group_id"] for g in (await admin.list_groups(["stable"], []))[1]] == [G]
    (described,) = await admin.describe_groups([G])
    assert described["error_code"] == E.group_id_not_found
    assert described["error_message"] == f"Group {G} is not a classic group."
    assert await admin.delete_groups([G]) == [(G, E.non_empty_group)]
    request = HeartbeatRequest(G, "a", -1)
    assert (await group_brokers.one.consumer.heartbeat(request, 1, lookup)).error == E.none
    assert (await admin.list_groups([], ["consumer"]))[1][0]["group_state"] == "Empty"
    assert await admin.delete_groups([G]) == [(G, E.none)]
    assert G not in group_brokers.one.consumer.groups
