"""The broker's tiered-storage task (Kafka's RemoteLogManager), one per broker, every
``remote.log.manager.task.interval.ms`` and soon after a leadership change:

- a partition's leader copies its rolled segments up to min(high watermark, LSO)
  (``storage.tiered.copier``: the lineage decides where copying resumes, half copies of
  a former leader are cleaned first), then enforces remote retention over the whole log
  and deletes orphans of discarded lineages (``storage.tiered.deleter``). Copying is
  skipped with ``remote.log.copy.disable=true`` and once tiering is being disabled;
- KIP-950: a leader of a DISABLING partition does not copy; when the controller's
  DisableRemoteTopic for it arrives (in a heartbeat answer, with the leader epoch: stale
  ones are refused), it acts at once, not at the next run: stops copying for good
  (retain) or deletes every remote segment and moves the log start to the local one
  (delete), and its next heartbeat, sent at once, acknowledges it. The controller sends
  the request until acknowledged, to whichever broker leads the partition then;
- every replica refreshes its view of the tiered part (``view.RemoteView``): fetches
  below the local log read from it, and local retention only deletes what it covers.

Partitions are tended one after another: the work is a few database round trips and
whole-segment uploads, none of it per record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.logs.classic.partition import LEADER, ClassicPartition
from broker.logs.classic.remote_view import EMPTY, RemoteView
from broker.logs.tiered.follower import start_after_tiered
from broker.logs.tiered.snapshot import parse, segment_state
from common.background import cancel_and_wait
from controller.image import TopicImage
from controller.requests import DisableRemoteAck, DisableRemoteTopic
from controller.tiering import COPY_DISABLE, tiering_enabled
from controller.tiering_state import TIERING_DISABLING
from storage.classic.txn_index import AbortedTxn
from storage.tiered.copier import CopyFenced, LocalGap, SegmentCopier, history_of
from storage.tiered.lineage import FollowerStart, lineage
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


# A DisableRemoteTopic request and its answer: (topic id, partition, leader epoch, generation).
RequestKey = tuple[UUID, int, int, int]


def _key(r: DisableRemoteTopic | DisableRemoteAck) -> RequestKey:
    return (r.topic_id, r.partition, r.leader_epoch, r.generation)


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
        # One partition's copying, retention and disablement at a time: a DisableRemoteTopic
        # acted on at once must not race a copy of the same partition.
        self._locks: dict[tuple[UUID, int], asyncio.Lock] = {}
        # KIP-950: the generation whose disablement this leader acted on, per partition (its
        # image may not say DISABLING yet: it must not copy again meanwhile).
        self._disabled: dict[tuple[UUID, int], int] = {}
        self._disabling: dict[RequestKey, asyncio.Task[None]] = {}
        self._answers: dict[RequestKey, DisableRemoteAck] = {}
        # Sends a heartbeat now (the membership's), so an answer does not wait an interval.
        self.heartbeat_soon: Callable[[], None] = lambda: None

    async def start(self) -> None:
        await self.metadata.start()
        self._tasks.append(asyncio.create_task(self._loop()))

    async def stop(self) -> None:
        await cancel_and_wait([*self._tasks, *self._disabling.values()])
        await self.metadata.close()

    def _lock(self, p: ClassicPartition) -> asyncio.Lock:
        return self._locks.setdefault((p.topic_id, p.index), asyncio.Lock())

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

    def tiers(self, p: ClassicPartition) -> bool:
        """Whether ``p``'s topic tiers or once did (``has_tiering``), by this broker's image."""
        topic = self.replicas.image().topic_by_id(p.topic_id)
        return topic is not None and has_tiering(topic)

    async def tend(self, p: ClassicPartition) -> None:
        topic = self.replicas.image().topic_by_id(p.topic_id)
        if topic is None or not has_tiering(topic):
            p.remote = EMPTY
            return
        self.tiered_topics.add(p.topic_id)
        if p.role == LEADER:
            async with self._lock(p):
                await self._lead(p, topic)
        await self.refresh(p)

    async def _lead(self, p: ClassicPartition, topic: TopicImage) -> None:
        epoch = p.leader_epoch
        t = topic.tiering
        disabled = self._disabled.get((p.topic_id, p.index))
        if disabled is not None and t is not None and t.generation > disabled:
            del self._disabled[(p.topic_id, p.index)]  # enabled again since
            disabled = None
        if (
            disabled is None
            # DISABLING: the controller's DisableRemoteTopic does the rest.
            and (t is None or t.state != TIERING_DISABLING)
            and self.system_enabled
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

    # ---------------------------------------------------------------- KIP-950

    def on_disable_remote(self, requests: Sequence[DisableRemoteTopic]) -> None:
        """The controller's DisableRemoteTopic requests (a heartbeat answer): each acted on
        at once, in its own task; a repeat of one running or answered is not run again."""
        for r in requests:
            if _key(r) in self._disabling or _key(r) in self._answers:
                continue
            self._disabling[_key(r)] = asyncio.create_task(self._disable_and_answer(r))

    def answers(self) -> list[DisableRemoteAck]:
        return list(self._answers.values())

    def answered(self, acks: Sequence[DisableRemoteAck]) -> None:
        """The controller heard these (recorded them, or refused them for good)."""
        for a in acks:
            self._answers.pop(_key(a), None)

    async def _disable_and_answer(self, r: DisableRemoteTopic) -> None:
        try:
            error = await self.disable_remote(r)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("%s-%d: disabling tiered storage failed: %r", r.topic_id, r.partition, exc)
            error = ErrorCode.kafka_storage_error
        finally:
            self._disabling.pop(_key(r), None)
        self._answers[_key(r)] = DisableRemoteAck(
            r.topic_id, r.partition, r.leader_epoch, r.generation, error
        )
        if error == ErrorCode.none:
            # A refusal is answered with the next regular heartbeat: the controller sends
            # the request again with it, and a tight loop would help no one.
            self.heartbeat_soon()

    async def disable_remote(self, r: DisableRemoteTopic) -> ErrorCode:
        """KIP-950 on this leader, at the controller's request: retain stops copying (for
        this generation, whatever the image says meanwhile); delete also deletes the tiered
        data, the log then starting at the local log start. Refused unless this broker leads
        the partition at the request's leader epoch."""
        p = self.replicas.partitions.get((r.topic_id, r.partition))
        if p is None or p.role != LEADER:
            return ErrorCode.not_leader_or_follower
        if p.leader_epoch != r.leader_epoch:
            return (
                ErrorCode.fenced_leader_epoch
                if r.leader_epoch < p.leader_epoch
                else ErrorCode.unknown_leader_epoch
            )
        async with self._lock(p):
            self._disabled[(p.topic_id, p.index)] = r.generation
            if r.policy == "delete":
                await self.metadata.advance_log_start(p.topic_id, p.index, p.log.log_start_offset)
                segments = await self.metadata.list_segments(p.topic_id, p.index)
                await self.deleter.delete_all(segments)
                p.remote = EMPTY
        log.info(
            "%s-%d: tiered storage disabled (%s) at the controller's request",
            p.topic,
            p.index,
            r.policy,
        )
        return ErrorCode.none

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

    async def start_follower(self, p: ClassicPartition, start: FollowerStart) -> bool:
        return await start_after_tiered(p, start, self.reader)

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
