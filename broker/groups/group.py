"""One classic group: its members, state, generation and chosen protocol.

Plain bookkeeping with no timers and no I/O; :mod:`broker.groups.group_coordinator` drives
it. The rules follow Kafka's classic group coordinator (the ``GroupMetadata`` of the
Scala broker, ``ClassicGroup`` of the Java one), so stock clients see what they
expect.
"""

from __future__ import annotations

import asyncio
import enum
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker.groups.consumer_protocol import subscribed_topics

CONSUMER_PROTOCOL_TYPE = "consumer"


class Cancellable(Protocol):
    def cancel(self) -> None: ...


class GroupState(enum.Enum):
    # The values are the state names DescribeGroups and ListGroups show.
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


S = GroupState
# state -> the states it may be entered from
_VALID_PREVIOUS: dict[GroupState, frozenset[GroupState]] = {
    S.PREPARING_REBALANCE: frozenset({S.STABLE, S.COMPLETING_REBALANCE, S.EMPTY}),
    S.COMPLETING_REBALANCE: frozenset({S.PREPARING_REBALANCE}),
    S.STABLE: frozenset({S.COMPLETING_REBALANCE}),
    S.EMPTY: frozenset({S.PREPARING_REBALANCE}),
    S.DEAD: frozenset(GroupState),
}


class IllegalTransition(RuntimeError):
    pass


@dataclass(slots=True)
class JoinedMember:
    member_id: str
    group_instance_id: str | None
    metadata: bytes


@dataclass(slots=True)
class JoinResult:
    """What a JoinGroup is answered with."""

    error: int
    member_id: str = ""
    generation_id: int = -1
    protocol_type: str | None = None
    protocol_name: str | None = None
    leader: str = ""
    members: list[JoinedMember] = field(default_factory=list)
    skip_assignment: bool = False  # KIP-814: a returning static leader keeps the assignment

    @classmethod
    def failed(cls, error: ErrorCode, member_id: str = "") -> JoinResult:
        return cls(int(error), member_id)


@dataclass(slots=True)
class SyncResult:
    """What a SyncGroup is answered with."""

    error: int
    protocol_type: str | None = None
    protocol_name: str | None = None
    assignment: bytes = b""

    @classmethod
    def failed(cls, error: ErrorCode) -> SyncResult:
        return cls(int(error))


@dataclass(eq=False, slots=True)
class Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes = b""
    # Set while the member's JoinGroup / SyncGroup waits for the rebalance to progress.
    join_future: asyncio.Future[JoinResult] | None = None
    sync_future: asyncio.Future[SyncResult] | None = None
    # Joined during the current rebalance and not answered yet: such a member cannot
    # heartbeat, so it gets a longer grace (see coordinator.NEW_MEMBER_JOIN_TIMEOUT_MS).
    is_new: bool = False
    heartbeat_satisfied: bool = False
    heartbeat_timer: Cancellable | None = None

    @property
    def awaiting_join(self) -> bool:
        return self.join_future is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_future is not None

    @property
    def is_static(self) -> bool:
        return self.group_instance_id is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, metadata in self.protocols:
            if name == protocol:
                return metadata
        return b""

    def matches(self, protocols: Sequence[tuple[str, bytes]]) -> bool:
        return list(protocols) == self.protocols

    def vote(self, candidates: set[str]) -> str:
        """The member's most preferred protocol among those every member supports."""
        for name, _ in self.protocols:
            if name in candidates:
                return name
        raise ValueError(f"member {self.member_id} supports none of {sorted(candidates)}")

    def has_satisfied_heartbeat(self) -> bool:
        if self.is_new:
            # New members can expire while their JoinGroup waits: check this first.
            return self.heartbeat_satisfied
        if self.awaiting_join or self.awaiting_sync:
            # A member waiting on the rebalance cannot heartbeat; the rebalance
            # timeout (not the session timeout) bounds how long it may take.
            return True
        return self.heartbeat_satisfied

    def answer_join(self, result: JoinResult) -> None:
        future, self.join_future = self.join_future, None
        if future is not None and not future.done():
            future.set_result(result)

    def answer_sync(self, result: SyncResult) -> None:
        future, self.sync_future = self.sync_future, None
        if future is not None and not future.done():
            future.set_result(result)


