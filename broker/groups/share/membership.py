"""Share groups' membership, on the broker that coordinates each group (the same
placement as consumer groups: ``broker.groups.placement``): ShareGroupHeartbeat joins,
heartbeats and leaves, the coordinator assigns partitions (``assignor``) and the member
takes its assignment at once (share groups have no revocation phase: a partition may be
held by several members).

Epochs as Kafka: the group epoch moves when members, subscriptions or the subscribed
topics' partitions change; a member's epoch becomes the target assignment's when it
heartbeats, and a heartbeat with another epoch than the member's is FENCED_MEMBER_EPOCH.

When the target is computed, as Kafka 4.3+ (KIP-1263 and share-partition initialization):

- at most once per assignment interval (``share.assignment.interval.ms``, 1 s): a member
  joining within it gets the current target (nothing for itself) and its partitions from
  the next computation, so members joining together are given their shares at once;
- a partition the group has not seen before is left out of the computation that first
  sees it and *initialized* (recorded in the group's stored membership, as Kafka records
  it after InitializeShareGroupState); the group epoch then moves, so the next computation
  assigns it. A new group's first members therefore get no partitions in their first
  answer but one heartbeat later, as from Kafka: a first joiner handed every partition at
  once acquired every record before the others had joined (librdkafka's 0172 test of two
  share consumers joining together: Kafka splits 400 records 201/199 between them).

The membership is stored after each change (``held``, ``persistence``), so the next
coordinator of the group goes on with it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.groups.share.assignor import Assignment, assign

EMPTY = "Empty"
STABLE = "Stable"
DEAD = "Dead"
ASSIGNOR_NAME = "simple"


@dataclass(slots=True)
class ShareMember:
    member_id: str
    rack_id: str | None
    client_id: str
    client_host: str
    subscribed: tuple[str, ...]
    epoch: int = 0
    assignment: Assignment = field(default_factory=dict)
    sent: Assignment | None = None  # what the last answer told it
    deadline_ms: int = 0


@dataclass(slots=True)
class ShareGroup:
    group_id: str
    epoch: int = 0
    assignment_epoch: int = 0
    members: dict[str, ShareMember] = field(default_factory=dict)
    topics_seen: tuple[tuple[str, UUID, int], ...] = ()
    # Partitions 0..n-1 of each topic are initialized for the group (assignable).
    initialized: dict[UUID, int] = field(default_factory=dict)
    assigned_at_ms: int | None = None  # when the target was last computed (not stored)

    @property
    def state(self) -> str:
        return STABLE if self.members else EMPTY


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: int
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = -1
    assignment: Assignment | None = None  # None: unchanged since the last answer


TopicLookup = Callable[[Sequence[str]], Mapping[str, tuple[UUID, int]]]


class ShareGroups:
    """The share groups this broker coordinates."""

    def __init__(
        self, session_timeout_ms: int, lookup: TopicLookup, assignment_interval_ms: int = 0
    ) -> None:
        self.session_timeout_ms = session_timeout_ms
        self.assignment_interval_ms = assignment_interval_ms
        self._lookup = lookup
        self.groups: dict[str, ShareGroup] = {}

    def heartbeat(
        self,
        group_id: str,
        member_id: str,
        member_epoch: int,
        rack_id: str | None,
        subscribed: Sequence[str] | None,
        client_id: str,
        client_host: str,
        now_ms: int,
        session_timeout_ms: int | None = None,
        assignment_interval_ms: int | None = None,
    ) -> HeartbeatResult:
        if not group_id:
            return HeartbeatResult(int(ErrorCode.invalid_group_id), "GroupId can't be empty.")
        if not member_id:
            return HeartbeatResult(int(ErrorCode.invalid_request), "MemberId can't be empty.")
        group = self.groups.get(group_id)
        if member_epoch == -1:
            if group is not None and group.members.pop(member_id, None) is not None:
                group.epoch += 1
            return HeartbeatResult(0, None, member_id, -1)
        if member_epoch == 0:
            if not subscribed:
                return HeartbeatResult(
                    int(ErrorCode.invalid_request),
                    "SubscribedTopicNames must be set in first request.",
                )
            if group is None:
                group = self.groups[group_id] = ShareGroup(group_id)
            member = ShareMember(member_id, rack_id, client_id, client_host, tuple(subscribed))
            # A member joining again (epoch 0) starts over, as Kafka.
            group.members[member_id] = member
            group.epoch += 1
        else:
            member = group.members.get(member_id) if group is not None else None
            if group is None or member is None:
                return HeartbeatResult(
                    int(ErrorCode.unknown_member_id), f"Member {member_id} is not in the group."
                )
            if member_epoch != member.epoch:
                return HeartbeatResult(
                    int(ErrorCode.fenced_member_epoch),
                    f"Member epoch {member_epoch} is not the current {member.epoch}.",
                )
            if subscribed is not None and tuple(subscribed) != member.subscribed:
                member.subscribed = tuple(subscribed)
                group.epoch += 1
            if rack_id is not None:
                member.rack_id = rack_id
        member.deadline_ms = now_ms + (session_timeout_ms or self.session_timeout_ms)
        self._refresh(group, now_ms, assignment_interval_ms)
        member.epoch = group.assignment_epoch
        changed = member.sent != member.assignment
        if changed:
            member.sent = {t: list(p) for t, p in member.assignment.items()}
        return HeartbeatResult(
            0, None, member_id, member.epoch, member.assignment if changed else None
        )

    def expire(self, now_ms: int) -> list[tuple[str, str]]:
        """Remove members whose session timed out; returns (group, member) of each."""
        gone: list[tuple[str, str]] = []
        for group in self.groups.values():
            for member in list(group.members.values()):
                if member.deadline_ms <= now_ms:
                    del group.members[member.member_id]
                    group.epoch += 1
                    gone.append((group.group_id, member.member_id))
            if any(g == group.group_id for g, _ in gone):
                self._refresh(group, now_ms)
        return gone

    def drop(self, group_id: str) -> None:
        """The group is no longer coordinated here (or was deleted)."""
        self.groups.pop(group_id, None)

    def _refresh(self, group: ShareGroup, now_ms: int, interval_ms: int | None = None) -> None:
        """Compute the target assignment again when the group or its topics changed and
        the assignment interval has passed since the last computation."""
        names = sorted({t for m in group.members.values() for t in m.subscribed})
        found = self._lookup(names)
        seen = tuple((n, found[n][0], found[n][1]) for n in names if n in found)
        if seen != group.topics_seen:
            group.topics_seen = seen
            group.epoch += 1
        if group.assignment_epoch == group.epoch:
            return
        interval = self.assignment_interval_ms if interval_ms is None else interval_ms
        if group.assigned_at_ms is not None and now_ms < group.assigned_at_ms + interval:
            return
        assignable = {
            name: (tid, min(count, group.initialized.get(tid, 0)))
            for name, (tid, count) in found.items()
        }
        target = assign({m.member_id: m.subscribed for m in group.members.values()}, assignable)
        for member_id, assignment in target.items():
            group.members[member_id].assignment = assignment
        group.assignment_epoch = group.epoch
        group.assigned_at_ms = now_ms
        fresh = {
            tid: count for tid, count in found.values() if group.initialized.get(tid, 0) < count
        }
        if fresh:
            # Recorded with the membership this heartbeat stores before it is answered;
            # assigned by the next computation (a new group epoch).
            group.initialized.update(fresh)
            group.epoch += 1
