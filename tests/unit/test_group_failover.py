"""Group membership across a change of coordinator (broker/groups/persistence.py).

Two brokers' group services share one SQLite store, as two brokers share the
coordinator database; the live broker list is changed by hand, so "broker 1 died" is
broker 2 becoming the group's coordinator. The clock is manual: session timeouts fire
only when a test moves it (the group_brokers and clock fixtures:
tests/fixtures/group_services.py).
"""

from __future__ import annotations

import itertools
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.groups.group import GroupState, JoinResult
from broker.groups.group_coordinator import LeavingMember
from broker.groups.offsets import OffsetToCommit
from broker.groups.placement import coordinator_for
from broker.groups.service import GroupService
from storage.groups import OffsetKey
from tests.fixtures.group_services import GroupBrokers, ManualClock, Node

from .test_group_coordinator import SESSION, join, new_member, sync

E = ErrorCode
S = GroupState
_T = UUID(int=1)


def group_on_broker_1() -> str:
    """A group id broker 1 coordinates while both brokers live."""
    both = [Node(1), Node(2)]
    return next(
        g for g in (f"g{i}" for i in itertools.count()) if coordinator_for(g, both) == Node(1)
    )


G = group_on_broker_1()


async def stable_group(
    service: GroupService, clock: ManualClock, n: int = 2, instance: bool = False
) -> list[JoinResult]:
    """n members joined and synced on ``service``; the leader assigns b"a-<member id>"."""
    c = service.coordinator
    # Static members join at once (no MEMBER_ID_REQUIRED round first).
    joins = [
        join(c, group=G, instance=f"instance-{i}") if instance else new_member(c, group=G)
        for i in range(n)
    ]
    clock.advance(0)
    results = [f.result() for f in joins]
    assert all(r.error == E.none for r in results)
    leader = next(r for r in results if r.member_id == r.leader)
    followers = [sync(c, r, group=G) for r in results if r is not leader]
    assigned = {r.member_id: b"a-" + r.member_id.encode() for r in results}
    assert (await sync(c, leader, assigned, group=G)).error == E.none
    for f in followers:
        assert (await f).error == E.none
    return results


async def test_members_go_on_with_the_new_coordinator(group_brokers: GroupBrokers) -> None:
    members = await stable_group(group_brokers.one, group_brokers.clock)
    group_brokers.kill_one()
    two = group_brokers.two.coordinator
    assert await two.load(G) is None
    for m in members:
        assert two.heartbeat(G, m.member_id, None, m.generation_id) == E.none
    group = two.groups[G]
    assert (group.state, group.generation_id, group.leader_id) == (S.STABLE, 1, members[0].leader)
    # A member that lost its SyncGroup answer asks again: the same assignment.
    again = await sync(two, members[1], group=G)
    assert again.assignment == b"a-" + members[1].member_id.encode()
    # Commits of the generation are accepted, plain and transactional (the same check).
    item = OffsetToCommit(OffsetKey(_T, 0), 5, -1, None)
    assert await group_brokers.two.offsets.commit(G, members[0].member_id, None, 1, [item]) == [
        E.none
    ]
    assert two.check_commit(G, members[1].member_id, None, 1) == E.none
    assert two.check_commit(G, members[1].member_id, None, 0) == E.illegal_generation
    # What kafka-consumer-groups shows: the same members and assignments.
    [described] = await group_brokers.two.admin.describe_groups([G])
    assert described["group_state"] == "Stable"
    assert {m["member_id"]: m["member_assignment"] for m in described["members"]} == {
        m.member_id: b"a-" + m.member_id.encode() for m in members
    }
    assert [m["client_host"] for m in described["members"]] == ["/127.0.0.1"] * 2


async def test_the_first_request_of_any_kind_loads_the_group(group_brokers: GroupBrokers) -> None:
    members = await stable_group(group_brokers.one, group_brokers.clock)
    group_brokers.kill_one()
    # Through the service's own entry points (as the API handlers call them).
    item = OffsetToCommit(OffsetKey(_T, 0), 7, -1, None)
    assert await group_brokers.two.offsets.commit(G, members[0].member_id, None, 1, [item]) == [
        E.none
    ]
    assert group_brokers.two.coordinator.groups[G].is_(S.STABLE)


async def test_without_a_snapshot_members_rejoin(group_brokers: GroupBrokers) -> None:
    # What happens with no store at all (and so what happened before snapshots).
    members = await stable_group(group_brokers.one, group_brokers.clock)
    await group_brokers.two.store.delete_group_snapshots([G])
    group_brokers.kill_one()
    two = group_brokers.two.coordinator
    assert await two.load(G) is None
    assert two.heartbeat(G, members[0].member_id, None, 1) == E.unknown_member_id


