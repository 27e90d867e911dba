"""The groups a broker coordinates, held in memory: which of them this broker coordinates
(and letting go of those that move when the live brokers change), and their membership
snapshots in the group store, brought back when this broker becomes a group's coordinator
(see :mod:`broker.groups.persistence`). The state machine that drives them is
:mod:`broker.groups.group_coordinator`.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from broker.groups.assignors import DEFAULT_ASSIGNORS, parse_assignors
from broker.groups.consumer_group import ConsumerGroup
from broker.groups.consumer_group_persistence import group_from as consumer_group_from
from broker.groups.consumer_group_persistence import is_consumer_group
from broker.groups.consumer_migration import MigrationPolicy
from broker.groups.group import Cancellable, Group, GroupState, JoinResult, Member, SyncResult
from broker.groups.persistence import GroupPersistence, group_from, snapshot_of
from broker.groups.placement import HasNodeId, coordinator_for
from broker.groups.store_errors import store_error
from storage.groups import GroupSnapshot, GroupStore

log = logging.getLogger(__name__)


class Scheduler(Protocol):
    """What the coordinator needs of an event loop (asyncio's loop is one)."""

    def time(self) -> float: ...

    def call_later(
        self, delay: float, callback: Callable[..., object], *args: Any
    ) -> Cancellable: ...


@dataclass(frozen=True)
class GroupConfig:
    initial_rebalance_delay_ms: int = 3000
    min_session_timeout_ms: int = 6000
    max_session_timeout_ms: int = 1_800_000
    offsets_retention_ms: int = 7 * 24 * 3600 * 1000
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5000
    # The least time between two target computations of a consumer group (KIP-1263). The
    # broker's default is Kafka's 1000 (from_broker); 0, computing at every change, is
    # what the pure tests of the group logic build by hand.
    consumer_assignment_interval_ms: int = 0
    consumer_assignors: tuple[str, ...] = DEFAULT_ASSIGNORS
    consumer_rack_aware_assignment: bool = True
    consumer_migration_policy: MigrationPolicy = MigrationPolicy.BIDIRECTIONAL

    @classmethod
    def from_broker(cls, config: Any) -> GroupConfig:
        return cls(
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            offsets_retention_ms=config.offsets_retention_minutes * 60_000,
            offsets_retention_check_interval_ms=config.offsets_retention_check_interval_ms,
            offset_metadata_max_bytes=config.offset_metadata_max_bytes,
            consumer_session_timeout_ms=config.group_consumer_session_timeout_ms,
            consumer_heartbeat_interval_ms=config.group_consumer_heartbeat_interval_ms,
            consumer_assignment_interval_ms=config.group_consumer_assignment_interval_ms,
            consumer_assignors=parse_assignors(config.group_consumer_assignors),
            consumer_rack_aware_assignment=config.group_consumer_rack_aware_assignment,
            consumer_migration_policy=MigrationPolicy.parse(config.group_consumer_migration_policy),
        )


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class HeldGroups:
    """Membership of the groups this broker coordinates: in memory, with a snapshot in
    ``store`` (when given) for the next coordinator."""

    def __init__(
        self,
        node_id: int,
        live_brokers: Callable[[], Sequence[HasNodeId]],
        config: GroupConfig,
        scheduler: Scheduler | None = None,
        wall_ms: Callable[[], int] = wall_clock_ms,
        store: GroupStore | None = None,
    ) -> None:
        self.node_id = node_id
        self.config = config
        self._live_brokers = live_brokers
        self._scheduler = scheduler
        self._wall_ms = wall_ms
        self.groups: dict[str, Group] = {}
        # KIP-848 groups (broker.groups.consumer_coordinator drives them): one namespace
        # with the classic ones, a group id is in at most one of the two.
        self.consumer_groups: dict[str, ConsumerGroup] = {}
        # Starts the member timers of a consumer group loaded from its snapshot.
        self.on_consumer_group_loaded: Callable[[ConsumerGroup], None] | None = None
        # Whether a group id is a share group's (the broker's share service says): a new
        # classic or consumer group cannot take it, as on Kafka.
        self.share_group: Callable[[str], Awaitable[bool]] | None = None
        self._view: tuple[int, ...] | None = None
        self._persistence = GroupPersistence(store) if store is not None else None
        self._loading: dict[str, asyncio.Future[ErrorCode | None]] = {}
        # Groups coordinated here that have no snapshot: only this broker writes their
        # snapshots while it coordinates them, so there is no need to look again (an
        # OffsetCommit outside group management costs no extra read) until the live
        # brokers change.
        self._absent: set[str] = set()

    # ---------------------------------------------------------------- plumbing

    @property
    def scheduler(self) -> Scheduler:
        if self._scheduler is None:
            self._scheduler = asyncio.get_running_loop()
        return self._scheduler

    def _later(self, delay_ms: int, fn: Callable[..., object], *args: Any) -> Cancellable:
        return self.scheduler.call_later(max(delay_ms, 0) / 1000, fn, *args)

    def later(self, delay_ms: int, fn: Callable[..., object], *args: Any) -> Cancellable:
        """Run ``fn(*args)`` in ``delay_ms`` on the coordinator's scheduler."""
        return self._later(delay_ms, fn, *args)

    @property
    def persistence(self) -> GroupPersistence | None:
        return self._persistence

    def wall_ms(self) -> int:
        return self._wall_ms()

    @staticmethod
    def _future() -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    def failed(self, result: Any) -> asyncio.Future[Any]:
        """A JoinGroup/SyncGroup answered at once (a snapshot could not be loaded)."""
        return self._done(result)

    def _done(self, result: Any) -> asyncio.Future[Any]:
        future = self._future()
        future.set_result(result)
        return future

    @staticmethod
    def _cancel(timer: Cancellable | None) -> None:
        if timer is not None:
            timer.cancel()

    # ---------------------------------------------------------------- ownership

    def coordinator_of(self, group_id: str) -> HasNodeId | None:
        return coordinator_for(group_id, self._live_brokers())

    def owns(self, group_id: str) -> bool:
        self.check_ownership()
        chosen = self.coordinator_of(group_id)
        return chosen is not None and chosen.node_id == self.node_id

    def check_ownership(self) -> None:
        """When the set of live brokers changed, let go of the groups that moved: their
        waiting members are told NOT_COORDINATOR and look for the new coordinator."""
        view = tuple(sorted(b.node_id for b in self._live_brokers()))
        if view == self._view:
            return
        self._view = view
        self._absent.clear()
        for group_id in list(self.groups):
            chosen = self.coordinator_of(group_id)
            if chosen is None or chosen.node_id != self.node_id:
                log.info("group %s moved to broker %s", group_id, chosen and chosen.node_id)
                self._unload(self.groups[group_id], ErrorCode.not_coordinator)
        for group_id in list(self.consumer_groups):
            chosen = self.coordinator_of(group_id)
            if chosen is None or chosen.node_id != self.node_id:
                log.info("group %s moved to broker %s", group_id, chosen and chosen.node_id)
                self.drop_consumer_group(group_id)

    def resign_all(self) -> None:
        """Shutting down: answer every waiting JoinGroup/SyncGroup with NOT_COORDINATOR
        so the members move to the next coordinator at once."""
        for group in list(self.groups.values()):
            self._unload(group, ErrorCode.not_coordinator)
        for group_id in list(self.consumer_groups):
            self.drop_consumer_group(group_id)

    def drop_consumer_group(self, group_id: str) -> None:
        """Forget a consumer group held here (it moved, was deleted or expired): its
        members' timers stop; its next coordinator loads the snapshot."""
        group = self.consumer_groups.pop(group_id, None)
        if group is not None:
            for timers in group.timers.values():
                timers.cancel()
            group.timers.clear()
        self._absent.discard(group_id)

    def _unload(self, group: Group, error: ErrorCode) -> None:
        for member in group.members.values():
            self._cancel(member.heartbeat_timer)
            member.answer_join(JoinResult.failed(error, member.member_id))
            member.answer_sync(SyncResult.failed(error))
        for timer in group.pending_members.values():
            self._cancel(timer)
        self._cancel(group.join_timer)
        self._cancel(group.sync_timer)
        group.transition(GroupState.DEAD, self._wall_ms())
        self.groups.pop(group.group_id, None)
        self._absent.discard(group.group_id)

    def remove_group(self, group: Group) -> None:
        """DeleteGroups (the group is Empty) or expiry: forget it."""
        self._unload(group, ErrorCode.coordinator_not_available)

    def hand_over(self, group: Group) -> None:
        """The classic group became a consumer group (an upgrade): its members waiting on a
        JoinGroup or SyncGroup are told REBALANCE_IN_PROGRESS, so they rejoin the consumer
        group (as Kafka answers them); its timers stop. Its snapshot is overwritten by the
        consumer group's."""
        self._unload(group, ErrorCode.rebalance_in_progress)

    def adopt_downgraded(self, group: Group) -> None:
        """A consumer group became this classic group (a downgrade): hold it, store it,
        and start the rebalance its members rejoin in (GroupCoordinator's)."""
        raise NotImplementedError

    async def is_share_group(self, group_id: str) -> bool:
        """Whether ``group_id``, held here as no classic or consumer group, is a share
        group's (looked up only for a group not held: a new one)."""
        if self.share_group is None or not group_id:
            return False
        if group_id in self.groups or group_id in self.consumer_groups:
            return False
        try:
            return await self.share_group(group_id)
        except Exception as exc:
            # The store away: the group is served as asked (its own store calls answer
            # COORDINATOR_NOT_AVAILABLE if the outage lasts).
            log.warning("looking up whether group %s is a share group failed: %s", group_id, exc)
            return False

    # ---------------------------------------------------------------- snapshots

    async def load(self, group_id: str) -> ErrorCode | None:
        """Before a request on ``group_id``: when this broker coordinates the group but
        does not hold it, bring back its membership snapshot. None when done (or nothing
        to do), else the error to answer the request with."""
        if self._persistence is None or not group_id:
            return None
        if group_id in self.groups or group_id in self.consumer_groups:
            return None
        if not self.owns(group_id) or group_id in self._absent:
            return None
        loading = self._loading.get(group_id)
        if loading is None:
            loading = asyncio.ensure_future(self._load(group_id))
            self._loading[group_id] = loading
            loading.add_done_callback(lambda _: self._loading.pop(group_id, None))
        # Shielded: a request that goes away does not stop the load others wait on.
        return await asyncio.shield(loading)

    async def _load(self, group_id: str) -> ErrorCode | None:
        assert self._persistence is not None
        try:
            snapshot = await self._persistence.load(group_id)
        except Exception as exc:
            return store_error(exc, f"loading group {group_id}")
        if group_id in self.groups or group_id in self.consumer_groups:
            return None
        if not self.owns(group_id):
            return None  # it moved away meanwhile: the request says NOT_COORDINATOR
        if snapshot is None or not snapshot.members:
            self._absent.add(group_id)
            return None
        if is_consumer_group(snapshot):
            group = consumer_group_from(snapshot)
            self.consumer_groups[group_id] = group
            log.info("consumer group %s loaded: %r", group_id, group)
            if self.on_consumer_group_loaded is not None:
                self.on_consumer_group_loaded(group)
            return None
        self._adopt(snapshot)
        return None

    async def snapshots_settled(self) -> None:
        """Wait until the snapshot writes issued so far are done."""
        if self._persistence is not None:
            await self._persistence.settled()

    def _adopt(self, snapshot: GroupSnapshot) -> None:
        group = group_from(snapshot)
        self.groups[group.group_id] = group
        # Each member's session starts now, as in Kafka: a member that does not come
        # back within it is removed and the others rebalance.
        for member in group.members.values():
            self._schedule_heartbeat(group, member)
        log.info(
            "group %s loaded: generation %d, %d members, protocol %s, leader %s",
            group.group_id,
            group.generation_id,
            len(group.members),
            group.protocol_name,
            group.leader_id,
        )

    def _store_snapshot(self, group: Group) -> asyncio.Future[None] | None:
        if self._persistence is None:
            return None
        assignments = {m.member_id: m.assignment for m in group.members.values()}
        return self._persistence.store_group(snapshot_of(group, assignments, self._wall_ms()))

    def _forget_snapshot(self, group: Group) -> None:
        if self._persistence is not None:
            self._persistence.forget_group(group.group_id)

    def _schedule_heartbeat(
        self, group: Group, member: Member, timeout_ms: int | None = None
    ) -> None:
        """The state machine's (GroupCoordinator): a loaded member's session starts now."""
        raise NotImplementedError
