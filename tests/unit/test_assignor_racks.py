"""Rack-aware server-side assignment (KIP-848 members with ``client.rack``): members get
partitions with a replica in their rack where the balance rules allow; diskless partitions,
served in every rack, constrain nothing; a change of racks is a change of metadata."""

from __future__ import annotations

import random
import uuid
from collections.abc import Sequence

from kio.schema.errors import ErrorCode

from broker.groups.assignor_racks import PartitionRacks, RackMatcher
from broker.groups.assignors import AssignmentSpec, Partitions, RangeAssignor, UniformAssignor
from broker.groups.consumer_group import ConsumerGroup, TopicInfo
from broker.groups.consumer_group_heartbeat import HeartbeatRequest, heartbeat
from broker.groups.consumer_group_persistence import group_from, snapshot_of
from broker.groups.topic_regex import matching

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
X, Y = frozenset({"x"}), frozenset({"y"})


def flat(assignment: Partitions) -> set[tuple[uuid.UUID, int]]:
    return {(t, p) for t, ps in assignment.items() for p in ps}


def parts(assignment: Partitions, topic: uuid.UUID = T1) -> set[int]:
    return set(assignment.get(topic, ()))


def spec(
    members: dict[str, str | None],
    racks: dict[uuid.UUID, list[PartitionRacks]],
    current: dict[str, Partitions] | None = None,
) -> AssignmentSpec:
    topics = frozenset(racks)
    return AssignmentSpec(
        {m: topics for m in members},
        {t: len(r) for t, r in racks.items()},
        current or {},
        members,
        racks,
    )


# --------------------------------------------------------------------------- uniform


def test_uniform_gives_members_the_partitions_in_their_rack() -> None:
    out = UniformAssignor().assign(spec({"a": "x", "b": "y"}, {T1: [Y, Y, X, X]}))
    assert parts(out["a"]) == {2, 3} and parts(out["b"]) == {0, 1}


def test_uniform_moves_partitions_into_their_racks_before_keeping_them() -> None:
    # Balance > racks > stickiness: both members own the other rack's partitions.
    current = {"a": {T1: frozenset({0, 1})}, "b": {T1: frozenset({2, 3})}}
    out = UniformAssignor().assign(spec({"a": "x", "b": "y"}, {T1: [Y, Y, X, X]}, current))
    assert parts(out["a"]) == {2, 3} and parts(out["b"]) == {0, 1}


def test_uniform_keeps_the_balance_when_every_replica_is_in_one_rack() -> None:
    racks: list[PartitionRacks] = [X, X, X, X, frozenset({"x", "y"}), Y]
    out = UniformAssignor().assign(spec({"a": "x", "b": "y", "c": "x"}, {T1: racks}))
    assert sorted(len(flat(out[m])) for m in "abc") == [2, 2, 2]
    # b, the only member in y, gets the two partitions with a replica there.
    assert parts(out["b"]) == {4, 5}


def test_uniform_stays_sticky_on_diskless_partitions() -> None:
    # Served in every rack: racks change nothing, the current assignment stays.
    current = {"a": {T1: frozenset({0, 1})}, "b": {T1: frozenset({2, 3})}}
    out = UniformAssignor().assign(spec({"a": "x", "b": "y"}, {T1: [None] * 4}, current))
    assert out == current
    assert not RackMatcher({"a": "x"}, {T1: [None] * 4}, [(T1, p) for p in range(4)]).enabled


def test_uniform_with_a_classic_and_a_diskless_topic() -> None:
    racks = {T1: [X, Y, X, Y], T2: [None, None]}
    out = UniformAssignor().assign(spec({"a": "x", "b": "y"}, racks))
    assert parts(out["a"]) == {0, 2} and parts(out["b"]) == {1, 3}
    assert sorted(len(flat(out[m])) for m in "ab") == [3, 3]


def test_uniform_ignores_racks_no_member_is_in() -> None:
    current = {"a": {T1: frozenset({0, 1})}, "b": {T1: frozenset({2, 3})}}
    out = UniformAssignor().assign(spec({"a": "z", "b": None}, {T1: [Y, Y, X, X]}, current))
    assert out == current


def test_uniform_with_racks_is_valid_balanced_and_closer_than_without() -> None:
    rng = random.Random(848)
    for _ in range(200):
        n_members = rng.randint(1, 6)
        members = {f"m{i}": rng.choice(["a", "b", "c", None]) for i in range(n_members)}
        racks: dict[uuid.UUID, list[PartitionRacks]] = {
            t: [
                None if rng.random() < 0.1 else frozenset(rng.sample("abc", rng.randint(0, 2)))
                for _ in range(rng.randint(1, 9))
            ]
            for t in (T1, T2)
        }
        # The assignment before, without one of the members (or with all of them).
        before = rng.sample(sorted(members), max(1, n_members - 1))
        current = UniformAssignor().assign(spec(dict.fromkeys(before), racks))
        with_racks = UniformAssignor().assign(spec(members, racks, current))
        without = UniformAssignor().assign(spec(dict.fromkeys(members), racks, current))
        everything = {(t, p) for t, r in racks.items() for p in range(len(r))}
        owned = [flat(with_racks[m]) for m in members]
        assert set().union(*owned) == everything and sum(map(len, owned)) == len(everything)
        sizes = [len(o) for o in owned]
        assert max(sizes) - min(sizes) <= 1
        matcher = RackMatcher(members, racks, everything)
        assert near(matcher, with_racks) >= near(matcher, without)


