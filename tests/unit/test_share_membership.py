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


def groups(topics: dict[str, tuple[UUID, int]], interval_ms: int = 0) -> ShareGroups:
    return ShareGroups(
        45_000, lambda names: {n: topics[n] for n in names if n in topics}, interval_ms
    )


def test_join_heartbeat_leave_and_epochs() -> None:
    topics = {"a": (A, 2)}
    g = groups(topics)
    # The group's partitions are initialized by its first computation and assigned by the
    # next one (Kafka: InitializeShareGroupState in between): nothing in the first answer.
    first = g.heartbeat("g", "m1", 0, None, ["a"], "c", "/h", 0)
    assert first.error == 0 and first.member_epoch > 0
    assert first.assignment == {}
    given = g.heartbeat("g", "m1", first.member_epoch, None, None, "c", "/h", 5)
    assert given.assignment == {A: [0, 1]} and given.member_epoch > first.member_epoch
    # Unchanged: no assignment in the answer, same epoch.
    again = g.heartbeat("g", "m1", given.member_epoch, None, None, "c", "/h", 10)
    assert again.assignment is None and again.member_epoch == given.member_epoch
    second = g.heartbeat("g", "m2", 0, None, ["a"], "c", "/h", 20)
    assert second.assignment == {A: [1]}
    moved = g.heartbeat("g", "m1", given.member_epoch, None, None, "c", "/h", 30)
    assert moved.assignment == {A: [0]} and moved.member_epoch == second.member_epoch
    # A stale epoch is fenced; an unknown member is told so.
    stale = g.heartbeat("g", "m1", given.member_epoch, None, None, "c", "/h", 40)
    assert stale.error == ErrorCode.fenced_member_epoch
    assert g.heartbeat("g", "zz", 5, None, None, "c", "/h", 40).error == ErrorCode.unknown_member_id
    left = g.heartbeat("g", "m2", -1, None, None, "c", "/h", 50)
    assert left.error == 0 and left.member_epoch == -1
    back = g.heartbeat("g", "m1", moved.member_epoch, None, None, "c", "/h", 60)
    assert back.assignment == {A: [0, 1]}


def test_members_joining_within_the_assignment_interval_get_their_shares_together() -> None:
    """librdkafka 0172's two share consumers joining together: as from Kafka 4.4, neither
    is handed every partition (and so every record) before the other has joined."""
    g = groups({"a": (A, 4)}, interval_ms=1000)
    m1 = g.heartbeat("g", "m1", 0, None, ["a"], "c", "/h", 0)
    m2 = g.heartbeat("g", "m2", 0, None, ["a"], "c", "/h", 10)
    assert m1.assignment == {} and m2.assignment == {}
    # Within the interval the target stands, whatever changed.
    early = g.heartbeat("g", "m1", m1.member_epoch, None, None, "c", "/h", 999)
    assert early.assignment is None and early.member_epoch == m1.member_epoch
    one = g.heartbeat("g", "m1", m1.member_epoch, None, None, "c", "/h", 1000)
    two = g.heartbeat("g", "m2", m2.member_epoch, None, None, "c", "/h", 1010)
    assert one.assignment == {A: [0, 2]} and two.assignment == {A: [1, 3]}
    assert one.member_epoch == two.member_epoch > m1.member_epoch
    # A third member past the interval is given its share in its first answer.
    three = g.heartbeat("g", "m3", 0, None, ["a"], "c", "/h", 5000)
    assert three.assignment and three.member_epoch > one.member_epoch


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


def test_a_new_partition_moves_the_group_epoch_and_is_assigned_once_initialized() -> None:
    topics = {"a": (A, 1)}
    g = groups(topics)
    first = g.heartbeat("g", "m1", 0, None, ["a"], "c", "/h", 0)
    given = g.heartbeat("g", "m1", first.member_epoch, None, None, "c", "/h", 5)
    assert given.assignment == {A: [0]}
    topics["a"] = (A, 2)
    grown = g.heartbeat("g", "m1", given.member_epoch, None, None, "c", "/h", 10)
    assert grown.member_epoch > given.member_epoch and grown.assignment is None
    assigned = g.heartbeat("g", "m1", grown.member_epoch, None, None, "c", "/h", 15)
    assert assigned.member_epoch > grown.member_epoch and assigned.assignment == {A: [0, 1]}
