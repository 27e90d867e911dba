"""The group coordinator of one broker, as the broker and the API handlers see it."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Protocol

from broker.groups.consumer_coordinator import ConsumerCoordinator
from broker.groups.group_admin import GroupAdmin
from broker.groups.group_coordinator import GroupCoordinator
from broker.groups.held_groups import GroupConfig, Scheduler, wall_clock_ms
from broker.groups.offsets import GroupOffsets
from broker.groups.placement import HasNodeId
from broker.metadata.view import HandlerView
from common.background import cancel_and_wait
from storage.groups import GroupStore
from storage.outage import OutageLog

log = logging.getLogger(__name__)

# How often the live broker list is compared with the groups held here, besides at
# every group request: a JoinGroup waiting on a group that moved away is answered
# NOT_COORDINATOR within this time even when no other request comes.
OWNERSHIP_CHECK_S = 1.0
# How long shutdown waits for membership snapshots being written.
CLOSE_WRITES_S = 5.0


class GroupService:
    """Membership (``coordinator``: classic groups; ``consumer``: KIP-848 consumer
    groups), committed offsets (``offsets``) and the admin views (``admin``) of the
    groups this broker coordinates."""

    def __init__(
        self,
        node_id: int,
        live_brokers: Callable[[], Sequence[HasNodeId]],
        config: GroupConfig,
        store: GroupStore,
        scheduler: Scheduler | None = None,
        wall_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self.store = store
        self.coordinator = GroupCoordinator(
            node_id, live_brokers, config, scheduler, wall_ms, store
        )
        self.consumer = ConsumerCoordinator(self.coordinator)
        self.offsets = GroupOffsets(self.coordinator, store, config, wall_ms)
        self.admin = GroupAdmin(self.coordinator, self.consumer, store)
        self._ownership_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.store.start()
        await self.offsets.start()
        self._ownership_task = asyncio.create_task(self._ownership_loop())

    def resign_all(self) -> None:
        """First step of shutdown: waiting JoinGroup/SyncGroup requests are answered
        (NOT_COORDINATOR), so the connections can drain."""
        self.coordinator.resign_all()

    async def close(self) -> None:
        await cancel_and_wait([self._ownership_task])
        self._ownership_task = None
        self.coordinator.resign_all()
        await self.offsets.stop()
        try:
            # Assignments being stored are the next coordinator's starting point.
            await asyncio.wait_for(self.coordinator.snapshots_settled(), CLOSE_WRITES_S)
        except TimeoutError:
            log.warning("group snapshot writes still pending at shutdown")
        await self.store.close()

    async def _ownership_loop(self) -> None:
        outage = OutageLog("checking which groups this broker coordinates", log)
        while True:
            await asyncio.sleep(OWNERSHIP_CHECK_S)
            with outage:
                self.coordinator.check_ownership()


class GroupsView(HandlerView, Protocol):
    """What the group handlers use: the metadata view, the access checks and this
    broker's group coordinator."""

    @property
    def groups(self) -> GroupService: ...
