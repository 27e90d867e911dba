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

Racks are not taken into account (Kafka prefers a member in the partition's rack).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Protocol
from uuid import UUID

# Partitions per topic id; no empty sets.
Partitions = dict[UUID, frozenset[int]]


@dataclass(frozen=True, slots=True)
class AssignmentSpec:
    """What an assignor decides from: each member's subscribed topics (ids of topics
    that exist), every subscribed topic's partition count, and the current target
    assignment (for stickiness)."""

    subscriptions: Mapping[str, frozenset[UUID]]
    partition_counts: Mapping[UUID, int]
    current: Mapping[str, Partitions] = field(default_factory=dict)


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


class UniformAssignor:
    name = "uniform"

    def assign(self, spec: AssignmentSpec) -> dict[str, Partitions]:
        members = sorted(spec.subscriptions)
        eligible: dict[tuple[UUID, int], list[str]] = {}
        for topic_id, count in sorted(spec.partition_counts.items()):
            subscribers = [m for m in members if topic_id in spec.subscriptions[m]]
            if subscribers:
                for p in range(count):
                    eligible[(topic_id, p)] = subscribers
        owner: dict[tuple[UUID, int], str] = {}
        owned: dict[str, set[tuple[UUID, int]]] = {m: set() for m in members}
        # 1. Stickiness: keep what the current target gives, where still valid.
        for member in members:
            for topic_id, partitions in spec.current.get(member, {}).items():
                for p in partitions:
                    tp = (topic_id, p)
                    if member in eligible.get(tp, ()) and tp not in owner:
                        owner[tp] = member
                        owned[member].add(tp)
        # 2. The rest, the most constrained first, to the least loaded eligible member.
        free = sorted(
            (tp for tp in eligible if tp not in owner),
            key=lambda tp: (len(eligible[tp]), str(tp[0]), tp[1]),
        )
        for tp in free:
            chosen = min(eligible[tp], key=lambda m: (len(owned[m]), m))
            owner[tp] = chosen
            owned[chosen].add(tp)
        # 3. Balance: move partitions from the most to the least loaded member that may
        # own them, while that narrows the gap. Each move lowers the sum of squared
        # loads, so this ends.
        moved = True
        while moved:
            moved = False
            for giver in sorted(members, key=lambda m: (-len(owned[m]), m)):
                for tp in sorted(owned[giver], key=lambda tp: (str(tp[0]), -tp[1])):
                    taker = min(eligible[tp], key=lambda m: (len(owned[m]), m))
                    if len(owned[taker]) + 1 < len(owned[giver]):
                        owned[giver].discard(tp)
                        owned[taker].add(tp)
                        owner[tp] = taker
                        moved = True
                        break
                if moved:
                    break
        return _freeze(owned)


class RangeAssignor:
    name = "range"

    def assign(self, spec: AssignmentSpec) -> dict[str, Partitions]:
        members = sorted(spec.subscriptions)
        owned: dict[str, set[tuple[UUID, int]]] = {m: set() for m in members}
        for topic_id, count in spec.partition_counts.items():
            subscribers = [m for m in members if topic_id in spec.subscriptions[m]]
            if not subscribers:
                continue
            quota, extra = divmod(count, len(subscribers))
            start = 0
            for i, member in enumerate(subscribers):
                size = quota + (1 if i < extra else 0)
                owned[member].update((topic_id, p) for p in range(start, start + size))
                start += size
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
