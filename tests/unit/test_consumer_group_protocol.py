"""The pure core of KIP-848 consumer groups: the assignors, the reconciliation state
machine (revoke before assign, epochs, fencing) and the heartbeat on a group."""

from __future__ import annotations

import uuid

import pytest
from kio.schema.errors import ErrorCode

from broker.groups.assignors import (
    AssignmentSpec,
    RangeAssignor,
    UniformAssignor,
    parse_assignors,
)
from broker.groups.consumer_group import ConsumerGroup, ConsumerGroupState, TopicInfo
from broker.groups.consumer_group_heartbeat import (
    HeartbeatError,
    HeartbeatRequest,
    HeartbeatResult,
    heartbeat,
    leave,
    validate,
)
from broker.groups.reconciliation import (
    CurrentAssignment,
    MemberState,
    epoch_is_fenced,
    reconcile,
)
from broker.groups.topic_regex import matching

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)


def flat(assignment: dict[uuid.UUID, frozenset[int]]) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


# --------------------------------------------------------------------------- assignors


def test_uniform_splits_evenly_and_covers_every_partition_once() -> None:
    spec = AssignmentSpec({"a": frozenset({T1}), "b": frozenset({T1})}, {T1: 6})
    out = UniformAssignor().assign(spec)
    assert [len(flat(out[m])) for m in "ab"] == [3, 3]
    assert flat(out["a"]) | flat(out["b"]) == {(T1, p) for p in range(6)}


def test_uniform_is_sticky_when_a_member_joins_and_leaves() -> None:
    two = UniformAssignor().assign(
        AssignmentSpec({"a": frozenset({T1}), "b": frozenset({T1})}, {T1: 6})
    )
    three = UniformAssignor().assign(
        AssignmentSpec({m: frozenset({T1}) for m in "abc"}, {T1: 6}, two)
    )
    assert [len(flat(three[m])) for m in "abc"] == [2, 2, 2]
    # a and b keep two of their three each: only what c needs moves.
    assert flat(three["a"]) <= flat(two["a"]) and flat(three["b"]) <= flat(two["b"])
    back = UniformAssignor().assign(
        AssignmentSpec({"a": frozenset({T1}), "c": frozenset({T1})}, {T1: 6}, three)
    )
    assert flat(back["a"]) >= flat(three["a"]) and flat(back["c"]) >= flat(three["c"])
    assert len(flat(back["a"])) == len(flat(back["c"])) == 3


def test_uniform_respects_heterogeneous_subscriptions() -> None:
    spec = AssignmentSpec(
        {"a": frozenset({T1}), "b": frozenset({T1, T2}), "c": frozenset({T2})},
        {T1: 4, T2: 2},
    )
    out = UniformAssignor().assign(spec)
    assert all(t == T1 for t, _ in flat(out["a"]))
    assert all(t == T2 for t, _ in flat(out["c"]))
    assert sorted(len(flat(out[m])) for m in "abc") == [2, 2, 2]


def test_range_gives_contiguous_ranges_in_member_id_order() -> None:
    spec = AssignmentSpec({m: frozenset({T1, T2}) for m in "ba"}, {T1: 5, T2: 2})
    out = RangeAssignor().assign(spec)
    assert out["a"] == {T1: frozenset({0, 1, 2}), T2: frozenset({0})}
    assert out["b"] == {T1: frozenset({3, 4}), T2: frozenset({1})}


def test_assignor_names_accept_kafka_class_names() -> None:
    assert parse_assignors("uniform,range") == ("uniform", "range")
    names = "org.apache.kafka.coordinator.group.assignor.RangeAssignor"
    assert parse_assignors(names) == ("range",)
    with pytest.raises(ValueError):
        parse_assignors("sticky")


# --------------------------------------------------------------------------- reconciliation


def test_partitions_are_revoked_before_the_member_moves_on() -> None:
    current = CurrentAssignment(3, 2, MemberState.STABLE, {T1: frozenset({0, 1, 2})})
    target = {T1: frozenset({0})}
    step = reconcile(current, 4, target, lambda t, p: False, {T1: frozenset({0, 1, 2})})
    assert step.state is MemberState.UNREVOKED_PARTITIONS
    assert step.epoch == 3  # stays until it acknowledges
    assert step.assigned == {T1: frozenset({0})}
    assert step.pending_revocation == {T1: frozenset({1, 2})}
    # A heartbeat still owning a revoked partition changes nothing.
    assert reconcile(step, 4, target, lambda t, p: False, {T1: frozenset({0, 2})}) is step
    # Once it no longer owns them, it reaches the target epoch.
    done = reconcile(step, 4, target, lambda t, p: False, {T1: frozenset({0})})
    assert (done.state, done.epoch, done.assigned) == (MemberState.STABLE, 4, target)


