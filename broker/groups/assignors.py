"""Server-side assignors of KIP-848 consumer groups: ``uniform`` and ``range``.

With the consumer group protocol the coordinator computes the target assignment (the
client only names an assignor, ``group.remote.assignor`` / ``ServerAssignor``). Kafka
ships the same two; ``group.consumer.assignors`` lists those a broker offers, the first
being the default. Pure functions of the group's subscriptions and the topics' sizes.

- ``uniform`` (Kafka's default): as balanced as the subscriptions allow (members with the
  same subscription own numbers of partitions differing by at most one) and sticky: a
  partition stays with its previous owner unless balance needs it elsewhere, so a
  member joining or leaving moves only the partitions it must.
- ``range``: per topic, the subscribed members sorted by member id each take a
  contiguous range of partitions, the first ``partitions % members`` one more; topics
  with the same partition count and subscribers are co-partitioned.

Racks (:mod:`broker.groups.assignor_racks`): when members have a ``rack_id`` and the
partitions' replicas are in different racks, both prefer giving a member partitions with
a replica in its rack, within their balance rules. ``uniform`` puts balance first, then
racks, then stickiness (a partition leaves an owner outside its racks for a member inside
them when balance allows), as Kafka 3.7's server-side uniform assignor did (KAFKA-14515,
KAFKA-15484); ``range`` keeps each member's count and gives each partition to the first
member in its racks with room, the rest in order as without racks (the rule of KIP-881's
client-side range assignor). Kafka removed racks from its server-side assignors in 3.8
(KAFKA-16694): ``group.consumer.rack.aware.assignment=false`` assigns as Kafka 4 does.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol
from uuid import UUID

from broker.groups.assignor_racks import RackMatcher, TopicRacks

# Partitions per topic id; no empty sets.
Partitions = dict[UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class AssignmentSpec:
    """What an assignor decides from: each member's subscribed topics (ids of topics
    that exist), every subscribed topic's partition count, the current target
    assignment (for stickiness), and the racks of the members and of the partitions'
    replicas (see :mod:`broker.groups.assignor_racks`)."""

    subscriptions: Mapping[str, frozenset[UUID]]
    partition_counts: Mapping[UUID, int]
    current: Mapping[str, Partitions] = field(default_factory=dict)
    member_racks: Mapping[str, str | None] = field(default_factory=dict)
    partition_racks: TopicRacks = field(default_factory=dict)


class Assignor(Protocol):
    name: str

    def assign(self, spec: AssignmentSpec) -> dict[str, Partitions]:
        """The target assignment of every member of the spec (members without any
        partition map to an empty dict)."""
        ...


def _freeze(owned: Mapping[str, set[tuple[UUID, int]]]) -> dict[str, Partitions]:
    out: dict[str, Partitions] = {}
    for member, pairs in owned.items():
        by_topic: dict[UUID, set[int]] = {}
        for topic_id, partition in pairs:
            by_topic.setdefault(topic_id, set()).add(partition)
        out[member] = {t: frozenset(ps) for t, ps in by_topic.items()}
    return out


Partition = tuple[UUID, int]


class UniformAssignor:
    name = "uniform"

    def assign(self, spec: AssignmentSpec) -> dict[str, Partitions]:
        members = sorted(spec.subscriptions)
        eligible: dict[Partition, list[str]] = {}
        for topic_id, count in sorted(spec.partition_counts.items()):
            subscribers = [m for m in members if topic_id in spec.subscriptions[m]]
            if subscribers:
                for p in range(count):
                    eligible[(topic_id, p)] = subscribers
        racks = RackMatcher(spec.member_racks, spec.partition_racks, eligible)
        owned: dict[str, set[Partition]] = {m: set() for m in members}
        taken: set[Partition] = set()
        # 1. Stickiness: keep what the current target gives, where still valid.
        for member in members:
            for topic_id, partitions in spec.current.get(member, {}).items():
                for p in partitions:
                    tp = (topic_id, p)
                    if member in eligible.get(tp, ()) and tp not in taken:
                        taken.add(tp)
                        owned[member].add(tp)
        # 2. The rest, the most constrained first, to the least loaded eligible member
        # (of those, one in the partition's racks).
        free = sorted(
            (tp for tp in eligible if tp not in taken),
            key=lambda tp: (len(eligible[tp]), str(tp[0]), tp[1]),
        )
        for tp in free:
            chosen = min(eligible[tp], key=lambda m: (len(owned[m]), not racks.local(m, tp), m))
            owned[chosen].add(tp)
        _balance(members, owned, eligible, racks)
        if racks.enabled:
            # 4. Racks before stickiness: partitions move into their racks where the
            # balance allows; the balance is then checked again (it comes first).
            _move_into_racks(members, owned, eligible, racks)
            _balance(members, owned, eligible, racks)
        return _freeze(owned)


def _balance(
    members: list[str],
    owned: dict[str, set[Partition]],
    eligible: Mapping[Partition, list[str]],
    racks: RackMatcher,
) -> None:
    """3. Balance: move partitions from the most to the least loaded member that may own
    them, while that narrows the gap (partitions outside the giver's racks first, to a
    taker in their racks when several are as loaded). Each move lowers the sum of
    squared loads, so this ends."""
    moved = True
    while moved:
        moved = False
        for giver in sorted(members, key=lambda m: (-len(owned[m]), m)):
            for tp in sorted(
                owned[giver], key=lambda tp: (racks.local(giver, tp), str(tp[0]), -tp[1])
            ):
                taker = min(eligible[tp], key=lambda m: (len(owned[m]), not racks.local(m, tp), m))
                if len(owned[taker]) + 1 < len(owned[giver]):
                    owned[giver].discard(tp)
                    owned[taker].add(tp)
                    moved = True
                    break
            if moved:
                break


def _move_into_racks(
    members: list[str],
    owned: dict[str, set[Partition]],
    eligible: Mapping[Partition, list[str]],
    racks: RackMatcher,
) -> None:
    """Give partitions owned outside their racks to a member in them, without making the
    loads less balanced: a move to a less loaded member (the two loads swap at worst), or
    an exchange with a partition the other member holds. Each change raises the number of
    partitions in their owner's racks, so this ends."""
    changed = True
    while changed:
        changed = False
        for member in members:
            for tp in sorted(owned[member], key=lambda tp: (str(tp[0]), tp[1])):
                if not racks.local(member, tp) and _bring_into_rack(
                    tp, member, owned, eligible, racks
                ):
                    changed = True