def near(matcher: RackMatcher, assignment: dict[str, Partitions]) -> int:
    """How many partitions are owned by a member in (one of) their racks."""
    return sum(matcher.local(m, tp) for m, owned in assignment.items() for tp in flat(owned))


# --------------------------------------------------------------------------- range


def test_range_gives_each_member_its_count_from_its_rack() -> None:
    out = RangeAssignor().assign(spec({"a": "x", "b": "y"}, {T1: [Y, Y, X, X]}))
    assert parts(out["a"]) == {2, 3} and parts(out["b"]) == {0, 1}
    # Without racks: contiguous ranges in member id order.
    plain = RangeAssignor().assign(spec({"a": None, "b": None}, {T1: [Y, Y, X, X]}))
    assert parts(plain["a"]) == {0, 1} and parts(plain["b"]) == {2, 3}


def test_range_keeps_counts_and_co_partitions_topics_in_the_same_racks() -> None:
    racks: list[PartitionRacks] = [X, X, X, Y, Y]  # 3 + 2: a has room for 3
    out = RangeAssignor().assign(spec({"a": "y", "b": "x"}, {T1: racks, T2: list(racks)}))
    assert [len(parts(out[m], t)) for m in "ab" for t in (T1, T2)] == [3, 3, 2, 2]
    assert parts(out["b"]) == {0, 1}  # in x, b's count is 2
    assert parts(out["a"]) == {2, 3, 4}
    assert parts(out["a"], T2) == parts(out["a"]) and parts(out["b"], T2) == parts(out["b"])


def test_range_on_diskless_partitions_is_plain_ranges() -> None:
    out = RangeAssignor().assign(spec({"a": "y", "b": "x"}, {T1: [None] * 4}))
    assert parts(out["a"]) == {0, 1} and parts(out["b"]) == {2, 3}


# --------------------------------------------------------------------------- heartbeat


class Topics:
    def __init__(self, racks: dict[str, list[PartitionRacks]]) -> None:
        self.racks = racks
        ids = {"t": T1, "u": T2}
        self.by_name = {n: TopicInfo(n, ids[n], len(r)) for n, r in racks.items()}
        self.by_id = {ids[n]: r for n, r in racks.items()}

    def get(self, name: str) -> TopicInfo | None:
        return self.by_name.get(name)

    def matching(self, pattern: str) -> set[str]:
        return matching(pattern, self.by_name)

    def partition_racks(self, topic_id: uuid.UUID, partitions: int) -> Sequence[PartitionRacks]:
        return self.by_id[topic_id]


def join(group: ConsumerGroup, member: str, rack: str | None, topics: Topics,
         rack_aware: bool = True) -> None:  # fmt: skip
    request = HeartbeatRequest(
        group.group_id, member, 0, rack_id=rack, rebalance_timeout_ms=10_000,
        subscribed_topic_names=("t",), owned={},
    )  # fmt: skip
    assert heartbeat(group, request, topics, "uniform", rack_aware).error == ErrorCode.none


def test_members_with_client_rack_get_targets_in_their_rack() -> None:
    topics = Topics({"t": [Y, Y, X, X]})
    group = ConsumerGroup("g")
    join(group, "a", "x", topics)
    join(group, "b", "y", topics)
    assert parts(group.target["a"]) == {2, 3} and parts(group.target["b"]) == {0, 1}
    # group.consumer.rack.aware.assignment=false: as Kafka 4, racks are not used.
    plain = ConsumerGroup("g")
    join(plain, "a", "x", topics, rack_aware=False)
    join(plain, "b", "y", topics, rack_aware=False)
    assert parts(plain.target["a"]) == {0, 1}


def test_replicas_moving_to_other_racks_bump_the_group_epoch() -> None:
    topics = Topics({"t": [Y, Y, X, X]})
    group = ConsumerGroup("g")
    join(group, "a", "x", topics)
    join(group, "b", "y", topics)
    epoch = group.group_epoch
    topics.racks["t"][:] = [X, X, Y, Y]  # a reassignment moved the replicas
    request = HeartbeatRequest("g", "a", group.members["a"].epoch, owned=None)
    assert heartbeat(group, request, topics, "uniform").error == ErrorCode.none
    assert group.group_epoch == epoch + 1
    assert parts(group.target["a"]) == {0, 1} and parts(group.target["b"]) == {2, 3}
    # The racks' digest is stored with the group: a new coordinator sees no change.
    loaded = group_from(snapshot_of(group, 0))
    assert loaded.topics == group.topics


def test_a_member_changing_rack_bumps_the_group_epoch() -> None:
    topics = Topics({"t": [Y, Y, X, X]})
    group = ConsumerGroup("g")
    join(group, "a", "x", topics)
    join(group, "b", "y", topics)
    epoch = group.group_epoch
    request = HeartbeatRequest("g", "a", group.members["a"].epoch, rack_id="y", owned=None)
    assert heartbeat(group, request, topics, "uniform").error == ErrorCode.none
    assert group.group_epoch == epoch + 1
