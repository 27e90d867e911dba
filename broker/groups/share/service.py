"""The share-group side of one broker (KIP-932): membership of the share groups it
coordinates, its share sessions, and the share-partition states it changes (shared with
every broker through the coordinator database)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol
from uuid import UUID

from broker.groups.share.group_configs import GroupConfigs
from broker.groups.share.membership import ShareGroups
from broker.groups.share.partition_state import Limits
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


@dataclass(frozen=True, slots=True)
class ShareConfig:
    lock_ms: int = 30_000
    delivery_count_limit: int = 5
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_record_locks: int = 2000

    @classmethod
    def from_broker(cls, config: Any) -> ShareConfig:
        return cls(
            config.group_share_record_lock_duration_ms,
            config.group_share_delivery_count_limit,
            config.group_share_session_timeout_ms,
            config.group_share_heartbeat_interval_ms,
            config.group_share_partition_max_record_locks,
        )

    @property
    def limits(self) -> Limits:
        return Limits(self.lock_ms, self.delivery_count_limit, self.max_record_locks)


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
