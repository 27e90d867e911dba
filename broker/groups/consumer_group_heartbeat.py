"""ConsumerGroupHeartbeat on one consumer group, as Kafka's GroupMetadataManager does
it. Pure: it changes the :class:`ConsumerGroup` it is given and says what to answer;
timers and storage are the caller's (:mod:`broker.groups.consumer_coordinator`).

One heartbeat:

1. finds the member (a member epoch of 0 joins; a static member rejoining under a new
   member id takes the place of the one that left with epoch -2), checking its epoch
   (FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID, UNRELEASED_INSTANCE_ID);
2. updates it from the request; a changed subscription, or subscribed topics that
   appeared, went or grew since the last check, bump the group epoch;
3. computes a new target assignment when the group epoch is ahead of it, at most once per
   assignment interval (KIP-1263, Kafka 4.3+: ``consumer.assignment.interval.ms``, 1 s):
   within it the target waits for a later heartbeat, so members joining together are
   assigned by one computation, and a member joining meanwhile is at the current
   assignment epoch with nothing assigned (as Kafka 4.4 answers);
4. moves the member's current assignment one step towards its target
   (:mod:`broker.groups.reconciliation`: revoke before assign); while the target waits,
   partitions of topics the member no longer subscribes to are revoked at once.

The answer carries the member's assignment when the request was a full one (joining,
or every field set after an error) or when the assignment changed, as Kafka's.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.groups.assignor_racks import PartitionRacks
from broker.groups.assignors import ASSIGNORS, AssignmentSpec, Partitions
from broker.groups.consumer_group import (
    LEAVE_EPOCH,
    STATIC_LEAVE_EPOCH,
    ConsumerGroup,
    ConsumerMember,
    TopicInfo,
    member_topics,
)
from broker.groups.reconciliation import epoch_is_fenced, reconcile, revoke_beyond
from broker.groups.topic_regex import InvalidRegex, compile_regex


class TopicLookup(Protocol):
    """The broker's topics, as a heartbeat resolves subscriptions against them."""

    def get(self, name: str) -> TopicInfo | None: ...

    def matching(self, pattern: str) -> set[str]:
        """The topic names a (valid) regex subscription matches."""
        ...

    def partition_racks(self, topic_id: UUID, partitions: int) -> Sequence[PartitionRacks]:
        """The racks of each partition's replicas (None: served in every rack)."""
        ...


@dataclass(frozen=True, slots=True)
class HeartbeatRequest:
    group_id: str
    member_id: str
    member_epoch: int
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1  # -1: unchanged
    subscribed_topic_names: tuple[str, ...] | None = None  # None: unchanged
    subscribed_topic_regex: str | None = None
    server_assignor: str | None = None
    owned: Mapping[UUID, frozenset[int]] | None = None  # None: not sent
    client_id: str = ""
    client_host: str = ""


@dataclass(frozen=True, slots=True)
class HeartbeatResult:
    error: ErrorCode
    message: str | None = None
    member_id: str | None = None
    member_epoch: int = 0
    assignment: Partitions | None = None  # None: not in the answer
    changed: bool = False  # the group's stored state changed

    @classmethod
    def failed(cls, error: ErrorCode, message: str) -> HeartbeatResult:
        return cls(error, message, member_epoch=0)


