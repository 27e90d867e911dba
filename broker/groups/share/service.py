"""The share-group side of one broker (KIP-932): membership of the share groups it
coordinates (stored for the next coordinator: ``held``), its share sessions, and the
share-partition states it changes (shared with every broker through the coordinator
database)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol
from uuid import UUID

from broker.groups.share.group_configs import GroupConfigs, ShareConfig
from broker.groups.share.held import HeldShareGroups
from broker.groups.share.membership import ShareGroups
from broker.groups.share.partitions import SharePartitions
from broker.groups.share.sessions import ShareSessions
from broker.metadata.view import HandlerView
from common.background import cancel_and_wait
from storage.outage import OutageLog
from storage.share_groups import ShareStateStore

log = logging.getLogger(__name__)
SWEEP_S = 1.0


def wall_ms() -> int:
    return int(time.time() * 1000)


class ShareService:
    def __init__(
        self,
        config: ShareConfig,
        store: ShareStateStore,
        topics: Callable[[Sequence[str]], Mapping[str, tuple[UUID, int]]],
        clock_ms: Callable[[], int] = wall_ms,
        owns: Callable[[str], bool] = lambda group_id: True,
    ) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.groups = ShareGroups(config.session_timeout_ms, topics, config.assignment_interval_ms)
        # Membership stored for the next coordinator; ``owns``: whether this broker
        # coordinates a group (broker.groups.placement).
        self.held = HeldShareGroups(self.groups, store, owns)
        self.sessions = ShareSessions()
        self.partitions = SharePartitions(store)
        self.configs = GroupConfigs(config, store)
        self.store = store
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.store.start()
        self._sweeper = asyncio.create_task(self._sweep())

    async def close(self) -> None:
        await cancel_and_wait([self._sweeper])
        self._sweeper = None
        await self.store.close()

    async def load(self, group_id: str) -> int | None:
        """Bring the group's stored membership back when this broker coordinates it and
        does not hold it yet; None when done, else the error to answer with."""
        settings = await self.configs.settings(group_id)
        return await self.held.load(group_id, self.clock_ms(), settings.session_timeout_ms)

    async def is_share_group(self, group_id: str) -> bool:
        """Whether ``group_id`` is a share group's (held here, or stored): a consumer or
        classic group cannot take it (Kafka's GROUP_ID_NOT_FOUND, INCONSISTENT_GROUP_PROTOCOL)."""
        return group_id in self.groups.groups or await self.store.has_group(group_id)

    async def topics_deleted(self, topic_ids: Sequence[UUID]) -> None:
        """DeleteTopics: the share-partitions of these topics go with them (only logged on
        a failure, as committed offsets: rows keyed by a deleted topic's id are never read)."""
        try:
            await self.store.delete_topics(topic_ids)
        except Exception:
            log.exception("removing share-partition state of deleted topics %s failed", topic_ids)

    async def _sweep(self) -> None:
        outage = OutageLog("expiring share-group members", log)
        while True:
            await asyncio.sleep(SWEEP_S)
            with outage:
                for group_id, member_id in await self.held.expire(self.clock_ms()):
                    log.info("share group %s: member %s session timed out", group_id, member_id)


class ShareView(HandlerView, Protocol):
    """What the share-group handlers use."""

    @property
    def share(self) -> ShareService: ...