def test_a_partition_still_held_elsewhere_is_not_assigned() -> None:
    held = {(T1, 1)}
    current = CurrentAssignment(1, 0, MemberState.STABLE, {T1: frozenset({0})})
    target = {T1: frozenset({0, 1})}
    step = reconcile(current, 2, target, lambda t, p: (t, p) in held, {T1: frozenset({0})})
    assert step.state is MemberState.UNRELEASED_PARTITIONS
    assert step.epoch == 2 and step.assigned == {T1: frozenset({0})}
    held.clear()
    done = reconcile(step, 2, target, lambda t, p: (t, p) in held, {T1: frozenset({0})})
    assert done.state is MemberState.STABLE and done.assigned == target


def test_member_epoch_fencing_as_kafka() -> None:
    current = CurrentAssignment(5, 4, MemberState.STABLE, {T1: frozenset({0, 1})})
    assert not epoch_is_fenced(current, 5, None)
    assert epoch_is_fenced(current, 6, None)  # ahead
    assert epoch_is_fenced(current, 3, {T1: frozenset({0})})  # behind, not the previous
    # The previous epoch with owned partitions within the assignment: a lost answer.
    assert not epoch_is_fenced(current, 4, {T1: frozenset({0})})
    assert epoch_is_fenced(current, 4, {T1: frozenset({2})})
    assert epoch_is_fenced(current, 4, None)


# --------------------------------------------------------------------------- heartbeat


class Topics:
    def __init__(self, *infos: TopicInfo) -> None:
        self.by_name = {i.name: i for i in infos}

    def get(self, name: str) -> TopicInfo | None:
        return self.by_name.get(name)

    def matching(self, pattern: str) -> set[str]:
        return matching(pattern, self.by_name)

    def partition_racks(self, topic_id: uuid.UUID, partitions: int) -> list[frozenset[str] | None]:
        return [None] * partitions  # diskless: every partition in every rack


topics = Topics(TopicInfo("t", T1, 6))


def join(group: ConsumerGroup, member_id: str, instance_id: str | None = None) -> HeartbeatResult:
    request = HeartbeatRequest(
        group.group_id, member_id, 0, instance_id=instance_id, rebalance_timeout_ms=10_000,
        subscribed_topic_names=("t",), owned={},
    )  # fmt: skip
    return heartbeat(group, request, topics, "uniform")


def beat(group: ConsumerGroup, member_id: str, epoch: int, owned: set[int]) -> HeartbeatResult:
    request = HeartbeatRequest(group.group_id, member_id, epoch, owned={T1: frozenset(owned)})
    return heartbeat(group, request, topics, "uniform")


def test_a_second_member_gets_partitions_only_after_the_first_revoked_them() -> None:
    group = ConsumerGroup("g")
    first = join(group, "a")
    assert first.error == ErrorCode.none and first.member_epoch == 1
    assert first.assignment == {T1: frozenset(range(6))}
    second = join(group, "b")
    # b is at the new epoch but gets nothing: a still holds everything.
    assert second.member_epoch == 2 and second.assignment == {}
    assert group.state is ConsumerGroupState.RECONCILING
    a_step = beat(group, "a", 1, set(range(6)))
    assert a_step.member_epoch == 1 and len(a_step.assignment[T1]) == 3
    # b asks again before a acknowledged: still nothing.
    assert beat(group, "b", 2, set()).assignment is None
    kept = set(a_step.assignment[T1])
    assert beat(group, "a", 1, kept).member_epoch == 2
    b_step = beat(group, "b", 2, set())
    assert b_step.assignment == {T1: frozenset(set(range(6)) - kept)}
    assert group.state is ConsumerGroupState.STABLE


