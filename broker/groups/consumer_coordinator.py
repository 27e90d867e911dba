"""The KIP-848 consumer groups this broker coordinates: ConsumerGroupHeartbeat with its
timers and storage around the pure protocol (:mod:`broker.groups.consumer_group_heartbeat`),
and what offsets and the admin APIs need to know of these groups.

- Session timeout (``group.consumer.session.timeout.ms``, or the group's own
  ``consumer.session.timeout.ms`` group config): a member that does not heartbeat within it
  is fenced (removed; the group epoch goes up, the others get its partitions). The heartbeat
  interval members are told is likewise the group's ``consumer.heartbeat.interval.ms`` when
  set. So is the assignment interval (``group.consumer.assignment.interval.ms``, 1 s, or
  ``consumer.assignment.interval.ms``: KIP-1263, Kafka 4.3+): the target is computed at
  most once per interval, at the first heartbeat after it. All three are read through
  :attr:`ConsumerCoordinator.group_timings` (the cached group configs) on each heartbeat.
- Rebalance timeout (the member's, from its first heartbeat): a member asked to revoke
  partitions that has not done so within it is fenced too, so it cannot hold others up.
- Every heartbeat that changed the group is answered once the group's snapshot is
  stored (:mod:`broker.groups.consumer_group_persistence`), as Kafka answers once its
  records are written: a member never holds an assignment the next coordinator would
  not know. Plain heartbeats write nothing.
- Classic and consumer groups share the group id space. A consumer member joining a
  classic group with members upgrades it when ``group.consumer.migration.policy`` allows
  and the group uses the ``consumer`` protocol type (else GROUP_ID_NOT_FOUND, as Kafka);
  an empty classic group is replaced. Classic members of a consumer group are served here
  (:mod:`broker.groups.consumer_classic_members`), with the timers Kafka gives them: their
  own session timeout, and their rebalance timeout to rejoin once told to and to SyncGroup
  once joined. When the last consumer-protocol member leaves or is fenced and classic
  members remain, the group is downgraded to a classic group (when the policy allows).
  See :mod:`broker.groups.consumer_migration`.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import replace

from kio.schema.errors import ErrorCode

from broker.groups import consumer_classic_members as classic_members
from broker.groups.consumer_classic_members import ClassicJoin
from broker.groups.consumer_group import LEAVE_EPOCH, STATIC_LEAVE_EPOCH, ConsumerGroup
from broker.groups.consumer_group_heartbeat import (
    HeartbeatError,
    HeartbeatRequest,
    HeartbeatResult,
    TopicLookup,
    fence,
    heartbeat,
    leave,
    validate,
)
from broker.groups.consumer_group_persistence import snapshot_of
from broker.groups.consumer_migration import can_downgrade, downgrade, upgrade
from broker.groups.consumer_protocol import CustomAssignorData, MalformedProtocol
from broker.groups.group import (
    CONSUMER_PROTOCOL_TYPE,
    Group,
    GroupState,
    JoinResult,
    SyncResult,
)
from broker.groups.held_groups import HeldGroups
from broker.groups.reconciliation import MemberState
from broker.groups.store_errors import store_error

log = logging.getLogger(__name__)

# A group's (session timeout, heartbeat interval, assignment interval) in ms: its group
# configs, else the broker's.
GroupTimings = Callable[[str], Awaitable[tuple[int, int, int]]]
_TIMINGS_PRUNE_AT = 10_000


class ConsumerCoordinator:
    def __init__(self, held: HeldGroups) -> None:
        self._held = held
        self.config = held.config
        held.on_consumer_group_loaded = self._start_timers
        # Set by the node (the group configs kept with the share groups); None: the broker's.
        self.group_timings: GroupTimings | None = None
        # The timings each group's last heartbeat read, for its timers and answers.
        self._timings: dict[str, tuple[int, int]] = {}

    @property
    def groups(self) -> dict[str, ConsumerGroup]:
        return self._held.consumer_groups

    @property
    def default_assignor(self) -> str:
        return self.config.consumer_assignors[0]

    # ---------------------------------------------------------------- heartbeat

    async def heartbeat(
        self, request: HeartbeatRequest, version: int, lookup: TopicLookup
    ) -> HeartbeatResult:
        try:
            validate(request, version, self.config.consumer_assignors)
        except HeartbeatError as exc:
            return HeartbeatResult.failed(exc.error, exc.message)
        if not request.member_id and request.member_epoch == 0:
            # v0: the coordinator names a new member (v1 clients name themselves).
            request = replace(request, member_id=str(uuid.uuid4()))
        group_id = request.group_id
        if not self._held.owns(group_id):
            return HeartbeatResult.failed(ErrorCode.not_coordinator, "Not the coordinator.")
        # Before the load: a loaded group's members start their sessions with these.
        await self._refresh_timings(group_id)
        if loaded := await self._held.load(group_id):
            return HeartbeatResult.failed(loaded, f"Loading group {group_id} failed.")
        if await self._held.is_share_group(group_id):
            return HeartbeatResult.failed(
                ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."
            )
        group = self._group_for(request, lookup)
        if isinstance(group, HeartbeatResult):
            return group
        if request.member_epoch == LEAVE_EPOCH and self._downgrade_on_leave(
            group, request.member_id, request.instance_id
        ):
            return HeartbeatResult(ErrorCode.none, None, request.member_id, LEAVE_EPOCH)
        if request.member_epoch < 0:
            result = leave(group, request)
        else:
            result = heartbeat(
                group,
                request,
                lookup,
                self.default_assignor,
                self.config.consumer_rack_aware_assignment,
                self._held.wall_ms(),
                self.assignment_interval_ms(group_id),
            )
        if result.error != ErrorCode.none:
            return result
        self._after_heartbeat(group, request, result)
        if result.changed:
            error = await self._store(group)
            if error is not None:
                return HeartbeatResult.failed(error, "Storing the group failed.")
        return result

    def _group_for(
        self, request: HeartbeatRequest, lookup: TopicLookup
    ) -> ConsumerGroup | HeartbeatResult:
        group_id = request.group_id
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self._held.groups.get(group_id)
        joining = request.member_epoch == 0
        if classic is not None:
            if joining and classic.is_(GroupState.EMPTY):
                log.info("group %s: the empty classic group becomes a consumer group", group_id)
                self._held.remove_group(classic)
            elif (
                joining
                and self.config.consumer_migration_policy.upgrades
                and classic.protocol_type == CONSUMER_PROTOCOL_TYPE
            ):
                return self._upgrade(classic, lookup)
            else:
                # Kafka's answer when the policy or the group's protocol type rules the
                # upgrade out, and to a member not joining.
                return HeartbeatResult.failed(
                    ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."
                )
        elif not joining:
            return HeartbeatResult.failed(
                ErrorCode.group_id_not_found, f"Consumer group {group_id} not found."
            )
        group = self.groups[group_id] = ConsumerGroup(group_id)
        # Kafka 4.4 answers a new group's first member with epoch 2 and counts one per
        # change from there (measured: a subscription change or a new member, +1 each), as
        # if the group were created at epoch 1: its numbers, so epochs read the same.
        group.group_epoch = group.assignment_epoch = 1
        return group

    def _upgrade(self, classic: Group, lookup: TopicLookup) -> ConsumerGroup | HeartbeatResult:
        group_id = classic.group_id
        try:
            group = upgrade(classic, lookup)
        except MalformedProtocol as exc:
            log.warning("group %s: cannot upgrade to a consumer group: %s", group_id, exc)
            return HeartbeatResult.failed(
                ErrorCode.group_id_not_found,
                f"Cannot upgrade classic group {group_id} to consumer group because the "
                "embedded consumer protocol is malformed.",
            )
        except CustomAssignorData as exc:
            # Kafka's answer (ConsumerGroup.fromClassicGroup): the consumer group's
            # server-side assignor would drop what the custom one shares with its members.
            log.info("group %s: cannot upgrade to a consumer group: %s", group_id, exc)
            return HeartbeatResult.failed(
                ErrorCode.group_id_not_found,
                f"Cannot upgrade classic group {group_id} to consumer group because an "
                "unsupported custom assignor is in use. Please refer to the documentation or "
                "switch to a default assignor before re-attempting the upgrade.",
            )
        log.info(
            "group %s: classic group (generation %d, %d members) upgraded to a consumer group",
            group_id,
            classic.generation_id,
            len(group.members),
        )
        self._held.hand_over(classic)
        self.groups[group_id] = group
        for member_id in group.members:
            self._touch_classic(group, member_id)
        # Stored with the joining member's heartbeat, which changes the group.
        return group

    async def _refresh_timings(self, group_id: str) -> None:
        if self.group_timings is None:
            return
        try:
            found = await self.group_timings(group_id)
        except Exception as exc:  # a soft setting: the last known (or default) stays
            log.warning("reading group %s's configs failed: %s", group_id, exc)
            return
        if len(self._timings) >= _TIMINGS_PRUNE_AT:
            self._timings = {g: t for g, t in self._timings.items() if g in self.groups}
        self._timings[group_id] = found

    def session_timeout_ms(self, group_id: str) -> int:
        found = self._timings.get(group_id)
        return self.config.consumer_session_timeout_ms if found is None else found[0]

    def heartbeat_interval_ms(self, group_id: str) -> int:
        """The interval a member of ``group_id`` is told (as of its group's last heartbeat)."""
        found = self._timings.get(group_id)
        return self.config.consumer_heartbeat_interval_ms if found is None else found[1]

    def assignment_interval_ms(self, group_id: str) -> int:
        """The least time between two target computations of ``group_id`` (KIP-1263)."""
        found = self._timings.get(group_id)
        return self.config.consumer_assignment_interval_ms if found is None else found[2]

    def _after_heartbeat(
        self, group: ConsumerGroup, request: HeartbeatRequest, result: HeartbeatResult
    ) -> None:
        member_id = result.member_id or request.member_id
        member = group.members.get(member_id)
        if member is None or member.epoch == STATIC_LEAVE_EPOCH or member.uses_classic_protocol:
            # Gone; or a static member away for a while: its session timer runs on.
            return
        timers = group.timers_of(member_id)
        if timers.session is not None:
            timers.session.cancel()
        timers.session = self._held.later(
            self.session_timeout_ms(group.group_id), self._session_expired, group, member_id
        )
        revoking = member.current.state is MemberState.UNREVOKED_PARTITIONS
        if timers.rebalance is not None and (
            not revoking or timers.rebalance_epoch != member.epoch
        ):
            timers.rebalance.cancel()
            timers.rebalance = None
        if revoking and timers.rebalance is None:
            # Started when the member is asked to revoke (at this epoch), not rearmed by
            # its heartbeats meanwhile.
            timers.rebalance_epoch = member.epoch
            timers.rebalance = self._held.later(
                member.rebalance_timeout_ms,
                self._rebalance_expired,
                group,
                member_id,
                member.epoch,
            )

    def _start_timers(self, group: ConsumerGroup) -> None:
        """A group loaded from its snapshot: each member's session starts now, as in
        Kafka after a coordinator change."""
        for member_id, member in group.members.items():
            if member.uses_classic_protocol:
                self._touch_classic(group, member_id)
                continue
            timers = group.timers_of(member_id)
            timers.session = self._held.later(
                self.session_timeout_ms(group.group_id), self._session_expired, group, member_id
            )
            if member.current.state is MemberState.UNREVOKED_PARTITIONS:
                timers.rebalance_epoch = member.epoch
                timers.rebalance = self._held.later(
                    member.rebalance_timeout_ms,
                    self._rebalance_expired,
                    group,
                    member_id,
                    member.epoch,
                )

    def _held_here(self, group: ConsumerGroup, member_id: str) -> bool:
        return self.groups.get(group.group_id) is group and member_id in group.members

    def _session_expired(self, group: ConsumerGroup, member_id: str) -> None:
        if not self._held_here(group, member_id):
            return
        log.info("group %s: member %s fenced (session timeout)", group.group_id, member_id)
        self._fence(group, member_id)

    def _rebalance_expired(self, group: ConsumerGroup, member_id: str, epoch: int) -> None:
        if not self._held_here(group, member_id):
            return
        member = group.members[member_id]
        if member.epoch != epoch or member.current.state is not MemberState.UNREVOKED_PARTITIONS:
            return
        log.info(
            "group %s: member %s fenced: it did not revoke its partitions within %d ms",
            group.group_id,
            member_id,
            member.rebalance_timeout_ms,
        )
        self._fence(group, member_id)

    def _fence(self, group: ConsumerGroup, member_id: str) -> None:
        member = group.members.get(member_id)
        if member is not None and self._downgrade_on_leave(group, member_id, member.instance_id):
            return
        fence(group, member_id)
        # Nobody waits on this write; a failure is logged by the persistence layer.
        self._write(group)

    # ---------------------------------------------------------------- downgrade

    def _downgrade_on_leave(
        self, group: ConsumerGroup, member_id: str, instance_id: str | None
    ) -> bool:
        """A consumer-protocol member leaving (or fenced) whose departure leaves only
        classic members: the group becomes a classic group again when the policy allows
        (Kafka's online downgrade). True when it did (the member is gone with it)."""
        member = group.members.get(member_id)
        if instance_id is not None:
            member = group.static_member(instance_id)
        if (
            member is None
            or member.member_id != member_id
            or member.uses_classic_protocol
            or not self.config.consumer_migration_policy.downgrades
            or not can_downgrade(group, member_id)
        ):
            return False
        classic = downgrade(group, member_id, self._held.wall_ms())
        log.info(
            "group %s: member %s left, the others use the classic protocol: downgraded to a "
            "classic group (generation %d)",
            group.group_id,
            member_id,
            classic.generation_id,
        )
        self._held.drop_consumer_group(group.group_id)
        self._held.adopt_downgraded(classic)
        return True

    # ---------------------------------------------------------------- classic members

    def serves_classic(self, group_id: str) -> bool:
        """JoinGroup, SyncGroup, Heartbeat and LeaveGroup of ``group_id`` are for the
        classic members of a consumer group (an empty one becomes a classic group)."""
        group = self.groups.get(group_id)
        return group is not None and bool(group.members)

    async def classic_join(
        self, group_id: str, request: ClassicJoin, lookup: TopicLookup
    ) -> JoinResult:
        group = self.groups.get(group_id)
        if group is None or not group.members:
            return JoinResult.failed(ErrorCode.unknown_member_id, request.member_id)
        answer, changed = classic_members.join(
            group,
            request,
            lookup,
            self.default_assignor,
            self.config.consumer_rack_aware_assignment,
        )
        if answer.error != ErrorCode.none:
            return answer
        timers = group.timers_of(answer.member_id)
        if timers.join is not None:
            timers.join.cancel()
            timers.join = None
        self._touch_classic(group, answer.member_id)
        if timers.sync is not None:
            timers.sync.cancel()
        member = group.members[answer.member_id]
        timers.sync = self._held.later(
            member.rebalance_timeout_ms, self._classic_timeout, group, answer.member_id, "sync"
        )
        if changed:
            error = await self._store(group)
            if error is not None:
                return JoinResult.failed(error, answer.member_id)
        return answer

    def classic_sync(
        self,
        group_id: str,
        member_id: str,
        instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
    ) -> SyncResult:
        group = self.groups.get(group_id)
        if group is None:
            return SyncResult.failed(ErrorCode.unknown_member_id)
        answer, member = classic_members.sync(
            group, member_id, instance_id, generation_id, protocol_type, protocol_name
        )
        if member is None:
            return answer
        if answer.error == ErrorCode.rebalance_in_progress:
            self._expect_rejoin(group, member.member_id)
        if answer.error == ErrorCode.none:
            timers = group.timers_of(member.member_id)
            if timers.sync is not None:
                timers.sync.cancel()
                timers.sync = None
            self._touch_classic(group, member.member_id)
        return answer

    def classic_heartbeat(
        self, group_id: str, member_id: str, instance_id: str | None, generation_id: int
    ) -> ErrorCode:
        group = self.groups.get(group_id)
        if group is None:
            return ErrorCode.unknown_member_id
        error, member = classic_members.heartbeat(group, member_id, instance_id, generation_id)
        if member is None or error == ErrorCode.illegal_generation:
            return error
        self._touch_classic(group, member.member_id)
        if error == ErrorCode.rebalance_in_progress:
            self._expect_rejoin(group, member.member_id)
        return error

    async def classic_leave(
        self, group_id: str, leaving: list[tuple[str, str | None]]
    ) -> list[ErrorCode]:
        group = self.groups.get(group_id)
        if group is None:
            return [ErrorCode.unknown_member_id for _ in leaving]
        errors, removed = classic_members.leave(group, leaving)
        if removed:
            log.info("group %s: classic members %s left", group_id, removed)
            error = await self._store(group)
            if error is not None:
                return [error if e == ErrorCode.none else e for e in errors]
        return errors

    def _touch_classic(self, group: ConsumerGroup, member_id: str) -> None:
        """A classic member showed it is alive: its session (its own timeout) restarts."""
        member = group.members[member_id]
        assert member.classic is not None
        timers = group.timers_of(member_id)
        if timers.session is not None:
            timers.session.cancel()
        timers.session = self._held.later(
            member.classic.session_timeout_ms, self._session_expired, group, member_id
        )

    def _expect_rejoin(self, group: ConsumerGroup, member_id: str) -> None:
        """Told to rejoin: it must JoinGroup within its rebalance timeout (not restarted
        by its heartbeats meanwhile)."""
        timers = group.timers_of(member_id)
        if timers.join is None:
            timers.join = self._held.later(
                group.members[member_id].rebalance_timeout_ms,
                self._classic_timeout,
                group,
                member_id,
                "join",
            )

    def _classic_timeout(self, group: ConsumerGroup, member_id: str, what: str) -> None:
        if not self._held_here(group, member_id):
            return
        log.info(
            "group %s: classic member %s fenced: no %sGroup within its rebalance timeout",
            group.group_id,
            member_id,
            what.capitalize(),
        )
        self._fence(group, member_id)

    # ---------------------------------------------------------------- storage

    def _write(self, group: ConsumerGroup) -> asyncio.Future[None] | None:
        persistence = self._held.persistence
        if persistence is None:
            return None
        if not group.members:
            # Nobody to bring back on another coordinator (Kafka keeps the empty group
            # and its epoch; here a new member starts the epochs over).
            return persistence.forget_group(group.group_id)
        return persistence.store_group(snapshot_of(group, self._held.wall_ms()))

    async def _store(self, group: ConsumerGroup) -> ErrorCode | None:
        written = self._write(group)
        if written is None:
            return None
        try:
            await asyncio.shield(written)
        except Exception as exc:
            return store_error(exc, f"storing consumer group {group.group_id}")
        return None

    # ---------------------------------------------------------------- for admin

    def remove_if_empty(self, group_id: str) -> bool:
        """DeleteGroups: forget an empty group (False when it has members)."""
        group = self.groups.get(group_id)
        if group is None:
            return True
        if group.members:
            return False
        self._held.drop_consumer_group(group_id)
        return True
