"""A KIP-848 consumer group (``group.protocol=consumer``) as its coordinator holds it.
Pure data and bookkeeping; the protocol is :mod:`broker.groups.consumer_group_heartbeat`.

Three epochs, as in Kafka:

- the group epoch, bumped whenever what the assignment depends on changes (a member
  joins, leaves or changes its subscription; a subscribed topic appears, disappears or
  gains partitions);
- the target assignment epoch: the group epoch the target assignment was computed at
  (computed on the next heartbeat after a bump);
- each member's epoch: the target epoch it has reconciled to (see
  :mod:`broker.groups.reconciliation`).

``holders`` says which member holds each partition (assigned or pending revocation), so
a partition is given to a member only once its previous holder released it.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.groups.assignors import Partitions
from broker.groups.group import Cancellable
from broker.groups.reconciliation import CurrentAssignment
from broker.groups.topic_regex import matching

GROUP_TYPE = "consumer"
PROTOCOL_TYPE = "consumer"
# A static member that left temporarily (member epoch -2) keeps its place and assignment.
LEAVE_EPOCH = -1
STATIC_LEAVE_EPOCH = -2


class ConsumerGroupState(enum.Enum):
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"
    STABLE = "Stable"
    DEAD = "Dead"


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """A subscribed topic as the group's last metadata check saw it. ``racks``: a digest
    of its partitions' racks when the assignment uses racks (0 otherwise), so a change of
    racks (replicas moved) is a change of metadata, as Kafka's topic hash (KIP-1101)."""

    name: str
    topic_id: UUID
    partitions: int
    racks: int = 0


@dataclass(frozen=True, slots=True)
class ClassicProtocol:
    """What a member that speaks the classic protocol (JoinGroup, SyncGroup, Heartbeat) in
    a consumer group keeps of it: its session timeout and the protocols (client assignor
    names with their subscription metadata) of its last JoinGroup, as Kafka's
    ClassicMemberMetadata."""

    session_timeout_ms: int
    protocols: tuple[tuple[str, bytes], ...]

    @property
    def protocol_name(self) -> str:
        """The protocol its JoinGroup and SyncGroup answers name: its first."""
        return self.protocols[0][0]

    def names(self) -> set[str]:
        return {name for name, _ in self.protocols}


@dataclass(frozen=True, slots=True)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    client_id: str = ""
    client_host: str = ""
    rebalance_timeout_ms: int = 300_000
    subscribed_topic_names: tuple[str, ...] = ()
    subscribed_topic_regex: str | None = None  # RE2, whole names (broker.groups.topic_regex)
    server_assignor: str | None = None
    current: CurrentAssignment = field(default_factory=CurrentAssignment)
    classic: ClassicProtocol | None = None  # set: it uses the classic protocol

    @property
    def epoch(self) -> int:
        return self.current.epoch

    @property
    def uses_classic_protocol(self) -> bool:
        return self.classic is not None

    def with_current(self, current: CurrentAssignment) -> ConsumerMember:
        return replace(self, current=current)


def member_subscribes(member: ConsumerMember, topic: str) -> bool:
    if topic in member.subscribed_topic_names:
        return True
    regex = member.subscribed_topic_regex
    return bool(regex) and bool(matching(regex, (topic,)))


def member_topics(member: ConsumerMember, all_names: Iterable[str]) -> set[str]:
    """The topic names a member subscribes to: its list and what its regex matches."""
    topics = set(member.subscribed_topic_names)
    if member.subscribed_topic_regex:
        topics |= matching(member.subscribed_topic_regex, all_names)
    return topics


