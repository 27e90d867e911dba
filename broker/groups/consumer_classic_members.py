"""JoinGroup, SyncGroup, Heartbeat and LeaveGroup of classic members in a KIP-848 consumer
group (after an upgrade, or joining one), as Kafka's GroupMetadataManager serves them.
Pure: it changes the :class:`ConsumerGroup` and says what to answer; timers and storage
are :mod:`broker.groups.consumer_coordinator`'s.

The coordinator assigns classic members too: their JoinGroup subscription (topics, owned
partitions, rack) updates the member as a heartbeat would, and the answer names no leader
and no members (the client computes nothing), generation = the member epoch. Their
SyncGroup gets the member's current assignment encoded in the consumer protocol. Their
Heartbeat answers REBALANCE_IN_PROGRESS while they must rejoin: the group epoch is ahead of
the member's, it has partitions to revoke (it revokes them and rejoins, which is how a
classic member acknowledges a revocation), or partitions it waited for are free.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, replace

from kio.schema.errors import ErrorCode

from broker.groups.consumer_group import (
    PROTOCOL_TYPE,
    ClassicProtocol,
    ConsumerGroup,
    ConsumerMember,
)
from broker.groups.consumer_group_heartbeat import TopicLookup, apply_member, fence
from broker.groups.consumer_migration import topic_ids
from broker.groups.consumer_protocol import MalformedProtocol, assignment_bytes, parse_subscription
from broker.groups.group import JoinResult, SyncResult
from broker.groups.reconciliation import MemberState

E = ErrorCode


@dataclass(frozen=True, slots=True)
class ClassicJoin:
    member_id: str
    instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: tuple[tuple[str, bytes], ...]
    require_known_member_id: bool


class ClassicError(Exception):
    def __init__(self, error: ErrorCode) -> None:
        super().__init__(error.name)
        self.error = error


def find_classic_member(
    group: ConsumerGroup, member_id: str, instance_id: str | None
) -> ConsumerMember:
    """The member a SyncGroup, Heartbeat or LeaveGroup names: UNKNOWN_MEMBER_ID (also for a
    member of the consumer protocol), FENCED_INSTANCE_ID as Kafka answers."""
    if instance_id is None:
        member = group.members.get(member_id)
    else:
        member = group.static_member(instance_id)
        if member is not None and member_id and member.member_id != member_id:
            raise ClassicError(E.fenced_instance_id)
    if member is None or not member.uses_classic_protocol:
        raise ClassicError(E.unknown_member_id)
    return member


def join(
    group: ConsumerGroup,
    request: ClassicJoin,
    lookup: TopicLookup,
    default_assignor: str,
    rack_aware: bool,
) -> tuple[JoinResult, bool]:
    """A classic member's JoinGroup: the answer and whether the group's stored state
    changed."""
    names = {name for name, _ in request.protocols}
    if not group.supports_classic_protocols(request.protocol_type, names):
        return JoinResult.failed(E.inconsistent_group_protocol, request.member_id), False
    member_id = request.member_id or str(uuid.uuid4())
    if not request.member_id and request.instance_id is None and request.require_known_member_id:
        # As in a classic group: hand out the id, the member joins again with it.
        return JoinResult.failed(E.member_id_required, member_id), False
    try:
        subscription = parse_subscription(request.protocols[0][1])
    except MalformedProtocol:
        return JoinResult.failed(E.inconsistent_group_protocol, request.member_id), False
    try:
        member, is_new = _join_member(group, request, member_id)
    except ClassicError as exc:
        return JoinResult.failed(exc.error, request.member_id), False
    updated = replace(
        member,
        instance_id=request.instance_id,
        rack_id=subscription.rack_id or member.rack_id,
        rebalance_timeout_ms=request.rebalance_timeout_ms,
        subscribed_topic_names=tuple(sorted(set(subscription.topics))),
        subscribed_topic_regex=None,
        server_assignor=None,
        client_id=request.client_id,
        client_host=request.client_host,
        classic=ClassicProtocol(request.session_timeout_ms, request.protocols),
    )
    # An eager client revoked everything before joining; a cooperative one lists what it
    # still owns: that is its acknowledgement of a revocation.
    owned = topic_ids(subscription.owned, lookup)
    updated, changed = apply_member(
        group, member, updated, is_new, True, owned, lookup, default_assignor, rack_aware
    )
    assert updated.classic is not None
    answer = JoinResult(
        int(E.none),
        updated.member_id,
        updated.epoch,
        PROTOCOL_TYPE,
        updated.classic.protocol_name,
        "",  # no leader: the coordinator assigns
    )
    return answer, changed


def _join_member(
    group: ConsumerGroup, request: ClassicJoin, member_id: str
) -> tuple[ConsumerMember, bool]:
    if request.instance_id is None:
        member = group.members.get(member_id)
        if member is None:
            return ConsumerMember(member_id), True
        if not member.uses_classic_protocol:
            raise ClassicError(E.unknown_member_id)
        return member, False
    static = group.static_member(request.instance_id)
    if static is None:
        return ConsumerMember(member_id, request.instance_id), True
    if not request.member_id:
        # The instance restarted: it takes the old member's place and target.
        group.remove_keeping_target(static.member_id, member_id)
        back = replace(
            static, member_id=member_id, current=replace(static.current, epoch=0, previous_epoch=0)
        )
        group.put(back)
        return back, False
    if static.member_id != member_id:
        raise ClassicError(E.fenced_instance_id)
    return static, False


def must_rejoin(group: ConsumerGroup, member: ConsumerMember) -> bool:
    """A Heartbeat answers REBALANCE_IN_PROGRESS (Kafka's three cases)."""
    state = member.current.state
    return (
        member.epoch < group.group_epoch
        or state is MemberState.UNREVOKED_PARTITIONS
        or (state is MemberState.UNRELEASED_PARTITIONS and not group.waiting_on_unreleased(member))
    )


def heartbeat(
    group: ConsumerGroup, member_id: str, instance_id: str | None, generation_id: int
) -> tuple[ErrorCode, ConsumerMember | None]:
    """The error to answer and the member (None when unknown)."""
    try:
        member = find_classic_member(group, member_id, instance_id)
    except ClassicError as exc:
        return exc.error, None
    if generation_id != member.epoch:
        return E.illegal_generation, member
    return (E.rebalance_in_progress if must_rejoin(group, member) else E.none), member


def sync(
    group: ConsumerGroup,
    member_id: str,
    instance_id: str | None,
    generation_id: int,
    protocol_type: str | None,
    protocol_name: str | None,
) -> tuple[SyncResult, ConsumerMember | None]:
    """The answer (the member's assignment) and the member."""
    try:
        member = find_classic_member(group, member_id, instance_id)
    except ClassicError as exc:
        return SyncResult.failed(exc.error), None
    assert member.classic is not None
    if generation_id != member.epoch:
        return SyncResult.failed(E.illegal_generation), member
    name = member.classic.protocol_name
    if (protocol_type is not None and protocol_type != PROTOCOL_TYPE) or (
        protocol_name is not None and protocol_name != name
    ):
        return SyncResult.failed(E.inconsistent_group_protocol), member
    if group.group_epoch > member.epoch and member.current.state is not (
        MemberState.UNREVOKED_PARTITIONS
    ):
        # A rebalance started since its JoinGroup: it must rejoin first. (Revoking, it
        # takes this assignment, revokes, and its next JoinGroup moves it on.)
        return SyncResult.failed(E.rebalance_in_progress), member
    names = {info.topic_id: topic for topic, info in group.topics.items()}
    assigned = {names[t]: ps for t, ps in member.current.assigned.items() if t in names}
    try:
        version = parse_subscription(member.classic.protocols[0][1]).version
    except MalformedProtocol:
        version = 0
    return SyncResult(int(E.none), PROTOCOL_TYPE, name, assignment_bytes(version, assigned)), member


def leave(
    group: ConsumerGroup, leaving: Sequence[tuple[str, str | None]]
) -> tuple[list[ErrorCode], list[str]]:
    """LeaveGroup of classic members (member id, instance id; an empty member id with an
    instance id: an admin removing a static member). Per member the error, and the ids
    removed."""
    errors = []
    removed = []
    for member_id, instance_id in leaving:
        try:
            member = find_classic_member(group, member_id, instance_id)
        except ClassicError as exc:
            errors.append(exc.error)
            continue
        fence(group, member.member_id)
        removed.append(member.member_id)
        errors.append(E.none)
    return errors, removed
