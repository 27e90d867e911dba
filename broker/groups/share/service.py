"""The share-group side of one broker (KIP-932): membership of the share groups it
coordinates, its share sessions, and the share-partition states it changes (shared with
every broker through the coordinator database)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol
from uuid import UUID

from broker.groups.share.group_configs import GroupConfigs, ShareConfig
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
    ) -> None:
        self.config = config
        self.clock_ms = clock_ms
        self.groups = ShareGroups(config.session_timeout_ms, topics)
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
                for group_id, member_id in self.groups.expire(self.clock_ms()):
                    log.info("share group %s: member %s session timed out", group_id, member_id)


class ShareView(HandlerView, Protocol):
    """What the share-group handlers use."""

    @property
    def share(self) -> ShareService: ...
