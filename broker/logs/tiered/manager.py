"""The broker's tiered-storage task (Kafka's RemoteLogManager), one per broker, every
``remote.log.manager.task.interval.ms`` and soon after a leadership change:

- a partition's leader copies its rolled segments up to min(high watermark, LSO)
  (``storage.tiered.copier``: the lineage decides where copying resumes, half copies of
  a former leader are cleaned first), then enforces remote retention over the whole log
  and deletes orphans of discarded lineages (``storage.tiered.deleter``). Copying is
  skipped with ``remote.log.copy.disable=true`` and once tiering is being disabled;
- KIP-950: a leader of a DISABLING partition stops copying (retain) or deletes every
  remote segment and moves the log start to the local one (delete), then reports the
  partition done to the controller; it retries until heard, and a new leader (after a
  broker died mid-way) does it again from the image;
- every replica refreshes its view of the tiered part (``view.RemoteView``): fetches
  below the local log read from it, and local retention only deletes what it covers.

Partitions are tended one after another: the work is a few database round trips and
whole-segment uploads, none of it per record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from functools import partial
from typing import TYPE_CHECKING
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.logs.classic.partition import LEADER, ClassicPartition
from broker.logs.tiered.snapshot import parse, segment_state
from broker.logs.tiered.view import EMPTY, RemoteView
from common.background import cancel_and_wait
from controller.image import TIERING_DISABLING, TopicImage
from controller.tiering import COPY_DISABLE, tiering_enabled
from storage.classic.txn_index import AbortedTxn
from storage.tiered.copier import CopyFenced, LocalGap, SegmentCopier, history_of
from storage.tiered.lineage import lineage
from storage.tiered.metadata import RemoteLogMetadataStore, RemoteSegment
from storage.tiered.reader import RemoteReader

if TYPE_CHECKING:
    from broker.logs.classic.replica_manager import ReplicaManager

log = logging.getLogger(__name__)


# Snapshot objects read at once when a replica learns the tiered part's aborted
# transactions (small GETs: latency, not bandwidth, is what they cost).
SNAPSHOT_READS = 8
# Every this many runs of the task, remote segments of deleted topics are swept.
SWEEP_EVERY_RUNS = 20


def _true(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


def has_tiering(topic: TopicImage) -> bool:
    """Whether the topic tiers or once did (its remote data may still be served)."""
    return topic.tiering is not None or tiering_enabled(topic)


class TieringManager:
    def __init__(self, replicas: ReplicaManager, metadata: RemoteLogMetadataStore) -> None:
        broker = replicas.broker
        self.replicas = replicas
        self.metadata = metadata
        self.copier = SegmentCopier(broker.store, metadata, replicas.me)
        self.deleter = self.copier.deleter
        self.reader = RemoteReader(broker.store, broker.cache)
        self.interval = broker.config.remote_log_manager_task_interval_ms / 1000
        # remote.log.storage.system.enable=false: nothing is copied (what is tiered already
        # is still read, and expires by retention).
        self.system_enabled = broker.config.remote_log_storage_system_enable
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        # Topics seen tiering: their remote data goes when they are deleted.
        self.tiered_topics: set[UUID] = set()
        self.runs = 0  # completed passes over the partitions (tests wait on it)

    async def start(self) -> None:
        await self.metadata.start()
        self._tasks.append(asyncio.create_task(self._loop()))

    async def stop(self) -> None:
        await cancel_and_wait(self._tasks)
        await self.metadata.close()

    def wake(self) -> None:
        """A leadership or config change: tend the partitions now, not at the next tick."""
        self._wake.set()

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval)
            self._wake.clear()
            await self.run_once()

    async def run_once(self) -> None:
        if self.runs % SWEEP_EVERY_RUNS == SWEEP_EVERY_RUNS - 1:
            try:
                await self.sweep_deleted_topics()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("sweep of deleted tiered topics failed: %r", exc)
        for p in list(self.replicas.partitions.values()):
            if self.replicas.stopping:
                return
            try:
                await self.tend(p)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                log.warning("%s-%d: tiered storage task failed: %r", p.topic, p.index, exc)
        self.runs += 1

    async def tend(self, p: ClassicPartition) -> None:
        topic = self.replicas.image().topic_by_id(p.topic_id)
        if topic is None or not has_tiering(topic):
            p.remote = EMPTY
            return
        self.tiered_topics.add(p.topic_id)
        if p.role == LEADER:
            await self._lead(p, topic)
        await self.refresh(p)

    async def _lead(self, p: ClassicPartition, topic: TopicImage) -> None:
        epoch = p.leader_epoch
        t = topic.tiering
        if t is not None and t.state == TIERING_DISABLING:
            if p.index not in t.done:
                await self._disable(p, t.generation, t.policy)
        elif (
            self.system_enabled
            and tiering_enabled(topic)
            and not _true(topic.configs.get(COPY_DISABLE))
        ):
            upto = min(p.high_watermark, p.last_stable_offset)
            try:
                copied = await self.copier.copy_rolled(
                    p.log, p.topic_id, p.index, epoch, upto, partial(segment_state, p)
                )
            except LocalGap as exc:
                log.warning("%s-%d: not copying to remote storage: %s", p.topic, p.index, exc)
            except CopyFenced as exc:
                log.info("%s-%d: copy fenced by a newer leader: %s", p.topic, p.index, exc)
                return
            else:
                if copied:
                    log.info(
                        "%s-%d: copied %d segments to remote storage (up to offset %d)",
                        p.topic,
                        p.index,
                        len(copied),
                        copied[-1].end_offset,
                    )
        if p.role != LEADER or p.leader_epoch != epoch:
            return  # deposed meanwhile: retention is the new leader's
        config = p.log.config
        run = await self.deleter.enforce(
            history_of(p.log),
            epoch,
            p.topic_id,
            p.index,
            config.retention_ms,
            config.retention_bytes,
            p.log.untiered_bytes(p.remote.end + 1),
        )
        if run.expired or run.orphans:
            log.info(
                "%s-%d: remote retention deleted %d segments, %d orphans (log start %d)",
                p.topic,
                p.index,
                run.expired,
                run.orphans,
                run.log_start,
            )

    async def _disable(self, p: ClassicPartition, generation: int, policy: str) -> None:
        """KIP-950 on this leader: retain stops copying (done by not copying any more);
        delete deletes the tiered data, the log then starting at the local log start."""
        if policy == "delete":
            await self.metadata.advance_log_start(p.topic_id, p.index, p.log.log_start_offset)
            segments = await self.metadata.list_segments(p.topic_id, p.index)
            await self.deleter.delete_all(segments)
            p.remote = EMPTY
        controller = self.replicas.broker.controller
        assert controller is not None
        result, applied = await controller.client.complete_tiering_disable(
            p.topic_id, p.index, generation
        )
        if result.error_code != ErrorCode.none:
            log.warning(
                "%s-%d: tiering disablement not recorded: %s %s",
                p.topic,
                p.index,
                result.error_code.name,
                result.error_message or "",
            )
            return
        log.info("%s-%d: tiered storage disabled (%s)", p.topic, p.index, policy)
        with contextlib.suppress(TimeoutError):
            await controller.follower.wait_for(applied, 5.0)

    async def refresh_all(self) -> None:
        """Every tiered partition's view, without copying or deleting anything."""
        image = self.replicas.image()
        for p in list(self.replicas.partitions.values()):
            topic = image.topic_by_id(p.topic_id)
            if topic is None or not has_tiering(topic):
                continue
            self.tiered_topics.add(p.topic_id)
            try:
                await self.refresh(p)
                await self.load_tiered_producers(p)
            except Exception as exc:
                log.warning("%s-%d: reading the remote metadata failed: %r", p.topic, p.index, exc)

    async def load_tiered_producers(self, p: ClassicPartition) -> int:
        """A replica opened its log: the producers known only from tiered batches (local
        retention deleted theirs) come from the snapshot of the segment ending below the
        local log, so a retry of their last batches is still recognised. Returns how many."""
        local_start = p.log.log_start_offset
        below = [s for s in p.remote.line.segments if s.end_offset < local_start]
        if not below:
            return 0
        state = parse(await self.reader.producer_snapshot(below[-1]))
        if state.ongoing:
            # Transactions open across the local log's start: their markers in the local log
            # are read again knowing where they began (an abort is then recorded).
            p.reload_transactions(state.ongoing)
        return p.producers.merge_older(state.producers)

    async def load_tiered_aborted(self, p: ClassicPartition) -> int:
        """The aborted transactions of the tiered part, from each lineage segment's snapshot
        (once per replica: a read_committed consumer reading tiered offsets needs them, and
        a replica knows them only from the batches it saw). Returns how many were added."""
        gate = asyncio.Semaphore(SNAPSHOT_READS)

        async def aborted_in(segment: RemoteSegment) -> list[AbortedTxn]:
            async with gate:
                return parse(await self.reader.producer_snapshot(segment)).aborted

        lists = await asyncio.gather(*(aborted_in(s) for s in p.remote.line.segments))
        found = [a for aborted in lists for a in aborted]
        p.tiered_aborted_loaded = True
        return p.txns.merge_aborted(a for a in found if a.last_offset >= p.log_start_offset)

    async def refresh(self, p: ClassicPartition) -> RemoteView:
        """This replica's view of the tiered part, from the remote metadata: the segments
        of its own lineage only (a deposed leader's orphans are never served)."""
        start = await self.metadata.log_start(p.topic_id, p.index)
        segments = await self.metadata.list_segments(p.topic_id, p.index)
        epoch = p.leader_epoch if p.role == LEADER else None
        view = RemoteView(lineage(history_of(p.log), segments, start, epoch), start)
        p.remote = view
        if start > 0:
            # The whole log starts there now: older epochs are forgotten (only there: the
            # epochs of tiered offsets stay, they are this replica's lineage).
            p.log.forget_epochs_before(min(start, p.log.log_start_offset))
        return view

    async def sweep_deleted_topics(self) -> int:
        """Remote segments of topics deleted while every replica of a partition was down
        (no replica saw the deletion to act on it): deleted, with their metadata. A topic
        counts as deleted only when it is missing from an image at least as new as the
        active controller's, read after the segments were listed (a topic exists before
        any of its segments). Returns the segments deleted."""
        listed = await self.metadata.topic_partitions()
        controller = self.replicas.broker.controller
        if not listed or controller is None:
            return 0
        follower = controller.follower
        chunk = await controller.client.metadata(follower.applied, 0, from_leader=True)
        if not await follower.wait_for(chunk.applied, 10.0):
            return 0  # this broker's image lags: not the time to judge
        topics = self.replicas.image().topics
        deleted = 0
        for topic_id, partitions in listed.items():
            if topic_id in topics:
                continue
            for partition in sorted(partitions):
                deleted += await self.forget_partition(topic_id, partition)
            await self.metadata.delete_topics([topic_id])
            log.info("deleted topic %s: %d remote segments deleted", topic_id, deleted)
        return deleted

    async def forget_partition(self, topic_id: UUID, partition: int) -> int:
        """A deleted topic's partition: its remote segments and their metadata go (every
        replica of it does this; deleting twice is harmless). Returns how many."""
        segments = await self.metadata.list_segments(topic_id, partition)
        return await self.deleter.delete_all(segments)