@dataclass(slots=True)
class MemberTimers:
    session: Cancellable | None = None
    rebalance: Cancellable | None = None
    rebalance_epoch: int = -1  # the member epoch the rebalance timer was started at
    # A classic member told to rejoin (REBALANCE_IN_PROGRESS) must JoinGroup, then
    # SyncGroup, each within its rebalance timeout.
    join: Cancellable | None = None
    sync: Cancellable | None = None

    def cancel(self) -> None:
        for timer in (self.session, self.rebalance, self.join, self.sync):
            if timer is not None:
                timer.cancel()
        self.session = self.rebalance = self.join = self.sync = None


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.group_epoch = 0
        self.assignment_epoch = 0
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, Partitions] = {}
        # The subscribed topics' metadata the group epoch was last computed with.
        self.topics: dict[str, TopicInfo] = {}
        self.holders: dict[tuple[UUID, int], str] = {}
        self.timers: dict[str, MemberTimers] = {}
        # When the target was last computed (wall ms; None: not since this broker holds
        # the group): the assignment interval counts from it (KIP-1263).
        self.assigned_at_ms: int | None = None

    def __repr__(self) -> str:
        return (
            f"ConsumerGroup({self.group_id!r}, epoch={self.group_epoch}, "
            f"assignment_epoch={self.assignment_epoch}, members={sorted(self.members)})"
        )

    @property
    def state(self) -> ConsumerGroupState:
        if not self.members:
            return ConsumerGroupState.EMPTY
        if self.group_epoch > self.assignment_epoch:
            return ConsumerGroupState.ASSIGNING
        if any(not m.current.reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return ConsumerGroupState.RECONCILING
        return ConsumerGroupState.STABLE

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        for member in self.members.values():
            if member.instance_id == instance_id:
                return member
        return None

    def is_subscribed_to(self, topic: str) -> bool:
        return any(member_subscribes(m, topic) for m in self.members.values())

    def holder(self, topic_id: UUID, partition: int) -> str | None:
        return self.holders.get((topic_id, partition))

    def _held_by(self, member: ConsumerMember) -> Iterator[tuple[UUID, int]]:
        for partitions in (member.current.assigned, member.current.pending_revocation):
            for topic_id, ps in partitions.items():
                for p in ps:
                    yield topic_id, p

    def put(self, member: ConsumerMember) -> None:
        """Add or replace a member (by member id), keeping ``holders`` in step."""
        old = self.members.get(member.member_id)
        if old is not None:
            self._release(old)
        self.members[member.member_id] = member
        for tp in self._held_by(member):
            self.holders[tp] = member.member_id

    def remove(self, member_id: str) -> ConsumerMember | None:
        member = self.members.pop(member_id, None)
        if member is not None:
            self._release(member)
            self.target.pop(member_id, None)
            timers = self.timers.pop(member_id, None)
            if timers is not None:
                timers.cancel()
        return member

    def remove_keeping_target(self, old_id: str, new_id: str) -> None:
        """A static member's instance rejoins as ``new_id``: the old member goes, its
        target assignment becomes the new one's (no new target is computed)."""
        target = self.target.get(old_id, {})
        self.remove(old_id)
        self.target[new_id] = target

    def _release(self, member: ConsumerMember) -> None:
        for tp in self._held_by(member):
            if self.holders.get(tp) == member.member_id:
                del self.holders[tp]

    def timers_of(self, member_id: str) -> MemberTimers:
        return self.timers.setdefault(member_id, MemberTimers())

    def validate_member_epoch(self, member_id: str, member_epoch: int) -> ErrorCode:
        """A member's request that names its epoch (OffsetCommit's generation id, OffsetFetch
        v9+): UNKNOWN_MEMBER_ID or STALE_MEMBER_EPOCH as Kafka answers."""
        member = self.members.get(member_id)
        if member is None:
            return ErrorCode.unknown_member_id
        if member_epoch != member.epoch:
            # A classic member's generation id is its member epoch (Kafka answers it
            # ILLEGAL_GENERATION, the error its protocol knows).
            if member.uses_classic_protocol:
                return ErrorCode.illegal_generation
            return ErrorCode.stale_member_epoch
        return ErrorCode.none

    def check_commit(self, member_id: str, member_epoch: int) -> ErrorCode:
        """OffsetCommit/TxnOffsetCommit: the generation id carries the member epoch
        (Kafka's ConsumerGroup.validateOffsetCommit). Epoch -1 commits (admin, a
        consumer outside group management) are allowed while nobody is in the group."""
        if member_epoch < 0 and not self.members:
            return ErrorCode.none
        return self.validate_member_epoch(member_id, member_epoch)

    def classic_members(self) -> list[ConsumerMember]:
        return [m for m in self.members.values() if m.uses_classic_protocol]

    def supports_classic_protocols(self, protocol_type: str, names: set[str]) -> bool:
        """A classic member may join with ``consumer`` protocols of which one at least
        every classic member supports (any, when none is there yet), as Kafka checks."""
        if protocol_type != PROTOCOL_TYPE or not names:
            return False
        common = set(names)
        for member in self.classic_members():
            assert member.classic is not None
            common &= member.classic.names()
        return bool(common)

    def waiting_on_unreleased(self, member: ConsumerMember) -> bool:
        """Some partition of the member's target is still held by another member."""
        for topic_id, ps in self.target.get(member.member_id, {}).items():
            have = member.current.assigned.get(topic_id, frozenset())
            for p in ps - have:
                holder = self.holders.get((topic_id, p))
                if holder is not None and holder != member.member_id:
                    return True
        return False

    def preferred_assignor(self, default: str) -> str:
        """The server assignor most members ask for (Kafka's choice), else the default."""
        counts: dict[str, int] = {}
        for member in self.members.values():
            if member.server_assignor:
                counts[member.server_assignor] = counts.get(member.server_assignor, 0) + 1
        if not counts:
            return default
        return max(sorted(counts), key=lambda name: counts[name])