def _bring_into_rack(
    tp: Partition,
    holder: str,
    owned: dict[str, set[Partition]],
    eligible: Mapping[Partition, list[str]],
    racks: RackMatcher,
) -> bool:
    near = [m for m in eligible[tp] if m != holder and racks.local(m, tp)]
    for other in near:
        if len(owned[other]) < len(owned[holder]):
            owned[holder].discard(tp)
            owned[other].add(tp)
            return True
    best: tuple[int, str, Partition] | None = None
    for other in near:
        for back in sorted(owned[other], key=lambda tp: (str(tp[0]), tp[1])):
            if holder not in eligible[back]:
                continue
            # tp comes into its rack (+1); back may leave its rack, or come into one.
            gain = 1 + racks.local(holder, back) - racks.local(other, back)
            if gain > 0 and (best is None or gain > best[0]):
                best = (gain, other, back)
    if best is None:
        return False
    _, other, back = best
    owned[holder].discard(tp)
    owned[other].add(tp)
    owned[other].discard(back)
    owned[holder].add(back)
    return True


class RangeAssignor:
    name = "range"

    def assign(self, spec: AssignmentSpec) -> dict[str, Partitions]:
        members = sorted(spec.subscriptions)
        owned: dict[str, set[Partition]] = {m: set() for m in members}
        for topic_id, count in spec.partition_counts.items():
            subscribers = [m for m in members if topic_id in spec.subscriptions[m]]
            if not subscribers:
                continue
            quota, extra = divmod(count, len(subscribers))
            room = {m: quota + (1 if i < extra else 0) for i, m in enumerate(subscribers)}
            partitions = [(topic_id, p) for p in range(count)]
            racks = RackMatcher(spec.member_racks, spec.partition_racks, partitions)
            left = []
            for tp in partitions:
                # With racks: the first member in the partition's racks with room.
                chosen = next((m for m in subscribers if room[m] and racks.in_rack(m, tp)), None)
                if chosen is None:
                    left.append(tp)
                else:
                    owned[chosen].add(tp)
                    room[chosen] -= 1
            # The others in order, each member taking its count: contiguous ranges when
            # racks did not place any.
            for tp in left:
                chosen = next(m for m in subscribers if room[m])
                owned[chosen].add(tp)
                room[chosen] -= 1
        return _freeze(owned)


ASSIGNORS: dict[str, Assignor] = {a.name: a for a in (UniformAssignor(), RangeAssignor())}
DEFAULT_ASSIGNORS = ("uniform", "range")


def parse_assignors(value: str | list[str] | tuple[str, ...]) -> tuple[str, ...]:
    """``group.consumer.assignors``: names (or Kafka's class names) of the assignors
    offered, the first the default. Unknown names raise ValueError."""
    items = value.split(",") if isinstance(value, str) else list(value)
    names = []
    for item in (i.strip() for i in items):
        if not item:
            continue
        short = item.rsplit(".", 1)[-1].removesuffix("Assignor").lower()
        if short not in ASSIGNORS:
            raise ValueError(f"unknown consumer group assignor {item!r}")
        names.append(short)
    if not names:
        raise ValueError("group.consumer.assignors names no assignor")
    return tuple(dict.fromkeys(names))