def test_leave_frees_the_partitions_and_bumps_the_group_epoch() -> None:
    group = ConsumerGroup("g")
    join(group, "a")
    join(group, "b")
    epoch = group.group_epoch
    gone = leave(group, HeartbeatRequest("g", "b", -1))
    assert gone.error == ErrorCode.none and gone.member_epoch == -1
    assert group.group_epoch == epoch + 1 and "b" not in group.members
    assert leave(group, HeartbeatRequest("g", "b", -1)).error == ErrorCode.unknown_member_id
    # a never had to give anything up: it moves to the new epoch, keeping all six.
    answer = beat(group, "a", 1, set(range(6)))
    assert answer.member_epoch == group.group_epoch and answer.assignment is None
    assert group.members["a"].current.assigned == {T1: frozenset(range(6))}


def test_unknown_member_and_fenced_epoch() -> None:
    group = ConsumerGroup("g")
    join(group, "a")
    assert beat(group, "x", 1, set()).error == ErrorCode.unknown_member_id
    assert beat(group, "a", 7, set(range(6))).error == ErrorCode.fenced_member_epoch


def test_static_member_leaves_and_comes_back_without_a_rebalance() -> None:
    group = ConsumerGroup("g")
    join(group, "a", "i1")
    join(group, "b", "i2")
    beat(group, "a", 1, set(range(6)))
    epoch = group.group_epoch
    assert join(group, "c", "i1").error == ErrorCode.unreleased_instance_id
    left = leave(group, HeartbeatRequest("g", "a", -2, instance_id="i1"))
    assert left.member_epoch == -2 and "a" in group.members
    back = join(group, "a2", "i1")
    assert back.error == ErrorCode.none and group.group_epoch == epoch
    assert back.member_epoch == group.assignment_epoch and "a" not in group.members
    fenced = HeartbeatRequest("g", "a", 2, instance_id="i1", owned={})
    assert heartbeat(group, fenced, topics, "uniform").error == ErrorCode.fenced_instance_id


def test_new_partitions_bump_the_group_epoch() -> None:
    group = ConsumerGroup("g")
    join(group, "a")
    epoch = group.group_epoch
    grown = HeartbeatRequest("g", "a", 1, owned={T1: frozenset(range(6))})
    answer = heartbeat(group, grown, Topics(TopicInfo("t", T1, 8)), "uniform")
    assert group.group_epoch == epoch + 1 and answer.assignment == {T1: frozenset(range(8))}


def test_requests_kafka_refuses() -> None:
    def check(request: HeartbeatRequest, version: int = 1) -> ErrorCode:
        try:
            validate(request, version, ("uniform", "range"))
        except HeartbeatError as exc:
            return exc.error
        return ErrorCode.none

    ok = HeartbeatRequest("g", "m", 0, rebalance_timeout_ms=1, subscribed_topic_names=("t",),
                          owned={})  # fmt: skip
    assert check(ok) == ErrorCode.none
    assert check(HeartbeatRequest("g", "", 0, rebalance_timeout_ms=1,
                                  subscribed_topic_names=("t",), owned={})) == 42  # fmt: skip
    assert check(HeartbeatRequest("g", "m", 0, owned={})) == ErrorCode.invalid_request
    assert check(HeartbeatRequest("g", "m", -3)) == ErrorCode.invalid_request
    assert check(HeartbeatRequest("g", "m", -2)) == ErrorCode.invalid_request
    odd = HeartbeatRequest("g", "m", 3, server_assignor="sticky")
    assert check(odd) == ErrorCode.unsupported_assignor


def test_regex_subscriptions_follow_matching_topics() -> None:
    group = ConsumerGroup("g")
    first = HeartbeatRequest(
        "g", "a", 0, rebalance_timeout_ms=1000, subscribed_topic_regex="orders-.*", owned={}
    )
    known = Topics(TopicInfo("orders-eu", T1, 2), TopicInfo("payments", T2, 2))
    answer = heartbeat(group, first, known, "uniform")
    # Kafka resolves a regex new to the group asynchronously: the heartbeat that brings it
    # gets nothing from it, the next one gets its topics with a new group epoch.
    assert answer.assignment == {} and answer.member_epoch == 1
    answer = heartbeat(group, HeartbeatRequest("g", "a", 1, owned={}), known, "uniform")
    assert answer.assignment == {T1: frozenset({0, 1})} and answer.member_epoch == 2
    epoch = group.group_epoch
    # A new topic the regex matches (whole names only) joins the assignment.
    t3 = uuid.UUID(int=3)
    grown = Topics(*known.by_name.values(), TopicInfo("orders-us", t3, 1),
                   TopicInfo("xorders-us", uuid.UUID(int=4), 1))  # fmt: skip
    answer = heartbeat(group, HeartbeatRequest("g", "a", 2, owned={T1: frozenset({0, 1})}),
                       grown, "uniform")  # fmt: skip
    assert group.group_epoch == epoch + 1
    assert answer.assignment == {T1: frozenset({0, 1}), t3: frozenset({0})}
    assert group.is_subscribed_to("orders-us") and not group.is_subscribed_to("payments")


