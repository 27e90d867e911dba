"""Online migration between a classic group and a KIP-848 consumer group, as Kafka's group
coordinator does it (``group.consumer.migration.policy``). Pure: the conversions build
the other kind of group; :mod:`broker.groups.consumer_coordinator` decides when, drops the
old one and starts the timers.

- **Upgrade** (``upgrade`` or ``bidirectional``): a ConsumerGroupHeartbeat joining a
  classic group that has members and uses the ``consumer`` protocol type turns it into a
  consumer group. Each classic member becomes a member that keeps speaking the classic
  protocol, at member epoch = the generation, with the partitions of its last assignment
  as its current and target assignment (Stable); the group and target epochs are the
  generation. The joining member then bumps the group epoch: the classic members are told
  REBALANCE_IN_PROGRESS on their next Heartbeat and rejoin, and their SyncGroup gives them
  the coordinator's assignment (:mod:`broker.groups.consumer_classic_members`).
- **Downgrade** (``downgrade`` or ``bidirectional``): when the last member using the
  consumer protocol leaves (or is fenced) and classic members remain, the group becomes a
  classic group again: generation = the group epoch, each member's assignment its target
  (encoded for its protocol's version), Stable, then a rebalance so the members rejoin
  and a leader assigns as before.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping
from uuid import UUID

from broker.groups.assignors import Partitions
from broker.groups.consumer_group import (
    PROTOCOL_TYPE,
    ClassicProtocol,
    ConsumerGroup,
    ConsumerMember,
)
from broker.groups.consumer_group_heartbeat import TopicLookup
from broker.groups.consumer_protocol import (
    MalformedProtocol,
    assignment_bytes,
    parse_assignment,
    parse_subscription,
)
from broker.groups.group import Group, GroupState, Member
from broker.groups.reconciliation import CurrentAssignment, MemberState


class MigrationPolicy(enum.Enum):
    """``group.consumer.migration.policy``, Kafka's values (its default: bidirectional)."""

    BIDIRECTIONAL = "bidirectional"
    UPGRADE = "upgrade"
    DOWNGRADE = "downgrade"
    DISABLED = "disabled"

    @classmethod
    def parse(cls, value: str) -> MigrationPolicy:
        try:
            return cls(value.strip().lower())
        except ValueError:
            raise ValueError(
                f"group.consumer.migration.policy must be one of "
                f"{', '.join(p.value for p in cls)}, not {value!r}"
            ) from None

    @property
    def upgrades(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.UPGRADE)

    @property
    def downgrades(self) -> bool:
        return self in (MigrationPolicy.BIDIRECTIONAL, MigrationPolicy.DOWNGRADE)


def topic_ids(by_name: Mapping[str, frozenset[int]], lookup: TopicLookup) -> Partitions:
    """Partitions by topic name to partitions by topic id, leaving out topics and
    partitions that do not exist (any more)."""
    out: Partitions = {}
    for name, partitions in by_name.items():
        info = lookup.get(name)
        if info is None:
            continue
        kept = frozenset(p for p in partitions if 0 <= p < info.partitions)
        if kept:
            out[info.topic_id] = kept
    return out


def upgrade(classic: Group, lookup: TopicLookup) -> ConsumerGroup:
    """The consumer group a classic group with members becomes. MalformedProtocol when a
    member's metadata or assignment is not the consumer protocol's, CustomAssignorData when
    an assignment carries a custom assignor's user data (Kafka refuses those upgrades)."""
    group = ConsumerGroup(classic.group_id)
    generation = classic.generation_id
    group.group_epoch = group.assignment_epoch = generation
    for m in classic.members.values():
        # A group rebalancing has no protocol chosen for its newest members yet: all of a
        # member's protocols carry the same subscription, the first will do.
        metadata = m.metadata(classic.protocol_name) if classic.protocol_name else b""
        subscription = parse_subscription(metadata or m.protocols[0][1])
        assigned = topic_ids(parse_assignment(m.assignment, refuse_user_data=True), lookup)
        member = ConsumerMember(
            m.member_id,
            m.group_instance_id,
            subscription.rack_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            tuple(sorted(set(subscription.topics))),
            current=CurrentAssignment(generation, generation, MemberState.STABLE, assigned, {}),
            classic=ClassicProtocol(m.session_timeout_ms, tuple(m.protocols)),
        )
        group.put(member)
        group.target[m.member_id] = assigned
    return group


def can_downgrade(group: ConsumerGroup, leaving: str) -> bool:
    """Once ``leaving`` is gone, members remain and all of them use the classic protocol."""
    rest = [m for m in group.members.values() if m.member_id != leaving]
    return bool(rest) and all(m.uses_classic_protocol for m in rest)


def downgrade(group: ConsumerGroup, leaving: str, now_ms: int) -> Group:
    """The classic group a consumer group becomes when ``leaving``, its last member using
    the consumer protocol, goes (see :func:`can_downgrade`). Stable at generation = the
    group epoch; the caller starts the rebalance."""
    classic = Group(group.group_id, now_ms)
    classic.generation_id = group.group_epoch
    names: dict[UUID, str] = {info.topic_id: name for name, info in group.topics.items()}
    for m in group.members.values():
        if m.member_id == leaving or m.classic is None:
            continue
        member = Member(
            m.member_id,
            m.instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.classic.session_timeout_ms,
            PROTOCOL_TYPE,
            list(m.classic.protocols),
        )
        classic.add(member, None)
    classic.protocol_name = classic.select_protocol()
    classic.subscribed_topics = classic.compute_subscribed_topics()
    for member in classic.members.values():
        try:
            version = parse_subscription(member.metadata(classic.protocol_name)).version
        except MalformedProtocol:
            version = 0
        target = group.target.get(member.member_id, {})
        by_name = {names[t]: ps for t, ps in target.items() if t in names}
        member.assignment = assignment_bytes(version, by_name)
    # Built, not reached by a transition: the members hold these assignments now.
    classic.state = GroupState.STABLE
    return classic
