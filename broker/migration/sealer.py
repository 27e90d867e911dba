"""The leader's part of a classic → diskless migration: seal each partition it leads.

For every partition of a topic in SEALING that the image does not show sealed yet and
that this broker leads (``p.role == LEADER``), once:

1. ``p.sealed``: the partition refuses appends from now on with NOT_LEADER_OR_FOLLOWER,
   which stock producers retry (idempotent ones keep their sequences: nothing was
   written);
2. wait until every in-sync replica has the whole log (high watermark = log end) and no
   transaction is open in it (last stable offset = high watermark): acks=all produces in
   flight complete, and a transaction never straddles the boundary;
3. boundary = log end; seed the diskless log in the batch coordinator there, with the
   producer states of the classic log (``BatchCoordinator.seed_log``; idempotent);
4. report to the controller (``partition_sealed``), which records it only from the
   current leader at its current epoch.

Once the image has ``PartitionSealed``, produce and fetch route by offset
(``broker.migration.routing``). A leader killed anywhere in between loses nothing: a
report not recorded means the partition is still classic, and the new leader (every
in-sync replica has the log up to the boundary) seals again — with a later boundary if
it took appends meanwhile, which ``seed_log`` allows as long as the diskless log is empty,
and it stays empty until the controller records the seal.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING
from uuid import UUID

from kio.schema.errors import ErrorCode

from controller.image import MIGRATION_SEALING, TO_DISKLESS
from controller.migration import SealReport
from storage.coordinator import PartitionKey, SeededProducerBatch

from ..background import cancel_and_wait
from ..classic.partition import LEADER, ClassicPartition

if TYPE_CHECKING:
    from ..node import Broker

log = logging.getLogger(__name__)

SCAN_S = 0.2
POLL_S = 0.02
RETRY_S = 1.0


class MigrationSealer:
    def __init__(self, broker: Broker) -> None:
        self.broker = broker
        self._running: dict[tuple[UUID, int], asyncio.Task[None]] = {}
        self._retry_at: dict[tuple[UUID, int], float] = {}
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    async def stop(self) -> None:
        await cancel_and_wait([self._task, *self._running.values()])
        self._running.clear()

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(SCAN_S)
            try:
                self.scan()
            except Exception:
                log.exception("migration scan failed")

    def scan(self) -> None:
        """Start a seal for every partition this broker leads that needs one."""
        controller, classic = self.broker.controller, self.broker.classic
        if controller is None or classic is None or classic.stopping:
            return
        now = time.monotonic()
        for topic in controller.image.topics.values():
            m = topic.migration
            if m is None or m.state != MIGRATION_SEALING or m.direction != TO_DISKLESS:
                continue
            for index in topic.partitions:
                key = (topic.topic_id, index)
                if m.boundary(index) is not None or key in self._running:
                    continue
                if self._retry_at.get(key, 0.0) > now:
                    continue
                p = classic.get(topic.topic_id, index)
                if p is None or p.role != LEADER:
                    continue
                task = asyncio.create_task(self._seal(p, m.generation, p.leader_epoch))
                self._running[key] = task
                task.add_done_callback(lambda _t, key=key: self._running.pop(key, None))

    def _still_leading(self, p: ClassicPartition, epoch: int) -> bool:
        classic = self.broker.classic
        return (
            classic is not None
            and not classic.stopping
            and classic.get(p.topic_id, p.index) is p
            and p.role == LEADER
            and p.leader_epoch == epoch
        )

    async def _seal(self, p: ClassicPartition, generation: int, epoch: int) -> None:
        key = (p.topic_id, p.index)
        try:
            done = await self._seal_once(p, generation, epoch)
        except Exception as exc:
            log.warning("%s-%d: sealing for diskless failed: %r", p.topic, p.index, exc)
            done = False
        if not done:
            self._retry_at[key] = time.monotonic() + RETRY_S

    async def _seal_once(self, p: ClassicPartition, generation: int, epoch: int) -> bool:
        controller = self.broker.controller
        assert controller is not None
        p.sealed = True
        while p.high_watermark < p.log.log_end_offset or p.last_stable_offset < p.high_watermark:
            if not self._still_leading(p, epoch):
                return True  # the new leader seals
            await asyncio.sleep(POLL_S)
        if not self._still_leading(p, epoch):
            return True
        boundary = p.log.log_end_offset
        producers = [SeededProducerBatch(*entry) for entry in p.producers.snapshot()]
        start, _hw = await self.broker.coordinator.seed_log(
            PartitionKey(p.topic_id, p.index), boundary, producers
        )
        if start != boundary:
            log.error(
                "%s-%d: the diskless log already starts at %d, not at the boundary %d",
                p.topic,
                p.index,
                start,
                boundary,
            )
            return False
        report = SealReport(
            self.broker.config.node_id,
            p.topic_id,
            p.index,
            generation,
            epoch,
            boundary,
            p.log.size,
        )
        result, applied = await controller.client.partition_sealed(report)
        if result.error_code != ErrorCode.none:
            log.info(
                "%s-%d: seal at %d refused: %s %s",
                p.topic,
                p.index,
                boundary,
                result.error_code.name,
                result.error_message or "",
            )
            return result.error_code in (
                ErrorCode.not_leader_or_follower,
                ErrorCode.fenced_leader_epoch,
            )
        log.info("%s-%d: classic log sealed at %d for diskless", p.topic, p.index, boundary)
        with contextlib.suppress(Exception):
            await controller.follower.wait_for(applied, 5.0)
        # Producers and consumers waiting on this partition look again (now diskless).
        self.broker.watch.wake([(p.topic_id, p.index)])
        return True