def test_a_new_regex_beside_topic_names_assigns_the_names_first_as_kafka() -> None:
    """What librdkafka's 0045 resubscribe_with_regex asserts of a KIP-848 broker: a
    subscription to a regex and a topic name gets the name's partitions in the heartbeat
    that brings it and the regex's in a later one; a second member subscribing to a regex
    the group already resolved gets its topics at once."""
    group = ConsumerGroup("g")
    known = Topics(TopicInfo("orders-eu", T1, 2), TopicInfo("payments", T2, 2))
    both = HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1000, owned={},
                            subscribed_topic_names=("payments",),
                            subscribed_topic_regex="orders-.*")  # fmt: skip
    answer = heartbeat(group, both, known, "uniform")
    assert answer.assignment == {T2: frozenset({0, 1})}
    answer = heartbeat(group, HeartbeatRequest("g", "a", 1, owned={T2: frozenset({0, 1})}),
                       known, "uniform")  # fmt: skip
    assert answer.assignment == {T1: frozenset({0, 1}), T2: frozenset({0, 1})}
    epoch = group.group_epoch
    second = HeartbeatRequest("g", "b", 0, rebalance_timeout_ms=1000, owned={},
                              subscribed_topic_regex="orders-.*")  # fmt: skip
    heartbeat(group, second, known, "uniform")
    assert group.group_epoch == epoch + 1  # the join's bump only: no resolution pending
    assert set(group.target["b"]) == {T1}


def test_an_invalid_regex_is_refused() -> None:
    bad = HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1, subscribed_topic_regex="(",
                           owned={})  # fmt: skip
    with pytest.raises(HeartbeatError) as refused:
        validate(bad, 1, ("uniform",))
    assert refused.value.error == ErrorCode.invalid_regular_expression
    # Backtracking regexes are no threat to RE2: linear in the name.
    evil = HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1, subscribed_topic_regex="(a+)+b",
                            owned={})  # fmt: skip
    validate(evil, 1, ("uniform",))
    group = ConsumerGroup("g")
    answer = heartbeat(group, evil, Topics(TopicInfo("a" * 5000, T1, 1)), "uniform")
    assert answer.error == ErrorCode.none and answer.assignment == {}


def test_a_subscribed_topic_created_later_is_assigned_and_a_deleted_one_revoked() -> None:
    group = ConsumerGroup("g")
    first = HeartbeatRequest("g", "a", 0, rebalance_timeout_ms=1000,
                             subscribed_topic_names=("t", "later"), owned={})  # fmt: skip
    answer = heartbeat(group, first, topics, "uniform")
    assert answer.assignment == {T1: frozenset(range(6))}
    epoch = group.group_epoch
    both = Topics(TopicInfo("t", T1, 6), TopicInfo("later", T2, 1))
    answer = heartbeat(group, HeartbeatRequest("g", "a", 1, owned={T1: frozenset(range(6))}),
                       both, "uniform")  # fmt: skip
    assert group.group_epoch == epoch + 1
    assert answer.assignment == {T1: frozenset(range(6)), T2: frozenset({0})}
    # "t" deleted: its partitions are revoked (the member acknowledges, then moves on).
    only_later = Topics(TopicInfo("later", T2, 1))
    owned = {T1: frozenset(range(6)), T2: frozenset({0})}
    answer = heartbeat(group, HeartbeatRequest("g", "a", answer.member_epoch, owned=owned),
                       only_later, "uniform")  # fmt: skip
    assert answer.assignment == {T2: frozenset({0})}
    assert group.members["a"].current.state is MemberState.UNREVOKED_PARTITIONS
    ack = HeartbeatRequest("g", "a", answer.member_epoch, owned={T2: frozenset({0})})
    done = heartbeat(group, ack, only_later, "uniform")
    assert done.member_epoch == group.group_epoch
    assert group.state is ConsumerGroupState.STABLE


# --------------------------------------------------------------------------- KIP-1263


