"""Online migration between classic and KIP-848 consumer groups
(``group.consumer.migration.policy``): a consumer-protocol member joining a classic group
upgrades it, the classic members are then assigned by the coordinator through their
JoinGroup/SyncGroup/Heartbeat, the state survives a change of coordinator, and the group is
downgraded when the last consumer-protocol member leaves."""

from __future__ import annotations

import struct
from dataclasses import replace

import pytest
from kio.schema.errors import ErrorCode

from broker.groups.consumer_classic_members import ClassicJoin
from broker.groups.consumer_group_heartbeat import HeartbeatRequest, HeartbeatResult
from broker.groups.consumer_migration import MigrationPolicy
from broker.groups.consumer_protocol import parse_assignment
from broker.groups.group import GroupState, JoinResult
from broker.groups.service import GroupService
from tests.fixtures.group_services import GroupBrokers, ManualClock

from .test_consumer_group_coordinator import T, lookup
from .test_group_coordinator import SETTLE, new_member, sync
from .test_group_failover import G

E = ErrorCode


def subscription(topics: list[str], owned: dict[str, list[int]] | None = None) -> bytes:
    """A ConsumerProtocolSubscription v1 (topics, no user data, owned partitions)."""
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">i", -1)
    owned = owned or {}
    out += struct.pack(">i", len(owned))
    for t, ps in owned.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(f">i{len(ps)}i", len(ps), *ps)
    return out


def assignment(partitions: list[int]) -> bytes:
    """A ConsumerProtocolAssignment v0 of topic t."""
    n = len(partitions)
    return struct.pack(f">hih1si{n}ii", 0, 1, 1, b"t", n, *partitions, -1)


PROTOCOLS = [("range", subscription(["t"]))]


async def classic_group(service: GroupService, clock: ManualClock) -> list[JoinResult]:
    """Two classic members, the leader gave partitions 0,1 and 2,3 of t."""
    coordinator = service.coordinator
    joins = [new_member(coordinator, group=G, protocols=PROTOCOLS) for _ in range(2)]
    clock.advance(SETTLE)
    results = [f.result() for f in joins]
    leader = next(r for r in results if r.member_id == r.leader)
    follower = next(r for r in results if r is not leader)
    given = {leader.member_id: assignment([0, 1]), follower.member_id: assignment([2, 3])}
    pending = sync(coordinator, follower, group=G)
    sync(coordinator, leader, given, group=G)
    assert (await pending).error == E.none
    assert coordinator.groups[G].state is GroupState.STABLE
    return [leader, follower]


async def consumer_join(service: GroupService, member_id: str) -> HeartbeatResult:
    request = HeartbeatRequest(
        G, member_id, 0, rebalance_timeout_ms=10_000, subscribed_topic_names=("t",), owned={}
    )
    return await service.consumer.heartbeat(request, 1, lookup)


def rejoin(member_id: str, owned: dict[str, list[int]] | None = None) -> ClassicJoin:
    protocols = (("range", subscription(["t"], owned)),)
    return ClassicJoin(member_id, None, "client", "/h", 10_000, 10_000, "consumer", protocols,
                       require_known_member_id=True)  # fmt: skip


async def test_a_consumer_member_upgrades_a_classic_group(
    group_brokers: GroupBrokers, clock: ManualClock
) -> None:
    leader, follower = await classic_group(group_brokers.one, clock)
    generation = leader.generation_id
    joined = await consumer_join(group_brokers.one, "c")
    assert joined.error == E.none and joined.assignment == {}  # all partitions are held
    consumer = group_brokers.one.consumer
    assert G not in group_brokers.one.coordinator.groups and consumer.serves_classic(G)
    group = consumer.groups[G]
    assert group.group_epoch == generation + 1
    for member, partitions in ((leader, {0, 1}), (follower, {2, 3})):
        m = group.members[member.member_id]
        assert m.uses_classic_protocol and m.epoch == generation
        assert m.current.assigned == {T: frozenset(partitions)}
        # Told to rejoin by its heartbeat; a commit of its generation still goes in.
        assert consumer.classic_heartbeat(G, m.member_id, None, generation) == (
            E.rebalance_in_progress
        )
        assert (
            group_brokers.one.coordinator.check_commit(G, m.member_id, None, generation) == E.none
        )
        assert group_brokers.one.coordinator.check_commit(G, m.member_id, None, 99) == (
            E.illegal_generation
        )
    # Each (eager) classic member rejoins owning nothing and syncs: the coordinator's
    # assignment, two partitions each for the three members between them.
    owned: dict[str, set[int]] = {}
    for member in (leader, follower):
        answer = await consumer.classic_join(G, rejoin(member.member_id), lookup)
        assert (answer.error, answer.leader, answer.members) == (E.none, "", [])
        assert answer.generation_id == generation + 1 and answer.protocol_name == "range"
        synced = consumer.classic_sync(G, member.member_id, None, answer.generation_id,
                                       "consumer", "range")  # fmt: skip
        assert synced.error == E.none
        owned[member.member_id] = set(parse_assignment(synced.assignment).get("t", ()))
        assert consumer.classic_heartbeat(G, member.member_id, None, answer.generation_id) in (
            E.none,
            E.rebalance_in_progress,
        )
    result = await consumer.heartbeat(HeartbeatRequest(G, "c", joined.member_epoch, owned={}),
                                      1, lookup)  # fmt: skip
    assert result.error == E.none and result.assignment is not None
    owned["c"] = set(result.assignment.get(T, ()))
    assert sorted(p for ps in owned.values() for p in ps) == [0, 1, 2, 3]  # each once
    assert all(owned.values())

    # A new coordinator brings back the classic members of the consumer group.
    await group_brokers.one.coordinator.snapshots_settled()
    group_brokers.kill_one()
    assert await group_brokers.two.coordinator.load(G) is None
    moved = group_brokers.two.consumer.groups[G]
    assert moved.members[leader.member_id].uses_classic_protocol
    epoch = moved.members[leader.member_id].epoch
    assert group_brokers.two.consumer.classic_heartbeat(G, leader.member_id, None, epoch) in (
        E.none,
        E.rebalance_in_progress,
    )


