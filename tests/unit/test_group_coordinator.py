"""The classic group state machine, driven directly with a manual clock.

Timers (session, rebalance, initial delay, pending sync) fire only when a test moves
the clock, so every timeout rule is checked exactly and without sleeping.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.groups.consumer_protocol import subscribed_topics
from broker.groups.group import GroupState, JoinResult, SyncResult
from broker.groups.group_coordinator import GroupCoordinator, LeavingMember
from broker.groups.held_groups import GroupConfig
from broker.groups.placement import coordinator_for, group_hash
from tests.fixtures.group_services import Cluster, ManualClock, Node

E = ErrorCode
S = GroupState
SESSION = 10_000
REBALANCE = 30_000
DELAY = 3_000
# Members joining an empty group together: the first delay, then one more because others
# arrived during it.
SETTLE = 2 * DELAY


def make(
    clock: ManualClock, delay: int = DELAY, cluster: Cluster | None = None
) -> GroupCoordinator:
    return GroupCoordinator(
        1,
        cluster or Cluster(1),
        GroupConfig(initial_rebalance_delay_ms=delay, min_session_timeout_ms=1000),
        clock,
        clock.wall_ms,
    )


def join(
    c: GroupCoordinator,
    member_id: str = "",
    group: str = "g",
    protocols: list[tuple[str, bytes]] | None = None,
    instance: str | None = None,
    session: int = SESSION,
    rebalance: int = REBALANCE,
    v4: bool = True,
) -> asyncio.Future[JoinResult]:
    return c.join_group(
        group,
        member_id,
        instance,
        "client",
        "/127.0.0.1",
        rebalance,
        session,
        "consumer",
        protocols or [("range", b"meta-" + member_id.encode())],
        require_known_member_id=v4,
    )


def new_member(c: GroupCoordinator, group: str = "g", **kw: Any) -> asyncio.Future[JoinResult]:
    """A v4+ first join: MEMBER_ID_REQUIRED, then the join with the given id."""
    first = join(c, group=group, **kw)
    assert first.result().error == E.member_id_required
    return join(c, first.result().member_id, group=group, **kw)


def sync(
    c: GroupCoordinator,
    result: JoinResult,
    assignments: dict[str, bytes] | None = None,
    group: str = "g",
    instance: str | None = None,
) -> asyncio.Future[SyncResult]:
    return c.sync_group(
        group, result.generation_id, result.member_id, instance, "consumer", None,
        assignments or {},
    )  # fmt: skip


def stable_group_of(c: GroupCoordinator, clock: ManualClock, n: int, **kw: Any) -> list[JoinResult]:
    """n members joined and synced (the leader assigns b"a-<member>")."""
    joins = [new_member(c, **kw) for _ in range(n)]
    clock.advance(SETTLE)
    results = [f.result() for f in joins]
    assert all(r.error == 0 for r in results)
    leader = next(r for r in results if r.member_id == r.leader)
    followers = [sync(c, r) for r in results if r is not leader]
    sync(c, leader, {r.member_id: b"a-" + r.member_id.encode() for r in results})
    assert all(f.done() and f.result().error == 0 for f in followers)
    assert c.groups["g"].state is S.STABLE
    return results


def state(c: GroupCoordinator, group: str = "g") -> GroupState:
    return c.groups[group].state


# --------------------------------------------------------------------------- joining


async def test_first_join_needs_a_member_id_then_forms_generation_one(clock: ManualClock) -> None:
    c = make(clock)
    first = join(c)
    assert first.result().error == E.member_id_required
    member_id = first.result().member_id
    assert member_id.startswith("client-")
    second = join(c, member_id)
    assert not second.done() and state(c) is S.PREPARING_REBALANCE
    clock.advance(DELAY - 1)
    assert not second.done()  # the initial delay holds even when everyone joined
    clock.advance(1)
    result = second.result()
    assert (result.error, result.generation_id, result.leader) == (0, 1, member_id)
    assert result.protocol_name == "range"
    assert [(m.member_id, m.metadata) for m in result.members] == [
        (member_id, b"meta-" + member_id.encode())
    ]
    assert state(c) is S.COMPLETING_REBALANCE
    answer = sync(c, result, {member_id: b"mine"}).result()
    assert (answer.error, answer.assignment, answer.protocol_name) == (0, b"mine", "range")
    assert state(c) is S.STABLE


async def test_old_clients_join_without_a_member_id_round_trip(clock: ManualClock) -> None:
    c = make(clock, delay=0)
    joined = join(c, v4=False)
    clock.advance(0)
    assert joined.result().error == 0 and joined.result().generation_id == 1


async def test_initial_delay_grows_while_members_keep_arriving(clock: ManualClock) -> None:
    c = make(clock)
    a = new_member(c)
    clock.advance(DELAY - 100)
    b = new_member(c)  # arrives during the delay: wait one more delay
    clock.advance(100)
    assert not a.done()
    clock.advance(DELAY)
    assert a.result().generation_id == b.result().generation_id == 1
    assert len(a.result().members) + len(b.result().members) == 2  # only the leader's lists


async def test_initial_delay_is_bounded_by_the_rebalance_timeout(clock: ManualClock) -> None:
    c = make(clock)
    first = new_member(c, rebalance=4_000)
    clock.advance(DELAY - 1)
    new_member(c, rebalance=4_000)
    clock.advance(DELAY - 1)
    new_member(c, rebalance=4_000)
    clock.advance(1_000)
    assert first.done() and first.result().generation_id == 1


async def test_a_new_member_rebalances_a_stable_group(clock: ManualClock) -> None:
    c = make(clock)
    (a,) = stable_group_of(c, clock, 1)
    b = new_member(c)
    assert state(c) is S.PREPARING_REBALANCE
    assert c.heartbeat("g", a.member_id, None, 1) == E.rebalance_in_progress
    assert not b.done()
    again = join(c, a.member_id)
    # Both joined: no delay after the first generation.
    assert again.result().generation_id == b.result().generation_id == 2
    assert again.result().leader == a.member_id
    assert {m.member_id for m in again.result().members} == {a.member_id, b.result().member_id}


async def test_followers_wait_for_the_leaders_assignment(clock: ManualClock) -> None:
    c = make(clock)
    a, b = new_member(c), new_member(c)
    clock.advance(SETTLE)
    leader = a.result() if a.result().leader == a.result().member_id else b.result()
    follower = b.result() if leader is a.result() else a.result()
    pending = sync(c, follower)
    assert not pending.done()
    assert c.heartbeat("g", follower.member_id, None, 1) == E.none
    sync(c, leader, {follower.member_id: b"f", leader.member_id: b"l"})
    assert pending.result().assignment == b"f"


async def test_members_left_out_by_the_leader_get_an_empty_assignment(clock: ManualClock) -> None:
    c = make(clock)
    a, b = new_member(c), new_member(c)
    clock.advance(SETTLE)
    results = [a.result(), b.result()]
    leader = next(r for r in results if r.member_id == r.leader)
    follower = next(r for r in results if r is not leader)
    waiting = sync(c, follower)
    sync(c, leader, {leader.member_id: b"all", "stranger": b"x"})
    assert waiting.result().error == 0 and waiting.result().assignment == b""


async def test_a_follower_rejoining_unchanged_in_stable_gets_the_same_generation(
    clock: ManualClock,
) -> None:
    c = make(clock)
    results = stable_group_of(c, clock, 2)
    follower = next(r for r in results if r.member_id != r.leader)
    again = join(c, follower.member_id).result()
    assert (again.error, again.generation_id, again.members) == (0, 1, [])
    assert state(c) is S.STABLE
    assert sync(c, again).result().assignment == b"a-" + follower.member_id.encode()


async def test_the_leader_rejoining_forces_a_rebalance(clock: ManualClock) -> None:
    c = make(clock)
    results = stable_group_of(c, clock, 2)
    leader = next(r for r in results if r.member_id == r.leader)
    join(c, leader.member_id)
    assert state(c) is S.PREPARING_REBALANCE


async def test_changed_metadata_forces_a_rebalance(clock: ManualClock) -> None:
    c = make(clock)
    results = stable_group_of(c, clock, 2)
    follower = next(r for r in results if r.member_id != r.leader)
    join(c, follower.member_id, protocols=[("range", b"new topics")])
    assert state(c) is S.PREPARING_REBALANCE


# --------------------------------------------------------------------------- protocols


async def test_the_protocol_all_members_support_and_most_prefer_wins(clock: ManualClock) -> None:
    c = make(clock)
    a = new_member(c, protocols=[("range", b""), ("roundrobin", b"")])
    b = new_member(c, protocols=[("roundrobin", b""), ("cooperative-sticky", b"")])
    d = new_member(c, protocols=[("cooperative-sticky", b""), ("roundrobin", b"")])
    clock.advance(SETTLE)
    assert {f.result().protocol_name for f in (a, b, d)} == {"roundrobin"}


async def test_a_member_without_a_common_protocol_is_refused(clock: ManualClock) -> None:
    c = make(clock)
    stable_group_of(c, clock, 1)
    first = join(c, protocols=[("roundrobin", b"")])
    assert first.result().error == E.inconsistent_group_protocol
    other_type = c.join_group(
        "g", "", None, "c", "/h", REBALANCE, SESSION, "connect", [("range", b"")], True
    )
    assert other_type.result().error == E.inconsistent_group_protocol


@pytest.mark.parametrize(
    ("protocol_type", "protocols"),
    [("", [("range", b"")]), ("consumer", []), ("consumer", [("range", b""), ("range", b"")])],
)
async def test_joins_without_a_usable_protocol_are_refused(
    clock: ManualClock, protocol_type: str, protocols: list[tuple[str, bytes]]
) -> None:
    c = make(clock)
    result = c.join_group("g", "", None, "c", "/h", REBALANCE, SESSION, protocol_type,
                          protocols, True).result()  # fmt: skip
    assert result.error == E.inconsistent_group_protocol
    assert "g" not in c.groups


# --------------------------------------------------------------------------- timeouts


async def test_a_silent_member_is_removed_after_its_session_timeout(clock: ManualClock) -> None:
    c = make(clock)
    a, b = stable_group_of(c, clock, 2)
    clock.advance(SESSION - 1000)
    assert c.heartbeat("g", a.member_id, None, 1) == E.none
    assert c.groups["g"].has(b.member_id)
    clock.advance(1000)
    # b never heartbeat: gone after one session; a learns of the rebalance.
    assert not c.groups["g"].has(b.member_id)
    assert c.heartbeat("g", a.member_id, None, 1) == E.rebalance_in_progress
    assert c.heartbeat("g", b.member_id, None, 1) == E.unknown_member_id
    again = join(c, a.member_id).result()
    assert again.generation_id == 2 and [m.member_id for m in again.members] == [a.member_id]


async def test_members_that_do_not_rejoin_are_dropped_at_the_rebalance_timeout(
    clock: ManualClock,
) -> None:
    c = make(clock)
    a, b = stable_group_of(c, clock, 2)
    newcomer = new_member(c)
    rejoined = join(c, a.member_id)
    # b keeps heartbeating (so no session expiry) but never rejoins.
    for _ in range(REBALANCE // 5000 - 1):
        clock.advance(5000)
        assert c.heartbeat("g", b.member_id, None, 1) == E.rebalance_in_progress
    assert not rejoined.done()
    clock.advance(5000)
    assert rejoined.result().generation_id == 2
    assert newcomer.result().generation_id == 2
    assert not c.groups["g"].has(b.member_id)


async def test_a_member_waiting_on_a_rebalance_is_not_expired_by_its_session(
    clock: ManualClock,
) -> None:
    c = make(clock)
    a, b = stable_group_of(c, clock, 2, session=5000)
    waiting = join(c, a.member_id, session=5000)  # a waits for b
    clock.advance(4000)
    assert c.heartbeat("g", b.member_id, None, 1) == E.rebalance_in_progress
    clock.advance(4000)  # past a's session, while a waits: a stays
    assert c.groups["g"].has(a.member_id)
    join(c, b.member_id, session=5000)
    assert waiting.result().generation_id == 2


async def test_a_member_id_required_but_never_used_stops_holding_the_rebalance(
    clock: ManualClock,
) -> None:
    c = make(clock)
    (a,) = stable_group_of(c, clock, 1)
    assert join(c).result().error == E.member_id_required  # never comes back
    waiting = join(c, a.member_id)  # rebalance: waits for the pending member
    assert not waiting.done()
    clock.advance(SESSION)
    assert waiting.result().error == 0 and waiting.result().generation_id == 2


async def test_members_that_never_sync_are_removed_after_the_rebalance_timeout(
    clock: ManualClock,
) -> None:
    c = make(clock)
    a, b = new_member(c), new_member(c)
    clock.advance(SETTLE)
    results = [a.result(), b.result()]
    leader = next(r for r in results if r.member_id == r.leader)
    follower = next(r for r in results if r is not leader)
    sync(c, leader, {})
    # The follower heartbeats (alive) but never sends SyncGroup.
    for _ in range(REBALANCE // 5000):
        assert c.heartbeat("g", follower.member_id, None, 1) == E.none
        assert c.heartbeat("g", leader.member_id, None, 1) == E.none
        clock.advance(5000)
    assert not c.groups["g"].has(follower.member_id)
    assert state(c) is S.PREPARING_REBALANCE


async def test_invalid_session_timeouts_are_refused(clock: ManualClock) -> None:
    c = make(clock)
    assert join(c, session=999).result().error == E.invalid_session_timeout
    assert join(c, session=1_800_001).result().error == E.invalid_session_timeout


# --------------------------------------------------------------------------- leaving


async def test_leave_group_rebalances_the_rest(clock: ManualClock) -> None:
    c = make(clock)
    a, b = stable_group_of(c, clock, 2)
    error, members = c.leave_group(
        "g", [LeavingMember(b.member_id, None), LeavingMember("stranger", None)]
    )
    assert (error, members) == (E.none, [E.none, E.unknown_member_id])
    assert state(c) is S.PREPARING_REBALANCE
    assert join(c, a.member_id).result().generation_id == 2


async def test_the_last_member_leaving_empties_the_group(clock: ManualClock) -> None:
    c = make(clock)
    (a,) = stable_group_of(c, clock, 1)
    c.leave_group("g", [LeavingMember(a.member_id, None)])
    assert state(c) is S.EMPTY and c.groups["g"].generation_id == 2


async def test_leaving_an_unknown_group(clock: ManualClock) -> None:
    c = make(clock)
    assert c.leave_group("nope", [LeavingMember("m", None)]) == (
        E.none,
        [E.unknown_member_id],
    )
    assert c.leave_group("", [])[0] == E.invalid_group_id


# --------------------------------------------------------------------------- static members


async def test_a_static_member_rejoining_in_stable_causes_no_rebalance(clock: ManualClock) -> None:
    c = make(clock)
    a = join(c, instance="i-a")  # static members get no MEMBER_ID_REQUIRED
    b = join(c, instance="i-b")
    clock.advance(SETTLE)
    first_a, first_b = a.result(), b.result()
    assert first_a.error == 0 and first_a.generation_id == 1
    leader = first_a if first_a.member_id == first_a.leader else first_b
    sync(c, first_a if leader is first_b else first_b, instance=None)
    sync(c, leader, {first_a.member_id: b"A", first_b.member_id: b"B"})

    # i-a restarts: a new JoinGroup without member id, same instance id.
    again = join(c, instance="i-a").result()
    assert again.error == 0 and again.generation_id == 1 and again.member_id != first_a.member_id
    # The answer never makes the restarted member a leader that would reassign.
    assert again.leader == leader.member_id and again.members == []
    assert state(c) is S.STABLE
    assert sync(c, again, instance="i-a").result().assignment == b"A"
    # The old incarnation is fenced; the other member saw nothing happen.
    assert c.heartbeat("g", first_a.member_id, "i-a", 1) == E.fenced_instance_id
    assert c.heartbeat("g", first_b.member_id, "i-b", 1) == E.none
    assert c.heartbeat("g", again.member_id, "i-a", 1) == E.none


async def test_a_static_member_rejoining_with_other_protocols_rebalances(
    clock: ManualClock,
) -> None:
    c = make(clock, delay=0)
    a = join(c, instance="i-a", protocols=[("range", b""), ("roundrobin", b"")])
    clock.advance(0)
    assert a.result().protocol_name == "range"
    sync(c, a.result(), {a.result().member_id: b"A"}, instance="i-a")
    # Restarted preferring another protocol: the group's choice would change.
    again = join(c, instance="i-a", protocols=[("roundrobin", b""), ("range", b"")])
    # A rebalance (its only member has joined, so it completes at once).
    assert (again.result().generation_id, again.result().protocol_name) == (2, "roundrobin")


async def test_a_static_member_that_is_away_keeps_its_place_through_a_rebalance(
    clock: ManualClock,
) -> None:
    c = make(clock)
    a = join(c, instance="i-a", session=60_000)
    b = join(c, instance="i-b", session=60_000)
    clock.advance(SETTLE)
    # A newcomer triggers a rebalance; i-b is away and does not rejoin in time.
    newcomer = new_member(c, session=60_000)
    join(c, a.result().member_id, instance="i-a", session=60_000)
    clock.advance(REBALANCE)
    assert newcomer.result().error == 0
    assert c.groups["g"].has(b.result().member_id)  # static: kept for its session


async def test_a_stale_static_member_waiting_on_join_is_fenced(clock: ManualClock) -> None:
    c = make(clock)
    old = join(c, instance="i-a")
    assert not old.done()
    replacement = join(c, instance="i-a")
    assert old.result().error == E.fenced_instance_id
    clock.advance(DELAY)
    assert replacement.result().error == 0


async def test_admin_removes_a_static_member_by_instance_id(clock: ManualClock) -> None:
    c = make(clock, delay=0)
    a = join(c, instance="i-a")
    clock.advance(0)
    assert c.leave_group("g", [LeavingMember("", "i-a")]) == (E.none, [E.none])
    assert not c.groups["g"].has(a.result().member_id)


# --------------------------------------------------------------------------- sync/heartbeat errors


async def test_sync_and_heartbeat_errors(clock: ManualClock) -> None:
    c = make(clock)
    (a,) = stable_group_of(c, clock, 1)
    bad_gen = c.sync_group("g", 7, a.member_id, None, None, None, {})
    assert bad_gen.result().error == E.illegal_generation
    wrong_name = c.sync_group("g", 1, a.member_id, None, "consumer", "roundrobin", {})
    assert wrong_name.result().error == E.inconsistent_group_protocol
    assert c.sync_group("g", 1, "who", None, None, None, {}).result().error == E.unknown_member_id
    assert c.sync_group("x", 1, "who", None, None, None, {}).result().error == E.unknown_member_id
    assert c.heartbeat("g", a.member_id, None, 0) == E.illegal_generation
    assert c.heartbeat("x", a.member_id, None, 1) == E.unknown_member_id
    assert c.heartbeat("", a.member_id, None, 1) == E.invalid_group_id
    new_member(c)  # rebalancing now
    assert sync(c, a).result().error == E.rebalance_in_progress


async def test_join_with_an_unknown_member_id(clock: ManualClock) -> None:
    c = make(clock)
    assert join(c, "ghost").result().error == E.unknown_member_id
    stable_group_of(c, clock, 1)
    assert join(c, "ghost").result().error == E.unknown_member_id


# --------------------------------------------------------------------------- commits


async def test_who_may_commit(clock: ManualClock) -> None:
    c = make(clock)
    # No group here: a simple consumer (generation -1) may; a member of a lost one may not.
    assert c.check_commit("g", "", None, -1) == E.none
    assert c.check_commit("g", "m", None, 3) == E.illegal_generation
    a, b = new_member(c), new_member(c)
    clock.advance(SETTLE)
    assert c.check_commit("g", a.result().member_id, None, 1) == E.rebalance_in_progress
    assert c.check_commit("g", "", None, -1) == E.unknown_member_id  # group not empty
    results = [a.result(), b.result()]
    leader = next(r for r in results if r.member_id == r.leader)
    sync(c, leader, {})
    assert c.check_commit("g", a.result().member_id, None, 1) == E.none
    assert c.check_commit("g", a.result().member_id, None, 0) == E.illegal_generation
    assert c.check_commit("g", "stranger", None, 1) == E.unknown_member_id


# --------------------------------------------------------------------------- ownership


async def test_groups_of_other_brokers_are_not_coordinated_here(clock: ManualClock) -> None:
    cluster = Cluster(1, 2, 3)
    c = make(clock, cluster=cluster)
    mine = next(g for g in (f"g{i}" for i in range(100)) if c.owns(g))
    other = next(g for g in (f"g{i}" for i in range(100)) if not c.owns(g))
    assert join(c, group=other).result().error == E.not_coordinator
    assert c.heartbeat(other, "m", None, 1) == E.not_coordinator
    assert c.check_commit(other, "", None, -1) == E.not_coordinator
    assert join(c, group=mine).result().error == E.member_id_required


async def test_a_group_that_moves_away_answers_its_waiting_members(clock: ManualClock) -> None:
    cluster = Cluster(1)
    c = make(clock, cluster=cluster)
    groups = [f"g{i}" for i in range(20)]
    waiting = {g: new_member(c, group=g) for g in groups}
    cluster.live = [Node(1), Node(2)]
    moved = [g for g in groups if coordinator_for(g, cluster.live).node_id == 2]
    assert moved
    c.check_ownership()
    for g in moved:
        assert waiting[g].result().error == E.not_coordinator
        assert g not in c.groups
    for g in set(groups) - set(moved):
        assert not waiting[g].done()
    # Coming back later starts from an empty group.
    cluster.live = [Node(1)]
    assert join(c, "old-member", group=moved[0]).result().error == E.unknown_member_id


async def test_shutdown_answers_every_waiting_member(clock: ManualClock) -> None:
    c = make(clock)
    waiting = new_member(c)
    c.resign_all()
    assert waiting.result().error == E.not_coordinator
    assert c.groups == {}


# --------------------------------------------------------------------------- placement, parsing


def test_placement_is_stable_and_spreads_groups() -> None:
    brokers = [Node(3), Node(1), Node(2)]
    assert group_hash("") == 0  # MurmurHash3 x86_32 of nothing with seed 0
    assert group_hash("hello") == 613153351  # a published MurmurHash3 vector
    chosen = [coordinator_for(f"group-{i}", brokers) for i in range(300)]
    assert chosen == [coordinator_for(f"group-{i}", list(reversed(brokers))) for i in range(300)]
    counts = {n: sum(1 for c in chosen if c and c.node_id == n) for n in (1, 2, 3)}
    assert all(60 < count < 140 for count in counts.values()), counts
    assert coordinator_for("g", []) is None


def _subscription(version: int, topics: list[str], tail: bytes = b"") -> bytes:
    out = version.to_bytes(2, "big") + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    return out + tail


@pytest.mark.parametrize("version", [0, 1, 3])
def test_subscribed_topics_are_read_from_consumer_metadata(version: int) -> None:
    data = _subscription(version, ["orders", "payments"], b"\xff\xff\xff\xff" + b"\x00" * 8)
    assert subscribed_topics(data) == {"orders", "payments"}


@pytest.mark.parametrize(
    "junk", [b"", b"\x00", b"\x00\x00\x00\x00\x00\x05\x00\x01a", b"\x00\x00\xff\xff\xff\xff"]
)
def test_unreadable_metadata_is_no_subscription(junk: bytes) -> None:
    assert subscribed_topics(junk) is None


async def test_describe_shows_assignments_only_when_stable(clock: ManualClock) -> None:
    c = make(clock)
    (a,) = stable_group_of(c, clock, 1)
    described = c.groups["g"].describe()
    assert described["group_state"] == "Stable" and described["protocol_data"] == "range"
    (member,) = described["members"]
    assert member["member_assignment"] == b"a-" + a.member_id.encode()
    assert (member["client_id"], member["client_host"]) == ("client", "/127.0.0.1")
    new_member(c)
    rebalancing = c.groups["g"].describe()
    assert rebalancing["group_state"] == "PreparingRebalance"
    assert all(m["member_assignment"] == b"" for m in rebalancing["members"])
