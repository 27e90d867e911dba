"""Incremental reconciliation of a KIP-848 member towards its target assignment, as
Kafka's CurrentAssignmentBuilder does it. Pure: no clock, no I/O.

A member's current assignment moves towards its target one heartbeat at a time:

- partitions it holds that the target does not are revoked first: the member keeps its
  epoch and waits (UNREVOKED_PARTITIONS) until a heartbeat's owned partitions no longer
  list them;
- a partition of the target is given only once no member holds it any more (neither
  assigned nor pending revocation); until then the member is at the target epoch but
  UNRELEASED_PARTITIONS, and gets it on a later heartbeat;
- otherwise the member is STABLE at the target assignment epoch.

So no partition is ever owned by two members at once, whatever the order of heartbeats.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from uuid import UUID

from broker.groups.assignors import Partitions


class MemberState(enum.Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(frozen=True, slots=True)
class CurrentAssignment:
    """A member's epoch and what it holds: assigned partitions (it may consume them)
    and partitions it was asked to revoke and has not yet acknowledged."""

    epoch: int = 0
    previous_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)

    def reconciled_to(self, target_epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.epoch == target_epoch

    def with_epoch(self, epoch: int) -> CurrentAssignment:
        return CurrentAssignment(
            epoch, self.epoch, self.state, self.assigned, self.pending_revocation
        )


# (topic id, partition) -> whether some member holds it (assigned or pending revocation)
IsHeld = Callable[[UUID, int], bool]


def owns_any(owned: Mapping[UUID, frozenset[int]] | None, partitions: Partitions) -> bool:
    """Whether the member (by the owned partitions of its heartbeat) still holds any of
    ``partitions``. Not told (None): assume it does."""
    if owned is None:
        return True
    return any(owned.get(t, frozenset()) & ps for t, ps in partitions.items())


def is_subset(owned: Mapping[UUID, frozenset[int]] | None, assigned: Partitions) -> bool:
    if owned is None:
        return False
    return all(ps <= assigned.get(t, frozenset()) for t, ps in owned.items() if ps)


def reconcile(
    current: CurrentAssignment,
    target_epoch: int,
    target: Partitions,
    is_held: IsHeld,
    owned: Mapping[UUID, frozenset[int]] | None,
) -> CurrentAssignment:
    """The member's next current assignment (``current`` itself when nothing changes).

    ``owned``: the partitions the heartbeat says the member owns, None when not sent."""
    if current.state is MemberState.STABLE:
        if current.epoch == target_epoch:
            return current
        return _next(current, current.epoch, target_epoch, target, is_held, owned)
    if current.state is MemberState.UNREVOKED_PARTITIONS:
        if owns_any(owned, current.pending_revocation):
            return current
        # Revoked: it may move on (to the next epoch at least, as Kafka).
        return _next(current, current.epoch + 1, target_epoch, target, is_held, owned)
    return _next(current, current.epoch, target_epoch, target, is_held, owned)


def _next(
    current: CurrentAssignment,
    epoch: int,
    target_epoch: int,
    target: Partitions,
    is_held: IsHeld,
    owned: Mapping[UUID, frozenset[int]] | None,
) -> CurrentAssignment:
    assigned: dict[UUID, frozenset[int]] = {}
    revoke: dict[UUID, frozenset[int]] = {}
    to_assign: dict[UUID, frozenset[int]] = {}
    unreleased = False
    for topic_id in set(target) | set(current.assigned):
        wanted = target.get(topic_id, frozenset())
        held = current.assigned.get(topic_id, frozenset())
        keep = held & wanted
        gone = held - keep
        new = wanted - keep
        free = frozenset(p for p in new if not is_held(topic_id, p))
        unreleased = unreleased or free != new
        if keep:
            assigned[topic_id] = keep
        if gone:
            revoke[topic_id] = gone
        if free:
            to_assign[topic_id] = free
    if revoke and owns_any(owned, revoke):
        # Revoke first; the member stays at its epoch until it acknowledges.
        return CurrentAssignment(
            epoch, current.epoch, MemberState.UNREVOKED_PARTITIONS, assigned, revoke
        )
    for topic_id, partitions in to_assign.items():
        assigned[topic_id] = assigned.get(topic_id, frozenset()) | partitions
    state = MemberState.UNRELEASED_PARTITIONS if unreleased else MemberState.STABLE
    return CurrentAssignment(target_epoch, current.epoch, state, assigned, {})


def revoke_beyond(
    current: CurrentAssignment,
    target: Partitions,
    owned: Mapping[UUID, frozenset[int]] | None,
) -> CurrentAssignment:
    """A member stable at the assignment epoch gives up what ``target`` no longer has (the
    partitions of topics it unsubscribed from while the next target waits for the
    assignment interval), keeping its epoch: revoked first if it still owns them, as
    Kafka's CurrentAssignmentBuilder does on a subscription change."""
    keep: dict[UUID, frozenset[int]] = {}
    gone: dict[UUID, frozenset[int]] = {}
    for topic_id, held in current.assigned.items():
        if kept := held & target.get(topic_id, frozenset()):
            keep[topic_id] = kept
        if lost := held - kept:
            gone[topic_id] = lost
    if not gone:
        return current
    if owns_any(owned, gone):
        return CurrentAssignment(
            current.epoch, current.previous_epoch, MemberState.UNREVOKED_PARTITIONS, keep, gone
        )
    return CurrentAssignment(current.epoch, current.previous_epoch, MemberState.STABLE, keep, {})


def epoch_is_fenced(
    current: CurrentAssignment,
    received_epoch: int,
    owned: Mapping[UUID, frozenset[int]] | None,
) -> bool:
    """FENCED_MEMBER_EPOCH: a heartbeat's epoch is ahead of the member's, or behind it
    other than the previous epoch with owned partitions within the assignment (the
    answer carrying the new epoch may have been lost), as Kafka decides."""
    if received_epoch > current.epoch:
        return True
    if received_epoch < current.epoch:
        return received_epoch != current.previous_epoch or not is_subset(owned, current.assigned)
    return False
