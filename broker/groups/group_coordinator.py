"""The classic group state machine: JoinGroup, SyncGroup, Heartbeat, LeaveGroup.

It behaves like Kafka's classic group coordinator, because stock clients are written
against it:

- a rebalance starts (PreparingRebalance) when a member joins, leaves, fails or
  changes its metadata, and the leader rejoining forces one;
- it completes when every known member has rejoined, or when the rebalance timeout
  (the largest of the members') expires, dropping dynamic members that did not rejoin;
- the first rebalance of an empty group waits ``group.initial.rebalance.delay.ms``,
  again each time another member arrives, bounded by the rebalance timeout, so a fleet
  starting together forms one generation instead of many;
- CompletingRebalance waits for the leader's SyncGroup, whose assignments are then
  handed out (as opaque bytes) to every member's SyncGroup: Stable;
- a member that neither heartbeats nor waits on a rebalance for its session timeout is
  removed; members of a new generation that do not SyncGroup within the rebalance
  timeout are removed too;
- JoinGroup v4+ from an unknown member first gets MEMBER_ID_REQUIRED with its id;
- static members (``group.instance.id``) keep their place across restarts: rejoining
  under a new member id replaces the old one without a rebalance (unless the chosen
  protocol would change), and the old id is FENCED_INSTANCE_ID from then on.

JoinGroup and SyncGroup answers that wait are asyncio futures; the connection writes
them in order when they complete, and meanwhile other connections are served.

Timers run on a :class:`~broker.groups.held_groups.Scheduler` (the event loop, or a manual
clock in tests).

Given a group store, membership survives a change of coordinator (see
:mod:`broker.groups.persistence`): request handlers ``await load(group_id)`` before
calling in, which brings back the snapshot of a group this broker just became the
coordinator of.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from broker.groups.group import (
    Group,
    GroupState,
    JoinResult,
    Member,
    SyncResult,
)
from broker.groups.held_groups import HeldGroups
from broker.groups.persistence import snapshot_of
from broker.groups.store_errors import store_error

log = logging.getLogger(__name__)

S = GroupState
NONE = int(ErrorCode.none)
# A new member's JoinGroup may wait this long for the rebalance (it cannot heartbeat
# before its first answer); Kafka's value.
NEW_MEMBER_JOIN_TIMEOUT_MS = 300_000


@dataclass(frozen=True, slots=True)
class LeavingMember:
    member_id: str
    group_instance_id: str | None


class GroupCoordinator(HeldGroups):
    """The state machine over the groups this broker holds (:class:`HeldGroups`)."""

    def _session_timeout_error(self, session_timeout_ms: int) -> bool:
        return not (
            self.config.min_session_timeout_ms
            <= session_timeout_ms
            <= self.config.max_session_timeout_ms
        )

    # ---------------------------------------------------------------- JoinGroup

    def join_group(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        skips_assignment: bool = False,
    ) -> asyncio.Future[JoinResult]:
        """``skips_assignment``: the request's version has KIP-814's skip_assignment
        (JoinGroup v9+)."""

        def fail(error: ErrorCode, answer_id: str = member_id) -> asyncio.Future[JoinResult]:
            return self._done(JoinResult.failed(error, answer_id))

        if not group_id:
            return fail(ErrorCode.invalid_group_id)
        if not self.owns(group_id):
            return fail(ErrorCode.not_coordinator)
        if self._session_timeout_error(session_timeout_ms):
            return fail(ErrorCode.invalid_session_timeout)
        if not protocol_type or not protocols:
            return fail(ErrorCode.inconsistent_group_protocol)
        names = [name for name, _ in protocols]
        if len(set(names)) != len(names):
            # The same protocol twice would count twice toward "supported by all".
            return fail(ErrorCode.inconsistent_group_protocol)
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            if consumer_group.members:
                # The handlers send classic members of a consumer group to its coordinator
                # (ConsumerCoordinator.classic_join); a caller that did not is refused.
                return fail(ErrorCode.inconsistent_group_protocol)
            log.info("group %s: the empty consumer group becomes a classic group", group_id)
            self.drop_consumer_group(group_id)
        group = self.groups.get(group_id)
        if group is None:
            if member_id:
                return fail(ErrorCode.unknown_member_id)
            group = self.groups[group_id] = Group(group_id, self._wall_ms())
        if not group.is_(S.EMPTY) and not group.supports_protocols(protocol_type, names):
            return fail(ErrorCode.inconsistent_group_protocol)

        future: asyncio.Future[JoinResult] = self._future()
        if not member_id:
            self._join_new_member(
                group,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
                require_known_member_id,
                future,
                skips_assignment,
            )
        else:
            self._join_current_member(
                group,
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                protocol_type,
                protocols,
                future,
            )
        if group.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(group)
        return future

    def _join_new_member(
        self,
        group: Group,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        future: asyncio.Future[JoinResult],
        skips_assignment: bool = False,
    ) -> None:
        # Kafka's member ids: the client id and a UUID, so logs say who is who.
        new_id = f"{client_id}-{uuid.uuid4()}"
        if instance_id is not None:
            old_id = group.static_member_id(instance_id)
            if old_id is not None:
                self._replace_static_member(
                    group, instance_id, old_id, new_id, protocols,
                    rebalance_timeout_ms, session_timeout_ms, future, skips_assignment,
                )  # fmt: skip
                return
        elif require_known_member_id:
            # v4+: hand out the id first. The member joins again with it; until then it
            # holds the rebalance (like a member that has not rejoined yet) for at most
            # its session timeout.
            group.pending_members[new_id] = self._later(
                session_timeout_ms, self._expire_pending_member, group, new_id
            )
            future.set_result(JoinResult.failed(ErrorCode.member_id_required, new_id))
            return
        self._add_member_and_rebalance(
            group, new_id, instance_id, client_id, client_host, rebalance_timeout_ms,
            session_timeout_ms, protocol_type, protocols, future,
        )  # fmt: skip

    def _join_current_member(
        self,
        group: Group,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        future: asyncio.Future[JoinResult],
    ) -> None:
        if member_id in group.pending_members:
            # The second JoinGroup of a member told MEMBER_ID_REQUIRED.
            if instance_id is not None:
                future.set_result(JoinResult.failed(ErrorCode.unknown_member_id, member_id))
                return
            self._cancel(group.pending_members.pop(member_id))
            self._add_member_and_rebalance(
                group, member_id, None, client_id, client_host, rebalance_timeout_ms,
                session_timeout_ms, protocol_type, protocols, future,
            )  # fmt: skip
            return
        error = self._validate_member(group, member_id, instance_id)
        if error is not None:
            future.set_result(JoinResult.failed(error, member_id))
            return
        member = group.get(member_id)
        if group.is_(S.PREPARING_REBALANCE):
            self._update_member_and_rebalance(
                group, member, protocols, rebalance_timeout_ms, session_timeout_ms, future
            )
        elif group.is_(S.COMPLETING_REBALANCE):
            if member.matches(protocols):
                # It lost our JoinGroup answer: give the same one again.
                future.set_result(self._join_result(group, member))
            else:
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms, future
                )
        elif group.is_(S.STABLE):
            if group.is_leader(member_id) or not member.matches(protocols):
                # The leader rejoining forces a rebalance: that is how it reacts to
                # changes the member metadata does not show (new partitions, ...).
                self._update_member_and_rebalance(
                    group, member, protocols, rebalance_timeout_ms, session_timeout_ms, future
                )
            else:
                future.set_result(self._join_result(group, member))
        else:
            # Empty with members cannot happen; let the member start over.
            future.set_result(JoinResult.failed(ErrorCode.unknown_member_id, member_id))

    def _validate_member(
        self, group: Group, member_id: str, instance_id: str | None
    ) -> ErrorCode | None:
        """A static member must be the current holder of its instance id; any member
        must be known."""
        if instance_id is not None:
            current = group.static_member_id(instance_id)
            if current is None:
                return ErrorCode.unknown_member_id
            if current != member_id:
                return ErrorCode.fenced_instance_id
            return None
        if not group.has(member_id):
            return ErrorCode.unknown_member_id
        return None

    def _join_result(self, group: Group, member: Member) -> JoinResult:
        return JoinResult(
            NONE,
            member.member_id,
            group.generation_id,
            group.protocol_type,
            group.protocol_name,
            group.leader_id or "",
            group.current_member_metadata() if group.is_leader(member.member_id) else [],
        )

    def _add_member_and_rebalance(
        self,
        group: Group,
        member_id: str,
        instance_id: str | None,
        client_id: str,
        client_host: str,
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        future: asyncio.Future[JoinResult],
    ) -> None:
        member = Member(
            member_id,
            instance_id,
            client_id,
            client_host,
            rebalance_timeout_ms,
            session_timeout_ms,
            protocol_type,
            list(protocols),
            is_new=True,
        )
        if group.is_(S.PREPARING_REBALANCE) and group.generation_id == 0:
            group.new_member_added = True
        group.add(member, future)
        # A new member cannot heartbeat until answered; if it went away (its JoinGroup
        # timed out), this drops it eventually. A live one will have retried.
        self._schedule_heartbeat(group, member, NEW_MEMBER_JOIN_TIMEOUT_MS)
        self._maybe_prepare_rebalance(group, f"member {member_id} joined")

    def _update_member_and_rebalance(
        self,
        group: Group,
        member: Member,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        future: asyncio.Future[JoinResult],
    ) -> None:
        group.update_member(
            member, list(protocols), rebalance_timeout_ms, session_timeout_ms, future
        )
        self._maybe_prepare_rebalance(group, f"member {member.member_id} rejoined")

    def _replace_static_member(
        self,
        group: Group,
        instance_id: str,
        old_id: str,
        new_id: str,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        future: asyncio.Future[JoinResult],
        skips_assignment: bool = False,
    ) -> None:
        leader_before = group.leader_id
        log.info(
            "group %s: static member %s rejoined as %s (was %s)",
            group.group_id, instance_id, new_id, old_id,
        )  # fmt: skip
        member = group.replace_static_member(instance_id, old_id, new_id)
        group.update_member(
            member, list(protocols), rebalance_timeout_ms, session_timeout_ms, future
        )
        self._schedule_heartbeat(group, member)
        if group.is_(S.STABLE):
            if group.protocol_name == group.select_protocol():
                # No rebalance. KIP-814 (v9+): a returning leader is told it leads, with
                # the members (its client needs them, e.g. to know their subscriptions)
                # and skip_assignment, so it syncs and gets its old assignment. Before
                # v9 the answer names the leader as it was: a restarted leader then does
                # not compute an assignment nobody would receive (Kafka answers alike).
                if skips_assignment:
                    leads = group.leader_id == new_id
                    answer = JoinResult(
                        NONE,
                        new_id,
                        group.generation_id,
                        group.protocol_type,
                        group.protocol_name,
                        group.leader_id or "",
                        group.current_member_metadata() if leads else [],
                        skip_assignment=leads,
                    )
                else:
                    answer = JoinResult(
                        NONE,
                        new_id,
                        group.generation_id,
                        group.protocol_type,
                        group.protocol_name,
                        leader_before or "",
                    )
                member.answer_join(answer)
                # The member's new id must be known to the next coordinator too.
                self._store_snapshot(group)
            else:
                self._maybe_prepare_rebalance(
                    group, f"static member {instance_id} rejoined with other protocols"
                )
        elif group.is_(S.COMPLETING_REBALANCE):
            # The leader may be assigning to the old id: start over.
            self._prepare_rebalance(group, f"static member {instance_id} rejoined")
        # PreparingRebalance: it is answered when the rebalance completes.

    def adopt_downgraded(self, group: Group) -> None:
        self.groups[group.group_id] = group
        self._absent.discard(group.group_id)
        for member in group.members.values():
            self._schedule_heartbeat(group, member)
        # The next coordinator must find a classic group, not the consumer group.
        self._store_snapshot(group)
        self._prepare_rebalance(group, "downgraded from a consumer group")

    # ---------------------------------------------------------------- rebalances

    def _maybe_prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.can_rebalance():
            self._prepare_rebalance(group, reason)

    def _prepare_rebalance(self, group: Group, reason: str) -> None:
        if group.is_(S.COMPLETING_REBALANCE):
            # Members waiting for an assignment must rejoin instead.
            self._reset_and_propagate_assignment_error(group, ErrorCode.rebalance_in_progress)
        self._cancel(group.sync_timer)
        group.sync_timer = None
        was_empty = group.is_(S.EMPTY)
        group.transition(S.PREPARING_REBALANCE, self._wall_ms())
        log.info(
            "group %s rebalancing (generation %d): %s", group.group_id, group.generation_id, reason
        )
        self._cancel(group.join_timer)
        if was_empty:
            delay = self.config.initial_rebalance_delay_ms
            remaining = max(group.max_rebalance_timeout_ms() - delay, 0)
            group.new_member_added = False
            group.join_timer = self._later(
                delay, self._initial_delay_expired, group, delay, remaining
            )
            group.initial_delay = True
        else:
            group.initial_delay = False
            group.join_timer = self._later(
                group.max_rebalance_timeout_ms(), self._rebalance_timeout_expired, group
            )
            self._try_complete_join(group)

    def _initial_delay_expired(self, group: Group, delay_ms: int, remaining_ms: int) -> None:
        if self.groups.get(group.group_id) is not group or not group.is_(S.PREPARING_REBALANCE):
            return
        if group.new_member_added and remaining_ms > 0:
            # Someone arrived during the delay: others are probably starting too.
            group.new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, remaining_ms)
            group.join_timer = self._later(
                delay, self._initial_delay_expired, group, delay, max(remaining_ms - delay_ms, 0)
            )
            return
        group.join_timer = None
        group.initial_delay = False
        self._complete_join(group)

    def _rebalance_timeout_expired(self, group: Group) -> None:
        if self.groups.get(group.group_id) is not group or not group.is_(S.PREPARING_REBALANCE):
            return
        group.join_timer = None
        self._complete_join(group)

    def _try_complete_join(self, group: Group) -> None:
        if group.initial_delay or not group.is_(S.PREPARING_REBALANCE):
            return
        if group.has_all_members_joined():
            self._cancel(group.join_timer)
            group.join_timer = None
            self._complete_join(group)

    def _complete_join(self, group: Group) -> None:
        for member in [m for m in group.not_yet_rejoined() if not m.is_static]:
            log.info("group %s: removing member %s, it did not rejoin", group.group_id,
                     member.member_id)  # fmt: skip
            self._remove_member(group, member)
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined (only static members that are away): wait another
            # rebalance timeout; session timeouts remove the absent meanwhile.
            group.join_timer = self._later(
                group.max_rebalance_timeout_ms(), self._rebalance_timeout_expired, group
            )
            return
        group.init_next_generation(self._wall_ms())
        if group.is_(S.EMPTY):
            log.info("group %s is empty (generation %d)", group.group_id, group.generation_id)
            # Nobody to bring back on another coordinator.
            self._forget_snapshot(group)
            return
        log.info(
            "group %s generation %d: %d members, protocol %s, leader %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )
        for member in list(group.members.values()):
            member.answer_join(self._join_result(group, member))
            self._schedule_heartbeat(group, member)
            member.is_new = False
        group.sync_timer = self._later(
            group.max_rebalance_timeout_ms(), self._sync_timeout_expired, group, group.generation_id
        )

    def _sync_timeout_expired(self, group: Group, generation_id: int) -> None:
        if self.groups.get(group.group_id) is not group or group.generation_id != generation_id:
            return
        group.sync_timer = None
        if not group.is_(S.COMPLETING_REBALANCE, S.STABLE) or not group.pending_sync:
            return
        missing = sorted(group.pending_sync)
        for member_id in missing:
            member = group.members.get(member_id)
            if member is not None:
                self._cancel(member.heartbeat_timer)
                group.remove(member_id)
        self._prepare_rebalance(group, f"members {missing} did not SyncGroup in time")

    def _reset_and_propagate_assignment_error(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            member.assignment = b""
            member.answer_sync(SyncResult.failed(error))

    # ---------------------------------------------------------------- timers

    def _schedule_heartbeat(
        self, group: Group, member: Member, timeout_ms: int | None = None
    ) -> None:
        """The member showed it is alive: expect the next sign within its session timeout."""
        self._cancel(member.heartbeat_timer)
        member.heartbeat_satisfied = False
        member.heartbeat_timer = self._later(
            member.session_timeout_ms if timeout_ms is None else timeout_ms,
            self._heartbeat_expired,
            group,
            member,
        )

    def _heartbeat_expired(self, group: Group, member: Member) -> None:
        if (
            self.groups.get(group.group_id) is not group
            or group.members.get(member.member_id) is not member
        ):
            return
        member.heartbeat_timer = None
        if member.has_satisfied_heartbeat():
            return
        log.info("group %s: member %s failed (session timeout)", group.group_id, member.member_id)
        self._remove_member_and_update_group(group, member, "session timeout")

    def _expire_pending_member(self, group: Group, member_id: str) -> None:
        if self.groups.get(group.group_id) is not group or member_id not in group.pending_members:
            return
        del group.pending_members[member_id]
        if group.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(group)

    def _remove_member(self, group: Group, member: Member) -> None:
        self._cancel(member.heartbeat_timer)
        member.heartbeat_timer = None
        group.remove(member.member_id)

    def _remove_member_and_update_group(self, group: Group, member: Member, reason: str) -> None:
        # A new member may still wait on its JoinGroup: tell it to start over.
        member.answer_join(JoinResult.failed(ErrorCode.unknown_member_id))
        member.answer_sync(SyncResult.failed(ErrorCode.unknown_member_id))
        self._remove_member(group, member)
        if group.is_(S.STABLE, S.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(group, f"member {member.member_id} left: {reason}")
        elif group.is_(S.PREPARING_REBALANCE):
            self._try_complete_join(group)

    # ---------------------------------------------------------------- SyncGroup

    def sync_group(
        self,
        group_id: str,
        generation_id: int,
        member_id: str,
        group_instance_id: str | None,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: dict[str, bytes],
    ) -> asyncio.Future[SyncResult]:
        def fail(error: ErrorCode) -> asyncio.Future[SyncResult]:
            return self._done(SyncResult.failed(error))

        if not group_id:
            return fail(ErrorCode.invalid_group_id)
        if not self.owns(group_id):
            return fail(ErrorCode.not_coordinator)
        group = self.groups.get(group_id)
        if group is None:
            return fail(ErrorCode.unknown_member_id)
        error = self._validate_member(group, member_id, group_instance_id)
        if error is not None:
            return fail(error)
        if generation_id != group.generation_id:
            return fail(ErrorCode.illegal_generation)
        if protocol_type is not None and protocol_type != group.protocol_type:
            return fail(ErrorCode.inconsistent_group_protocol)
        if protocol_name is not None and protocol_name != group.protocol_name:
            return fail(ErrorCode.inconsistent_group_protocol)
        if group.is_(S.EMPTY):
            return fail(ErrorCode.unknown_member_id)
        if group.is_(S.PREPARING_REBALANCE):
            return fail(ErrorCode.rebalance_in_progress)
        member = group.get(member_id)
        self._synced(group, member_id)
        if group.is_(S.STABLE):
            self._schedule_heartbeat(group, member)
            return self._done(self._sync_result(group, member))
        # CompletingRebalance: the answer waits for the leader's assignment.
        future: asyncio.Future[SyncResult] = self._future()
        member.answer_sync(SyncResult.failed(ErrorCode.rebalance_in_progress))  # a retry
        member.sync_future = future
        if group.is_leader(member_id) and not group.storing_assignment:
            # Members the leader left out get an empty assignment.
            assigned = {m: assignments.get(m, b"") for m in group.members}
            if self._persistence is None:
                self._set_assignment(group, assigned)
            else:
                # Answered once stored, as Kafka does: a member never holds an
                # assignment the next coordinator would not know.
                group.storing_assignment = True
                generation = group.generation_id
                snapshot = snapshot_of(group, assigned, self._wall_ms())
                stored = self._persistence.store_group(snapshot)
                stored.add_done_callback(
                    lambda done: self._assignment_stored(group, generation, assigned, done)
                )
        return future

    def _set_assignment(self, group: Group, assigned: dict[str, bytes]) -> None:
        for m in group.members.values():
            m.assignment = assigned.get(m.member_id, b"")
        for m in group.members.values():
            m.answer_sync(self._sync_result(group, m))
            self._schedule_heartbeat(group, m)
        group.transition(S.STABLE, self._wall_ms())
        log.info("group %s generation %d is stable", group.group_id, group.generation_id)

    def _assignment_stored(
        self,
        group: Group,
        generation_id: int,
        assigned: dict[str, bytes],
        done: asyncio.Future[None],
    ) -> None:
        if (
            self.groups.get(group.group_id) is not group
            or group.generation_id != generation_id
            or not group.is_(S.COMPLETING_REBALANCE)
        ):
            return  # a rebalance (or a move) since answered the members
        group.storing_assignment = False
        exc = None if done.cancelled() else done.exception()
        if done.cancelled() or exc is not None:
            error = (
                ErrorCode.coordinator_not_available
                if exc is None
                else store_error(exc, f"storing the assignment of group {group.group_id}")
            )
            self._reset_and_propagate_assignment_error(group, error)
            self._maybe_prepare_rebalance(group, "storing the assignment failed")
            return
        self._set_assignment(group, assigned)

    def _sync_result(self, group: Group, member: Member) -> SyncResult:
        return SyncResult(NONE, group.protocol_type, group.protocol_name, member.assignment)

    def _synced(self, group: Group, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._cancel(group.sync_timer)
            group.sync_timer = None

    # ---------------------------------------------------------------- Heartbeat

    def heartbeat(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        if not group_id:
            return ErrorCode.invalid_group_id
        if not self.owns(group_id):
            return ErrorCode.not_coordinator
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        error = self._validate_member(group, member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != group.generation_id:
            return ErrorCode.illegal_generation
        if group.is_(S.EMPTY):
            return ErrorCode.unknown_member_id
        self._schedule_heartbeat(group, group.get(member_id))
        if group.is_(S.PREPARING_REBALANCE):
            # The member learns here that it must rejoin.
            return ErrorCode.rebalance_in_progress
        return ErrorCode.none

    # ---------------------------------------------------------------- LeaveGroup

    def leave_group(
        self, group_id: str, leaving: Sequence[LeavingMember]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """The request's error and one error per leaving member."""
        if not group_id:
            return ErrorCode.invalid_group_id, []
        if not self.owns(group_id):
            return ErrorCode.not_coordinator, []
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.none, [ErrorCode.unknown_member_id for _ in leaving]
        errors = []
        for who in leaving:
            errors.append(self._leave(group, who))
        return ErrorCode.none, errors

    def _leave(self, group: Group, who: LeavingMember) -> ErrorCode:
        if not who.member_id:
            # Admin removal of a static member by instance id alone.
            current = (
                group.static_member_id(who.group_instance_id)
                if who.group_instance_id is not None
                else None
            )
            if current is None:
                return ErrorCode.unknown_member_id
            self._remove_member_and_update_group(group, group.get(current), "removed by admin")
            return ErrorCode.none
        if who.member_id in group.pending_members:
            self._cancel(group.pending_members.pop(who.member_id))
            if group.is_(S.PREPARING_REBALANCE):
                self._try_complete_join(group)
            return ErrorCode.none
        error = self._validate_member(group, who.member_id, who.group_instance_id)
        if error is not None:
            return error
        self._remove_member_and_update_group(group, group.get(who.member_id), "LeaveGroup")
        return ErrorCode.none

    # ---------------------------------------------------------------- for offsets

    def check_commit(
        self, group_id: str, member_id: str, group_instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        """May this OffsetCommit write? Commits from outside group management (generation
        -1, no member id) are allowed while the group has no members."""
        if not self.owns(group_id):
            return ErrorCode.not_coordinator
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            return consumer_group.check_commit(member_id, generation_id)
        group = self.groups.get(group_id)
        if generation_id < 0 and (group is None or group.is_(S.EMPTY)):
            # From outside group management (an admin, a consumer that assign()s): allowed
            # while nobody is in the group, whatever member id it names (librdkafka's
            # group.protocol=consumer names the id it made up for itself), as Kafka.
            return ErrorCode.none
        managed = generation_id >= 0 or bool(member_id) or group_instance_id is not None
        if group is None:
            # Only a group nobody manages here: no snapshot brought its members back
            # (callers load it first), so their generation is gone and they must rejoin.
            return ErrorCode.illegal_generation
        if managed:
            error = self._validate_member(group, member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != group.generation_id:
                return ErrorCode.illegal_generation
        elif not group.is_(S.EMPTY):
            return ErrorCode.unknown_member_id
        if group.is_(S.COMPLETING_REBALANCE):
            # Its generation is current but the assignment is not out yet.
            return ErrorCode.rebalance_in_progress
        if group.is_(S.STABLE, S.PREPARING_REBALANCE) and group.has(member_id):
            # A commit is a sign of life too.
            self._schedule_heartbeat(group, group.get(member_id))
        return ErrorCode.none

    def check_fetch(self, group_id: str, member_id: str | None, member_epoch: int) -> ErrorCode:
        """OffsetFetch v9+ naming a member (KIP-848 members do): in a consumer group it
        must be a member at that epoch (Kafka's ConsumerGroup.validateOffsetFetch). No
        member and epoch -1 (admins, classic consumers) is always allowed."""
        group = self.consumer_groups.get(group_id)
        if group is None or (member_id is None and member_epoch < 0):
            return ErrorCode.none
        return group.validate_member_epoch(member_id or "", member_epoch)

    def expirable(self, group_id: str, cutoff_ms: int) -> bool:
        """Whether the offsets of ``group_id`` may expire: nobody is in the group, and it
        has been empty since before ``cutoff_ms``."""
        consumer_group = self.consumer_groups.get(group_id)
        if consumer_group is not None:
            # Kafka expires a consumer group's offsets once it is empty (it keeps no
            # "empty since" for them either).
            return not consumer_group.members
        group = self.groups.get(group_id)
        if group is None:
            return True
        return group.is_(S.EMPTY) and group.state_since_ms < cutoff_ms