async def test_a_member_that_does_not_come_back_expires(group_brokers: GroupBrokers) -> None:
    members = await stable_group(group_brokers.one, group_brokers.clock)
    group_brokers.kill_one()
    two = group_brokers.two.coordinator
    await two.load(G)
    alive, gone = members
    # Each session started at the load: half of it later, both are still members.
    group_brokers.clock.advance(SESSION // 2)
    assert two.heartbeat(G, alive.member_id, None, 1) == E.none
    group_brokers.clock.advance(SESSION // 2 + 1)
    assert two.heartbeat(G, alive.member_id, None, 1) == E.rebalance_in_progress
    assert not two.groups[G].has(gone.member_id)
    rejoined = join(two, alive.member_id, group=G)
    group_brokers.clock.advance(0)
    result = rejoined.result()
    assert (result.error, result.generation_id, result.leader) == (E.none, 2, alive.member_id)


async def test_an_emptied_group_leaves_no_snapshot(group_brokers: GroupBrokers) -> None:
    members = await stable_group(group_brokers.one, group_brokers.clock)
    one = group_brokers.one.coordinator
    one.leave_group(G, [LeavingMember(m.member_id, None) for m in members])
    assert one.groups[G].is_(S.EMPTY)
    await one.snapshots_settled()
    assert await group_brokers.one.store.load_group(G) is None
    group_brokers.kill_one()
    two = group_brokers.two.coordinator
    assert await two.load(G) is None
    assert G not in two.groups
    assert two.heartbeat(G, members[0].member_id, None, 1) == E.unknown_member_id


async def test_members_expired_on_the_new_coordinator_leave_no_snapshot(
    group_brokers: GroupBrokers,
) -> None:
    await stable_group(group_brokers.one, group_brokers.clock)
    group_brokers.kill_one()
    two = group_brokers.two.coordinator
    await two.load(G)
    # Nobody comes back: sessions expire, the rebalance ends with nobody, Empty.
    group_brokers.clock.advance(SESSION + 1)
    group_brokers.clock.advance(30_000)
    assert two.groups[G].is_(S.EMPTY)
    await two.snapshots_settled()
    assert await group_brokers.two.store.groups_with_snapshots() == []


async def test_delete_groups_loads_first_and_deletes_the_snapshot(
    group_brokers: GroupBrokers,
) -> None:
    members = await stable_group(group_brokers.one, group_brokers.clock)
    group_brokers.kill_one()
    admin = group_brokers.two.admin
    # Not in broker 2's memory yet, but not empty: refused, as on the old coordinator.
    assert await admin.delete_groups([G]) == [(G, E.non_empty_group)]
    two = group_brokers.two.coordinator
    two.leave_group(G, [LeavingMember(m.member_id, None) for m in members])
    assert await admin.delete_groups([G]) == [(G, E.none)]
    await two.snapshots_settled()
    assert await group_brokers.two.store.groups_with_snapshots() == []


async def test_expiry_loads_groups_no_request_brought_back(group_brokers: GroupBrokers) -> None:
    await stable_group(group_brokers.one, group_brokers.clock)
    group_brokers.kill_one()
    # No member ever finds broker 2; the expiry loop brings the group back, its members'
    # sessions expire, and nothing of it is left.
    await group_brokers.two.offsets.expire()
    assert group_brokers.two.coordinator.groups[G].is_(S.STABLE)
    group_brokers.clock.advance(SESSION + 1)
    group_brokers.clock.advance(30_000)
    await group_brokers.two.offsets.expire()
    assert G not in group_brokers.two.coordinator.groups
    assert await group_brokers.two.store.groups_with_snapshots() == []


async def test_a_static_member_back_under_a_new_id_is_stored(group_brokers: GroupBrokers) -> None:
    members = await stable_group(group_brokers.one, group_brokers.clock, instance=True)
    one = group_brokers.one.coordinator
    restarted = join(one, "", group=G, instance="instance-1")
    group_brokers.clock.advance(0)
    new_id = restarted.result().member_id
    old_id = members[1].member_id
    assert restarted.result().error == E.none and new_id != old_id
    await one.snapshots_settled()
    group_brokers.kill_one()
    two = group_brokers.two.coordinator
    await two.load(G)
    assert two.heartbeat(G, new_id, "instance-1", 1) == E.none
    assert two.heartbeat(G, old_id, "instance-1", 1) == E.fenced_instance_id


async def test_heartbeats_write_nothing(group_brokers: GroupBrokers) -> None:
    members = await stable_group(group_brokers.one, group_brokers.clock)
    store = group_brokers.stores[0]
    assert store.stored == 1  # the generation's assignment
    for _ in range(20):
        group_brokers.clock.advance(1000)
        for m in members:
            assert group_brokers.one.coordinator.heartbeat(G, m.member_id, None, 1) == E.none
    await group_brokers.one.coordinator.snapshots_settled()
    assert store.stored == 1


async def test_an_assignment_that_cannot_be_stored_is_not_handed_out(
    group_brokers: GroupBrokers,
) -> None:
    c = group_brokers.one.coordinator
    group_brokers.stores[0].fail_writes = True
    joins = [new_member(c, group=G) for _ in range(2)]
    group_brokers.clock.advance(0)
    results = [f.result() for f in joins]
    leader = next(r for r in results if r.member_id == r.leader)
    follower = next(r for r in results if r is not leader)
    waiting = sync(c, follower, group=G)
    answer = await sync(c, leader, {r.member_id: b"x" for r in results}, group=G)
    # Retriable: the members rejoin (the group rebalances) and try again.
    assert answer.error == E.coordinator_not_available
    assert (await waiting).error == E.coordinator_not_available
    assert c.groups[G].is_(S.PREPARING_REBALANCE)


async def test_a_failed_load_is_retriable(group_brokers: GroupBrokers) -> None:
    members = await stable_group(group_brokers.one, group_brokers.clock)
    group_brokers.kill_one()
    group_brokers.stores[1].fail_loads = True
    item = OffsetToCommit(OffsetKey(_T, 0), 7, -1, None)
    answer = await group_brokers.two.offsets.commit(G, members[0].member_id, None, 1, [item])
    assert answer == [E.coordinator_not_available]
    group_brokers.stores[1].fail_loads = False
    answer = await group_brokers.two.offsets.commit(G, members[0].member_id, None, 1, [item])
    assert answer == [E.none]