class Group:
    def __init__(self, group_id: str, now_ms: int) -> None:
        self.group_id = group_id
        self.state = GroupState.EMPTY
        self.state_since_ms = now_ms
        self.generation_id = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader_id: str | None = None
        self.members: dict[str, Member] = {}  # in join order: the next leader is the first
        # Members told MEMBER_ID_REQUIRED that have not joined with their id yet.
        self.pending_members: dict[str, Cancellable | None] = {}
        self.static_members: dict[str, str] = {}  # group.instance.id -> member id
        # Members of the new generation whose SyncGroup has not arrived yet.
        self.pending_sync: set[str] = set()
        self._supported_protocols: Counter[str] = Counter()
        # A member joined during the initial rebalance delay: wait one more delay.
        self.new_member_added = False
        # Topics the members subscribe to, when the protocol is "consumer" and every
        # member's metadata could be read (OffsetDelete refuses those topics).
        self.subscribed_topics: set[str] | None = None
        self.join_timer: Cancellable | None = None
        # The join timer is the initial rebalance delay: the join completes when it
        # fires, not as soon as every member has joined.
        self.initial_delay = False
        self.sync_timer: Cancellable | None = None
        # The leader's assignment of this generation is being stored; the SyncGroup
        # answers wait for it (a retried leader SyncGroup does not store it again).
        self.storing_assignment = False

    def __repr__(self) -> str:
        return (
            f"Group({self.group_id!r}, {self.state.value}, generation {self.generation_id}, "
            f"{len(self.members)} members)"
        )

    # ---------------------------------------------------------------- state

    def is_(self, *states: GroupState) -> bool:
        return self.state in states

    def transition(self, state: GroupState, now_ms: int) -> None:
        if self.state not in _VALID_PREVIOUS[state]:
            raise IllegalTransition(
                f"group {self.group_id}: {self.state.value} -> {state.value} is not allowed"
            )
        self.state = state
        self.state_since_ms = now_ms

    def can_rebalance(self) -> bool:
        return self.state in _VALID_PREVIOUS[GroupState.PREPARING_REBALANCE]

    # ---------------------------------------------------------------- members

    def has(self, member_id: str) -> bool:
        return member_id in self.members

    def get(self, member_id: str) -> Member:
        return self.members[member_id]

    def is_leader(self, member_id: str) -> bool:
        return self.leader_id == member_id

    def add(self, member: Member, join_future: asyncio.Future[JoinResult] | None) -> None:
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader_id is None:
            self.leader_id = member.member_id
        if member.group_instance_id is not None:
            self.static_members[member.group_instance_id] = member.member_id
        self.pending_members.pop(member.member_id, None)
        self.members[member.member_id] = member
        self._supported_protocols.update(member.protocol_names())
        member.join_future = join_future

    def remove(self, member_id: str) -> Member | None:
        member = self.members.pop(member_id, None)
        if member is None:
            return None
        self._supported_protocols.subtract(member.protocol_names())
        self._supported_protocols += Counter()  # drop zero counts
        instance_id = member.group_instance_id
        if instance_id is not None and self.static_members.get(instance_id) == member_id:
            del self.static_members[instance_id]
        self.pending_sync.discard(member_id)
        if self.leader_id == member_id:
            self.leader_id = next(iter(self.members), None)
        return member

    def update_member(
        self,
        member: Member,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        join_future: asyncio.Future[JoinResult] | None,
    ) -> None:
        self._supported_protocols.subtract(member.protocol_names())
        self._supported_protocols.update(name for name, _ in protocols)
        self._supported_protocols += Counter()
        member.protocols = protocols
        member.rebalance_timeout_ms = rebalance_timeout_ms
        member.session_timeout_ms = session_timeout_ms
        if join_future is not None:
            if member.join_future is not None and member.join_future is not join_future:
                # A retried JoinGroup replaces the earlier one: answer that one now so
                # its connection is not left waiting forever.
                member.answer_join(JoinResult.failed(ErrorCode.rebalance_in_progress))
            member.join_future = join_future

    def replace_static_member(self, instance_id: str, old_id: str, new_id: str) -> Member:
        """A static member restarted: it keeps its place (and assignment) under a new id.
        Whoever still waits under the old id is fenced."""
        member = self.members.pop(old_id)
        member.answer_join(JoinResult.failed(ErrorCode.fenced_instance_id, old_id))
        member.answer_sync(SyncResult.failed(ErrorCode.fenced_instance_id))
        member.member_id = new_id
        self.members[new_id] = member
        if self.leader_id == old_id:
            self.leader_id = new_id
        if old_id in self.pending_sync:
            self.pending_sync.discard(old_id)
            self.pending_sync.add(new_id)
        self.static_members[instance_id] = new_id
        return member

    def static_member_id(self, instance_id: str) -> str | None:
        return self.static_members.get(instance_id)

    def awaiting_join_count(self) -> int:
        return sum(1 for m in self.members.values() if m.awaiting_join)

    def has_all_members_joined(self) -> bool:
        return self.awaiting_join_count() == len(self.members) and not self.pending_members

    def not_yet_rejoined(self) -> list[Member]:
        return [m for m in self.members.values() if not m.awaiting_join]

    def max_rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def maybe_elect_new_joined_leader(self) -> bool:
        """Keep the leader if it rejoined, else pick any member that did. False when
        no member rejoined at all."""
        if self.leader_id is None:
            return False
        leader = self.members.get(self.leader_id)
        if leader is not None and leader.awaiting_join:
            return True
        for member in self.members.values():
            if member.awaiting_join:
                self.leader_id = member.member_id
                return True
        return False

    # ---------------------------------------------------------------- protocols

    def supports_protocols(self, protocol_type: str, names: Sequence[str]) -> bool:
        if self.state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        size = len(self.members)
        return self.protocol_type == protocol_type and any(
            self._supported_protocols[name] == size for name in names
        )

    def select_protocol(self) -> str:
        """Among the protocols every member supports, the one most members prefer."""
        size = len(self.members)
        candidates = {name for name, count in self._supported_protocols.items() if count == size}
        votes = Counter(member.vote(candidates) for member in self.members.values())
        # Counter.most_common keeps first-seen order among equal counts: deterministic.
        return votes.most_common(1)[0][0]

    def init_next_generation(self, now_ms: int) -> None:
        self.generation_id += 1
        self.storing_assignment = False
        if self.members:
            self.protocol_name = self.select_protocol()
            self.subscribed_topics = self.compute_subscribed_topics()
            self.transition(GroupState.COMPLETING_REBALANCE, now_ms)
        else:
            self.protocol_name = None
            self.subscribed_topics = None
            self.transition(GroupState.EMPTY, now_ms)
        self.pending_sync = set(self.members)

    def compute_subscribed_topics(self) -> set[str] | None:
        if self.protocol_type != CONSUMER_PROTOCOL_TYPE or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for member in self.members.values():
            found = subscribed_topics(member.metadata(self.protocol_name))
            if found is None:
                return None
            topics |= found
        return topics

    def current_member_metadata(self) -> list[JoinedMember]:
        assert self.protocol_name is not None
        return [
            JoinedMember(m.member_id, m.group_instance_id, m.metadata(self.protocol_name))
            for m in self.members.values()
        ]

    def is_subscribed_to(self, topic: str) -> bool:
        return self.subscribed_topics is not None and topic in self.subscribed_topics

    # ---------------------------------------------------------------- views

    def describe(self) -> dict[str, Any]:
        """A DescribeGroups entry: metadata and assignments only when Stable, as Kafka
        does (in other states they are about to change)."""
        stable = self.state is GroupState.STABLE
        protocol = self.protocol_name or ""
        return {
            "group_id": self.group_id,
            "group_state": self.state.value,
            "protocol_type": self.protocol_type or "",
            "protocol_data": protocol if stable else "",
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "member_metadata": m.metadata(protocol) if stable else b"",
                    "member_assignment": m.assignment if stable else b"",
                }
                for m in self.members.values()
            ],
        }