async def test_the_policy_and_the_protocol_type_can_rule_the_upgrade_out(
    group_brokers: GroupBrokers, clock: ManualClock
) -> None:
    await classic_group(group_brokers.one, clock)
    for service in (group_brokers.one.coordinator, group_brokers.one.consumer):
        service.config = replace(
            service.config, consumer_migration_policy=MigrationPolicy.DOWNGRADE
        )
    refused = await consumer_join(group_brokers.one, "c")
    assert (refused.error, refused.message) == (
        E.group_id_not_found,
        f"Group {G} is not a consumer group.",
    )
    assert G in group_brokers.one.coordinator.groups
    with pytest.raises(ValueError, match="must be one of"):
        MigrationPolicy.parse("sideways")


async def test_a_custom_assignor_s_user_data_rules_the_upgrade_out(
    group_brokers: GroupBrokers, clock: ManualClock
) -> None:
    """Kafka refuses to convert a classic group whose assignments carry user data (a custom
    client-side assignor's, which the server-side assignors would lose)."""
    coordinator = group_brokers.one.coordinator
    joins = [new_member(coordinator, group=G, protocols=PROTOCOLS) for _ in range(2)]
    clock.advance(SETTLE)
    results = [f.result() for f in joins]
    leader = next(r for r in results if r.member_id == r.leader)
    follower = next(r for r in results if r is not leader)
    custom = struct.pack(">hih1si2iih", 0, 1, 1, b"t", 2, 0, 1, 2, 7)  # user data: 2 bytes
    given = {leader.member_id: custom, follower.member_id: assignment([2, 3])}
    pending = sync(coordinator, follower, group=G)
    sync(coordinator, leader, given, group=G)
    assert (await pending).error == E.none
    refused = await consumer_join(group_brokers.one, "c")
    assert (refused.error, refused.message) == (
        E.group_id_not_found,
        f"Cannot upgrade classic group {G} to consumer group because an unsupported custom "
        "assignor is in use. Please refer to the documentation or switch to a default "
        "assignor before re-attempting the upgrade.",
    )
    assert coordinator.groups[G].state is GroupState.STABLE  # still the classic group


async def test_the_last_consumer_member_leaving_downgrades_the_group(
    group_brokers: GroupBrokers, clock: ManualClock
) -> None:
    leader, follower = await classic_group(group_brokers.one, clock)
    joined = await consumer_join(group_brokers.one, "c")
    before = group_brokers.one.consumer.groups[G]
    epoch = before.group_epoch
    targets = {m: {"t": before.target[m][T]} for m in (leader.member_id, follower.member_id)}
    left = await group_brokers.one.consumer.heartbeat(HeartbeatRequest(G, "c", -1), 1, lookup)
    assert (left.error, left.member_epoch) == (E.none, -1), joined
    assert G not in group_brokers.one.consumer.groups
    classic = group_brokers.one.coordinator.groups[G]
    # A rebalance of the classic group, from the consumer group's epoch.
    assert classic.state is GroupState.PREPARING_REBALANCE
    assert classic.generation_id == epoch and classic.protocol_name == "range"
    assert set(classic.members) == {leader.member_id, follower.member_id}
    # Each member's assignment is its target in the consumer group, as Kafka converts.
    assert {m.member_id: parse_assignment(m.assignment) for m in classic.members.values()} == (
        targets
    )
    coordinator = group_brokers.one.coordinator
    assert coordinator.heartbeat(G, leader.member_id, None, epoch) == E.rebalance_in_progress
