"""Share-group membership (ShareGroupHeartbeat) and Kafka's simple share assignor."""

from __future__ import annotations

from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.groups.share.assignor import assign
from broker.groups.share.membership import ShareGroups

A = UUID(int=1)
B = UUID(int=2)


def test_every_member_gets_partitions_and_every_partition_a_member() -> None:
    topics = {"a": (A, 3), "b": (B, 1)}
    two = assign({"m1": ["a"], "m2": ["a", "b"]}, topics)
    assert two == {"m1": {A: [0, 2]}, "m2": {A: [1], B: [0]}}
    # More members than partitions: partitions are shared, nobody is left without.
    five = assign({f"m{i}": ["a"] for i in range(5)}, topics)
    assert all(five[m] for m in five)
    assert sorted(p for a in five.values() for p in a[A]) == [0, 0, 1, 1, 2]
    assert assign({"m1": ["missing"]}, topics) == {"m1": {}}


def groups(topics: dict[str, tuple[UUID, int]]) -> ShareGroups:
    return ShareGroups(45_000, lambda names: {n: topics[n] for n in names if n in topics})


def test_join_heartbeat_leave_and_epochs() -> None:
    topics = {"a": (A, 2)}
    g = groups(topics)
    first = g.heartbeat("g", "m1", 0, None, ["a"], "c", "/h", 0)
    assert first.error == 0 and first.member_epoch > 0
    assert first.assignment == {A: [0, 1]}
    # Unchanged: no assignment in the answer, same epoch.
    again = g.heartbeat("g", "m1", first.member_epoch, None, None, "c", "/h", 10)
    assert again.assignment is None and again.member_epoch == first.member_epoch
    second = g.heartbeat("g", "m2", 0, None, ["a"], "c", "/h", 20)
    assert second.assignment == {A: [1]}
    moved = g.heartbeat("g", "m1", first.member_epoch, None, None, "c", "/h", 30)
    assert moved.assignment == {A: [0]} and moved.member_epoch == second.member_epoch
    # A stale epoch is fenced; an unknown member is told so.
    stale = g.heartbeat("g", "m1", first.member_epoch, None, None, "c", "/h", 40)
    assert stale.error == ErrorCode.fenced_member_epoch
    assert g.heartbeat("g", "zz", 5, None, None, "c", "/h", 40).error == ErrorCode.unknown_member_id
    left = g.heartbeat("g", "m2", -1, None, None, "c", "/h", 50)
    assert left.error == 0 and left.member_epoch == -1
    back = g.heartbeat("g", "m1", moved.member_epoch, None, None, "c", "/h", 60)
    assert back.assignment == {A: [0, 1]}


def test_join_needs_a_member_id_and_topics() -> None:
    g = groups({})
    assert g.heartbeat("g", "", 0, None, ["a"], "c", "/h", 0).error == ErrorCode.invalid_request
    assert g.heartbeat("g", "m", 0, None, [], "c", "/h", 0).error == ErrorCode.invalid_request


def test_a_member_silent_past_the_session_timeout_is_removed() -> None:
    g = groups({"a": (A, 2)})
    g.heartbeat("g", "m1", 0, None, ["a"], "c", "/h", 0)
    joined = g.heartbeat("g", "m2", 0, None, ["a"], "c", "/h", 30_000)
    assert g.expire(44_999) == []
    assert g.expire(45_000) == [("g", "m1")]
    after = g.heartbeat("g", "m2", joined.member_epoch, None, None, "c", "/h", 46_000)
    assert after.assignment == {A: [0, 1]}


def test_a_new_partition_moves_the_group_epoch() -> None:
    topics = {"a": (A, 1)}
    g = groups(topics)
    first = g.heartbeat("g", "m1", 0, None, ["a"], "c", "/h", 0)
    topics["a"] = (A, 2)
    grown = g.heartbeat("g", "m1", first.member_epoch, None, None, "c", "/h", 10)
    assert grown.member_epoch > first.member_epoch and grown.assignment == {A: [0, 1]}