def timed(
    group: ConsumerGroup, member_id: str, epoch: int, owned: set[int] | None, now_ms: int,
    names: tuple[str, ...] | None = None, lookup: Topics = topics,
) -> HeartbeatResult:  # fmt: skip
    """A heartbeat at ``now_ms`` with a 1 s assignment interval (Kafka 4.3+'s default)."""
    request = HeartbeatRequest(
        group.group_id, member_id, epoch, rebalance_timeout_ms=10_000 if epoch == 0 else -1,
        subscribed_topic_names=names if names is not None else (("t",) if epoch == 0 else None),
        owned=None if owned is None else {T1: frozenset(owned)} if owned else {},
    )  # fmt: skip
    return heartbeat(group, request, lookup, "uniform", now_ms=now_ms, interval_ms=1000)


def test_members_joining_within_the_assignment_interval_wait_for_one_computation() -> None:
    """As Kafka 4.4 answered two members joining 10 ms apart (measured): the first gets
    every partition, the second the current assignment epoch and nothing; one computation
    1 s after the first splits them (the first revokes, then the second is assigned)."""
    group = ConsumerGroup("g")
    a = timed(group, "a", 0, set(), 0)
    assert (a.member_epoch, a.assignment) == (1, {T1: frozenset(range(6))})
    b = timed(group, "b", 0, set(), 10)
    assert (b.member_epoch, b.assignment) == (1, {})  # the assignment epoch, not the group's
    assert group.state is ConsumerGroupState.ASSIGNING and group.group_epoch == 2
    assert timed(group, "a", 1, set(range(6)), 500).assignment is None  # not yet
    revoke = timed(group, "a", 1, set(range(6)), 1000)
    assert revoke.member_epoch == 1 and len(revoke.assignment[T1]) == 3
    kept = set(revoke.assignment[T1])
    assert timed(group, "a", 1, kept, 1010).member_epoch == 2
    b = timed(group, "b", 1, set(), 1020)
    assert (b.member_epoch, b.assignment) == (2, {T1: frozenset(set(range(6)) - kept)})
    # A member joining long after the last computation is assigned at once.
    c = timed(group, "c", 0, set(), 5000)
    assert c.member_epoch == 3 and group.state is not ConsumerGroupState.ASSIGNING


def test_a_member_that_unsubscribes_revokes_at_once_while_the_target_waits() -> None:
    """Kafka revokes the partitions of a topic the member no longer subscribes to without
    waiting for the next target computation."""
    both = Topics(TopicInfo("t", T1, 2), TopicInfo("u", T2, 2))
    group = ConsumerGroup("g")
    a = timed(group, "a", 0, None, 0, names=("t", "u"), lookup=both)
    owned = {T1: frozenset({0, 1}), T2: frozenset({0, 1})}
    assert a.assignment == owned
    b = timed(group, "b", 0, set(), 100, names=("t",), lookup=both)  # the target waits
    request = HeartbeatRequest("g", "a", 1, subscribed_topic_names=("t",), owned=owned)
    step = heartbeat(group, request, both, "uniform", now_ms=200, interval_ms=1000)
    assert group.state is ConsumerGroupState.ASSIGNING
    assert (step.member_epoch, step.assignment) == (1, {T1: frozenset({0, 1})})
    assert group.members["a"].current.state is MemberState.UNREVOKED_PARTITIONS
    # Acknowledged: u's partitions are free, still at the same epoch.
    request = HeartbeatRequest("g", "a", 1, owned={T1: frozenset({0, 1})})
    done = heartbeat(group, request, both, "uniform", now_ms=300, interval_ms=1000)
    assert done.member_epoch == 1 and group.members["a"].current.state is MemberState.STABLE
    assert group.holder(T2, 0) is None and b.member_epoch == 1


def test_a_member_joining_an_emptied_group_is_assigned_at_once() -> None:
    """Kafka 4.4 (measured): leave 0.3 s after the first computation and join again: the
    partitions come with the join, as in a new group, not one interval later."""
    group = ConsumerGroup("g")
    assert timed(group, "a", 0, set(), 0).assignment == {T1: frozenset(range(6))}
    leave(group, HeartbeatRequest("g", "a", -1))
    again = timed(group, "a", 0, set(), 300)
    assert again.assignment == {T1: frozenset(range(6))}
    assert group.state is ConsumerGroupState.STABLE
