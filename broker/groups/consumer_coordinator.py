"""The KIP-848 consumer groups this broker coordinates: ConsumerGroupHeartbeat with its
timers and storage around the pure protocol (:mod:`broker.groups.consumer_group_heartbeat`),
and what offsets and the admin APIs need to know of these groups.

- Session timeout (``group.consumer.session.timeout.ms``): a member that does not
  heartbeat within it is fenced (removed; the group epoch goes up, the others get its
  partitions).
- Rebalance timeout (the member's, from its first heartbeat): a member asked to revoke
  partitions that has not done so within it is fenced too, so it cannot hold others up.
- Every heartbeat that changed the group is answered once the group's snapshot is
  stored (:mod:`broker.groups.consumer_group_persistence`), as Kafka answers once its
  records are written: a member never holds an assignment the next coordinator would
  not know. Plain heartbeats write nothing.
- Classic and consumer groups share the group id space: a consumer member cannot join a
  classic group that has members (GROUP_ID_NOT_FOUND, as Kafka with
  ``group.consumer.migration.policy=disabled``); an empty classic group is replaced.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import replace

from kio.schema.errors import ErrorCode

from broker.groups.consumer_group import STATIC_LEAVE_EPOCH, ConsumerGroup
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
from broker.groups.group import GroupState
from broker.groups.held_groups import HeldGroups
from broker.groups.reconciliation import MemberState
from broker.groups.store_errors import store_error

log = logging.getLogger(__name__)


class ConsumerCoordinator:
    def __init__(self, held: HeldGroups) -> None:
        self._held = held
        self.config = held.config
        held.on_consumer_group_loaded = self._start_timers

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
        if loaded := await self._held.load(group_id):
            return HeartbeatResult.failed(loaded, f"Loading group {group_id} failed.")
        group = self._group_for(request)
        if isinstance(group, HeartbeatResult):
            return group
        if request.member_epoch < 0:
            result = leave(group, request)
        else:
            result = heartbeat(
                group,
                request,
                lookup,
                self.default_assignor,
                self.config.consumer_rack_aware_assignment,
            )
        if result.error != ErrorCode.none:
            return result
        self._after_heartbeat(group, request, result)
        if result.changed:
            error = await self._store(group)
            if error is not None:
                return HeartbeatResult.failed(error, "Storing the group failed.")
        return result

    def _group_for(self, request: HeartbeatRequest) -> ConsumerGroup | HeartbeatResult:
        group_id = request.group_id
        group = self.groups.get(group_id)
        if group is not None:
            return group
        classic = self._held.groups.get(group_id)
        joining = request.member_epoch == 0
        if classic is not None:
            if not joining or not classic.is_(GroupState.EMPTY):
                # Kafka with group.consumer.migration.policy=disabled.
                return HeartbeatResult.failed(
                    ErrorCode.group_id_not_found, f"Group {group_id} is not a consumer group."
                )
            log.info("group %s: the empty classic group becomes a consumer group", group_id)
            self._held.remove_group(classic)
        elif not joining:
            return HeartbeatResult.failed(
                ErrorCode.group_id_not_found, f"Consumer group {group_id} not found."
            )
        group = self.groups[group_id] = ConsumerGroup(group_id)
        return group

    def _after_heartbeat(
        self, group: ConsumerGroup, request: HeartbeatRequest, result: HeartbeatResult
    ) -> None:
        member_id = result.member_id or request.member_id
        member = group.members.get(member_id)
        if member is None or member.epoch == STATIC_LEAVE_EPOCH:
            # Gone; or a static member away for a while: its session timer runs on.
            return
        timers = group.timers_of(member_id)
        if timers.session is not None:
            timers.session.cancel()
        timers.session = self._held.later(
            self.config.consumer_session_timeout_ms, self._session_expired, group, member_id
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
            timers = group.timers_of(member_id)
            timers.session = self._held.later(
                self.config.consumer_session_timeout_ms, self._session_expired, group, member_id
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
        fence(group, member_id)
        # Nobody waits on this write; a failure is logged by the persistence layer.
        self._write(group)

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