class HeartbeatError(Exception):
    def __init__(self, error: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.error = error
        self.message = message


def validate(request: HeartbeatRequest, version: int, assignors: Sequence[str]) -> None:
    """Raise HeartbeatError (INVALID_REQUEST, UNSUPPORTED_ASSIGNOR) as Kafka would."""

    def invalid(message: str) -> HeartbeatError:
        return HeartbeatError(ErrorCode.invalid_request, message)

    if not request.group_id:
        raise invalid("GroupId can't be empty.")
    if request.instance_id == "":
        raise invalid("InstanceId can't be empty.")
    if request.rack_id == "":
        raise invalid("RackId can't be empty.")
    if request.subscribed_topic_regex:
        try:
            compile_regex(request.subscribed_topic_regex)
        except InvalidRegex as exc:
            raise HeartbeatError(
                ErrorCode.invalid_regular_expression,
                f"SubscribedTopicRegex `{request.subscribed_topic_regex}` is not a valid "
                f"regular expression: {exc}.",
            ) from None
    epoch = request.member_epoch
    if version >= 1 and not request.member_id:
        raise invalid("MemberId can't be empty.")
    if epoch > 0 or epoch == LEAVE_EPOCH:
        if not request.member_id:
            raise invalid("MemberId can't be empty.")
    elif epoch == 0:
        if request.rebalance_timeout_ms == -1:
            raise invalid("RebalanceTimeoutMs must be provided in first request.")
        if request.owned is None or any(request.owned.values()):
            raise invalid("TopicPartitions must be empty when (re-)joining.")
        if request.subscribed_topic_names is None and request.subscribed_topic_regex is None:
            # An empty list is a subscription to nothing (Kafka 4.4 accepts it too).
            raise invalid(
                "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                "(re-)joining."
            )
    elif epoch == STATIC_LEAVE_EPOCH:
        if not request.member_id:
            raise invalid("MemberId can't be empty.")
        if request.instance_id is None:
            raise invalid("InstanceId can't be null.")
    else:
        raise invalid("MemberEpoch is invalid.")
    if request.server_assignor is not None and request.server_assignor not in assignors:
        raise HeartbeatError(
            ErrorCode.unsupported_assignor,
            f"ServerAssignor {request.server_assignor} is not supported. "
            f"Supported assignors: {', '.join(assignors)}.",
        )


def _fenced(member: ConsumerMember, request: HeartbeatRequest) -> HeartbeatError:
    side = "greater" if request.member_epoch > member.epoch else "smaller"
    return HeartbeatError(
        ErrorCode.fenced_member_epoch,
        f"The consumer group member has a {side} member epoch ({request.member_epoch}) than "
        f"the one known by the group coordinator ({member.epoch}). The member must abandon "
        "all its partitions and rejoin.",
    )


def _check_epoch(member: ConsumerMember, request: HeartbeatRequest) -> None:
    if epoch_is_fenced(member.current, request.member_epoch, request.owned):
        raise _fenced(member, request)


def _unknown(group: ConsumerGroup, member_id: str) -> HeartbeatError:
    return HeartbeatError(
        ErrorCode.unknown_member_id,
        f"Member {member_id} is not a member of group {group.group_id}.",
    )


def _find_member(group: ConsumerGroup, request: HeartbeatRequest) -> tuple[ConsumerMember, bool]:
    """The member and whether it is new to the group."""
    joining = request.member_epoch == 0
    if request.instance_id is None:
        member = group.members.get(request.member_id)
        if member is None:
            if not joining:
                raise _unknown(group, request.member_id)
            return ConsumerMember(request.member_id), True
        _check_epoch(member, request)
        return member, False
    static = group.static_member(request.instance_id)
    if joining:
        if static is None:
            member = group.members.get(request.member_id)
            if member is None:
                return ConsumerMember(request.member_id), True
            _check_epoch(member, request)
            return member, False
        if static.epoch != STATIC_LEAVE_EPOCH:
            raise HeartbeatError(
                ErrorCode.unreleased_instance_id,
                f"Static member {request.member_id} with instance id {request.instance_id} "
                f"cannot join the group because the instance id is owned by "
                f"{static.member_id} member.",
            )
        # The instance comes back (a new member id): it takes the old member's place,
        # its assignment and target included, without a rebalance.
        group.remove_keeping_target(static.member_id, request.member_id)
        back = replace(
            static,
            member_id=request.member_id,
            current=replace(static.current, epoch=0, previous_epoch=0),
        )
        group.put(back)
        return back, False
    if static is None:
        raise HeartbeatError(
            ErrorCode.unknown_member_id, f"Instance id {request.instance_id} is unknown."
        )
    if static.member_id != request.member_id:
        raise HeartbeatError(
            ErrorCode.fenced_instance_id,
            f"Static member {request.member_id} with instance id {request.instance_id} "
            f"was fenced by member {static.member_id}.",
        )
    _check_epoch(static, request)
    return static, False


def uses_racks(group: ConsumerGroup, rack_aware: bool) -> bool:
    """The assignment takes racks into account: enabled, and some member has one."""
    return rack_aware and any(m.rack_id for m in group.members.values())


def racks_digest(racks: Sequence[PartitionRacks]) -> int:
    """A stable digest (the same on every broker, unlike hash()) of a topic's racks."""
    text = "|".join("*" if r is None else ",".join(sorted(r)) for r in racks)
    return int.from_bytes(hashlib.blake2b(text.encode(), digest_size=8).digest(), "big")


def subscribed_topics(
    members: Mapping[str, ConsumerMember],
    lookup: TopicLookup,
    racks: bool = False,
    unresolved: str | None = None,
) -> dict[str, TopicInfo]:
    """The existing topics some member subscribes to, by name or regex (but the
    ``unresolved`` one, see apply_member); with ``racks``, with the digest of their
    partitions' racks."""
    names: set[str] = set()
    for member in members.values():
        names.update(member.subscribed_topic_names)
        regex = member.subscribed_topic_regex
        if regex and regex != unresolved:
            names |= lookup.matching(regex)
    found = {}
    for name in sorted(names):
        info = lookup.get(name)
        if info is not None and info.partitions > 0:
            if racks:
                digest = racks_digest(lookup.partition_racks(info.topic_id, info.partitions))
                info = replace(info, racks=digest)
            found[name] = info
    return found


def compute_target(
    group: ConsumerGroup,
    default_assignor: str,
    lookup: TopicLookup | None = None,
    rack_aware: bool = True,
    unresolved: str | None = None,
) -> None:
    """The target assignment at the group epoch (Kafka's TargetAssignmentBuilder), a member
    whose regex is ``unresolved`` subscribed to its topic names only."""
    assignor = ASSIGNORS[group.preferred_assignor(default_assignor)]
    subscriptions = {
        m.member_id: _topic_ids(
            group,
            m.subscribed_topic_names
            if unresolved and m.subscribed_topic_regex == unresolved
            else member_topics(m, group.topics),
        )
        for m in group.members.values()
    }
    counts = {info.topic_id: info.partitions for info in group.topics.values()}
    member_racks: dict[str, str | None] = {}
    partition_racks: dict[UUID, Sequence[PartitionRacks]] = {}
    if lookup is not None and uses_racks(group, rack_aware):
        member_racks = {m.member_id: m.rack_id for m in group.members.values()}
        partition_racks = {
            info.topic_id: lookup.partition_racks(info.topic_id, info.partitions)
            for info in group.topics.values()
        }
    spec = AssignmentSpec(subscriptions, counts, dict(group.target), member_racks, partition_racks)
    group.target = assignor.assign(spec)
    group.assignment_epoch = group.group_epoch


def _topic_ids(group: ConsumerGroup, names: Iterable[str]) -> frozenset[UUID]:
    """The ids of those of ``names`` the group's assignment knows (existing, subscribed)."""
    return frozenset(group.topics[name].topic_id for name in names if name in group.topics)


def refresh_metadata(
    group: ConsumerGroup,
    lookup: TopicLookup,
    rack_aware: bool = True,
    unresolved: str | None = None,
) -> bool:
    """Bump the group epoch when the subscribed topics changed since the last check
    (created, deleted, more partitions; their racks, when the assignment uses racks; a
    regex resolved). True when it did."""
    topics = subscribed_topics(group.members, lookup, uses_racks(group, rack_aware), unresolved)
    if topics == group.topics:
        return False
    group.topics = topics
    group.group_epoch += 1
    return True


def heartbeat(
    group: ConsumerGroup,
    request: HeartbeatRequest,
    lookup: TopicLookup,
    default_assignor: str,
    rack_aware: bool = True,
    now_ms: int = 0,
    interval_ms: int = 0,
) -> HeartbeatResult:
    """A heartbeat with member epoch >= 0 (leaving is :func:`leave`). ``rack_aware``:
    the assignment prefers members in the partitions' racks (see assignor_racks).
    ``interval_ms``: the assignment interval, counted on ``now_ms``'s clock."""
    try:
        member, is_new = _find_member(group, request)
    except HeartbeatError as exc:
        return HeartbeatResult.failed(exc.error, exc.message)
    updated = replace(
        member,
        instance_id=request.instance_id if request.instance_id is not None else member.instance_id,
        rack_id=request.rack_id if request.rack_id is not None else member.rack_id,
        rebalance_timeout_ms=(
            request.rebalance_timeout_ms
            if request.rebalance_timeout_ms != -1
            else member.rebalance_timeout_ms
        ),
        server_assignor=(
            request.server_assignor
            if request.server_assignor is not None
            else member.server_assignor
        ),
        subscribed_topic_names=(
            tuple(sorted(set(request.subscribed_topic_names)))
            if request.subscribed_topic_names is not None
            else member.subscribed_topic_names
        ),
        subscribed_topic_regex=(
            (request.subscribed_topic_regex or None)
            if request.subscribed_topic_regex is not None
            else member.subscribed_topic_regex
        ),
        client_id=request.client_id,
        client_host=request.client_host,
    )
    updated, changed = apply_member(
        group,
        member,
        updated,
        is_new,
        request.member_epoch == 0,
        request.owned,
        lookup,
        default_assignor,
        rack_aware,
        now_ms,
        interval_ms,
    )
    current = updated.current
    full = request.member_epoch == 0 or (
        request.rebalance_timeout_ms != -1
        and request.subscribed_topic_names is not None
        and request.owned is not None
    )
    return HeartbeatResult(
        ErrorCode.none,
        None,
        updated.member_id,
        updated.epoch,
        current.assigned if full or current.assigned != member.current.assigned else None,
        changed,
    )


def apply_member(
    group: ConsumerGroup,
    member: ConsumerMember,
    updated: ConsumerMember,
    is_new: bool,
    joining: bool,
    owned: Mapping[UUID, frozenset[int]] | None,
    lookup: TopicLookup,
    default_assignor: str,
    rack_aware: bool,
    now_ms: int = 0,
    interval_ms: int = 0,
) -> tuple[ConsumerMember, bool]:
    """Steps 2-4 of a heartbeat (or of a classic member's JoinGroup): store the member
    as ``updated``, bump the group epoch if what the assignment depends on changed,
    compute the target when behind, and move the member one step towards its target
    (``owned``: the partitions it says it holds). The member as it is now, and whether
    the group's stored state changed."""
    # A join (new member, rejoin, a static member's return) is always stored.
    changed = updated != member or joining
    bump = (
        is_new
        or updated.subscribed_topic_names != member.subscribed_topic_names
        or updated.subscribed_topic_regex != member.subscribed_topic_regex
        or updated.server_assignor != member.server_assignor
        # Its rack matters to the assignment (what KAFKA-20909 proposes for Kafka).
        or (rack_aware and updated.rack_id != member.rack_id)
    )
    # Kafka resolves a regex new to the group asynchronously (KIP-848: off the heartbeat's
    # path, then a new group epoch), so the heartbeat that brings it is answered without
    # its topics, the member's topic names assigned at once, and the regex's topics come
    # with a later heartbeat. Here the regex is left out of this heartbeat's computation and
    # counted from the group's next heartbeat on (whichever member sends it), which finds
    # the subscribed topics changed and bumps the epoch, as the resolution would have. A
    # regex another member already subscribes to is resolved.
    regex = updated.subscribed_topic_regex
    unresolved = (
        regex
        if regex
        and regex != member.subscribed_topic_regex
        and not any(
            m.subscribed_topic_regex == regex
            for m in group.members.values()
            if m.member_id != updated.member_id
        )
        else None
    )
    group.put(updated)
    if refresh_metadata(group, lookup, rack_aware, unresolved):
        bump = False  # refresh_metadata bumped already
        changed = True
    if bump:
        group.group_epoch += 1
    if group.group_epoch > group.assignment_epoch and not _within_interval(
        group, now_ms, interval_ms
    ):
        compute_target(group, default_assignor, lookup, rack_aware, unresolved)
        group.assigned_at_ms = now_ms
        changed = True
    target = group.target.get(updated.member_id, {})
    before = base = updated.current

    # Held by any member, this one included, as Kafka's "current partition epoch": a
    # partition it is still revoking is not given back before it is released.
    def is_held(t: UUID, p: int) -> bool:
        return group.holder(t, p) is not None

    if group.group_epoch > group.assignment_epoch:
        # The target waits for the assignment interval: what it gives of topics this
        # member no longer subscribes to is revoked now, not at the next computation.
        subscribed = _topic_ids(group, member_topics(updated, group.topics))
        target = {t: ps for t, ps in target.items() if t in subscribed}
        if before.reconciled_to(group.assignment_epoch) and set(before.assigned) - subscribed:
            base = revoke_beyond(before, target, owned)
    current = (
        base
        if base.reconciled_to(group.assignment_epoch)
        else reconcile(base, group.assignment_epoch, target, is_held, owned)
    )
    if current != before:
        updated = updated.with_current(current)
        group.put(updated)
        changed = True
    return updated, changed


def _within_interval(group: ConsumerGroup, now_ms: int, interval_ms: int) -> bool:
    """Whether the last target computation is less than ``interval_ms`` old (a wall clock
    that went back counts as past it)."""
    last = group.assigned_at_ms
    return interval_ms > 0 and last is not None and last <= now_ms < last + interval_ms


def leave(group: ConsumerGroup, request: HeartbeatRequest) -> HeartbeatResult:
    """Member epoch -1 (leave) or -2 (a static member leaving for a while)."""
    if request.instance_id is None:
        member = group.members.get(request.member_id)
        if member is None:
            exc = _unknown(group, request.member_id)
            return HeartbeatResult.failed(exc.error, exc.message)
        fence(group, member.member_id)
        return HeartbeatResult(ErrorCode.none, None, request.member_id, request.member_epoch,
                               changed=True)  # fmt: skip
    static = group.static_member(request.instance_id)
    if static is None:
        return HeartbeatResult.failed(
            ErrorCode.unknown_member_id, f"Instance id {request.instance_id} is unknown."
        )
    if static.member_id != request.member_id:
        return HeartbeatResult.failed(
            ErrorCode.fenced_instance_id,
            f"Static member {request.member_id} with instance id {request.instance_id} "
            f"was fenced by member {static.member_id}.",
        )
    if request.member_epoch == STATIC_LEAVE_EPOCH:
        # It keeps its place and assignment for its session timeout; pending revocations
        # are dropped, as Kafka does.
        left = static.with_current(
            replace(static.current, epoch=STATIC_LEAVE_EPOCH, pending_revocation={})
        )
        group.put(left)
        return HeartbeatResult(
            ErrorCode.none, None, static.member_id, STATIC_LEAVE_EPOCH, changed=True
        )
    fence(group, static.member_id)
    return HeartbeatResult(ErrorCode.none, None, request.member_id, request.member_epoch,
                           changed=True)  # fmt: skip


def fence(group: ConsumerGroup, member_id: str) -> None:
    """Remove a member (left, session or rebalance timeout): its partitions are free at
    once and the group epoch goes up, so the others get them on their next heartbeat."""
    if group.remove(member_id) is None:
        return
    group.topics = {n: i for n, i in group.topics.items() if group.is_subscribed_to(n)}
    group.group_epoch += 1
    if not group.members:
        # Nothing to assign: the (empty) target is at the new epoch, as Kafka shows it; and
        # the next member is assigned at once, as in a new group (Kafka 4.4, measured: a
        # member leaving and joining again 0.3 s after the last computation).
        group.target = {}
        group.assignment_epoch = group.group_epoch
        group.assigned_at_ms = None
