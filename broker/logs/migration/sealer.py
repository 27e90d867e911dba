"""The leader's part of a migration between classic and diskless: seal each partition it
leads; and every replica's part of a migration to classic: continue the classic log at
the boundary.

Classic → diskless (the classic leader):

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
(``broker.logs.router``). A leader killed anywhere in between loses nothing: a
report not recorded means the partition is still classic, and the new leader (every
in-sync replica has the log up to the boundary) seals again — with a later boundary if
it took appends meanwhile, which ``seed_log`` allows as long as the diskless log is empty,
and it stays empty until the controller records the seal.

Diskless → classic (the partition's leader in the image; its replicas are real, seed 000):
every broker stops appending to the partition once its image shows the migration
(``broker.logs.router``); the leader seals the diskless log in the batch
coordinator at its high watermark (``seal_log``: from then on the coordinator refuses any
batch past it, from a broker that had not yet seen the migration too; refused while a
transaction is open there), and reports the boundary and the diskless log's start. Each
replica then opens (or keeps) its classic log and moves its end to the boundary, refusing
appends until it has loaded the producer states of the diskless log (``on_replica``,
``_continue``); the classic leader then takes the partition's appends from the boundary.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import TYPE_CHECKING
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.logs.classic.partition import LEADER, ClassicPartition
from common.background import cancel_and_wait
from controller.image import MIGRATION_SEALING, TO_CLASSIC, TO_DISKLESS, TopicImage
from controller.migration import SealReport
from storage.coordinator import SeededProducerBatch
from storage.partition_key import PartitionKey

if TYPE_CHECKING:
    from broker.logs.classic.replica_manager import ClassicHost

log = logging.getLogger(__name__)

SCAN_S = 0.2
POLL_S = 0.02
RETRY_S = 1.0
SIZE_CHECK_S = 1.0  # a sealed classic log's size, compared with the recorded one


def classic_bytes(p: ClassicPartition) -> int:
    """A sealed classic log's bytes still read below the boundary: its local segments and
    the remote ones below them (tiered, their local copy deleted)."""
    local_start = p.log.log_start_offset
    tiered = sum(
        s.size
        for s in p.remote.line.segments
        if s.end_offset < local_start and s.end_offset >= p.remote.start >= 0
    )
    return p.log.size + tiered


class MigrationSealer:
    def __init__(self, broker: ClassicHost) -> None:
        self.broker = broker
        self._running: dict[tuple[UUID, int], asyncio.Task[None]] = {}
        self._retry_at: dict[tuple[UUID, int], float] = {}
        self._task: asyncio.Task[None] | None = None
        # Classic replicas continuing at a boundary whose producer states are loaded, by
        # (topic, partition, migration generation).
        self._continued: set[tuple[UUID, int, int]] = set()

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
        me = self.broker.config.node_id
        for topic in controller.image.topics.values():
            m = topic.migration
            if m is None:
                continue
            if m.direction == TO_CLASSIC:
                self._scan_to_classic(topic, me, now)
                continue
            self._scan_sizes(topic, now)
            if m.state != MIGRATION_SEALING:
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

    def _scan_sizes(self, topic: TopicImage, now: float) -> None:
        """The leader of a sealed classic log reports its size when it differs from the
        image's (retention or tiering deleted a segment): "bytes still classic" in
        DescribeConfigs and the controller's metrics is then what is left, on every broker.
        A comparison per partition a second; a report only on a change."""
        m = topic.migration
        classic = self.broker.classic
        assert m is not None and classic is not None
        for index, s in m.sealed:
            key = (topic.topic_id, index)
            if key in self._running or self._retry_at.get(key, 0.0) > now:
                continue
            p = classic.get(topic.topic_id, index)
            if p is None or p.role != LEADER:
                continue
            self._retry_at[key] = now + SIZE_CHECK_S
            if classic_bytes(p) == s.old_bytes:
                continue
            report = SealReport(
                self.broker.config.node_id,
                topic.topic_id,
                index,
                m.generation,
                p.leader_epoch,
                s.boundary,
                classic_bytes(p),
            )
            task = asyncio.create_task(self._report_size(report))
            self._running[key] = task
            task.add_done_callback(lambda _t, key=key: self._running.pop(key, None))

    async def _report_size(self, report: SealReport) -> None:
        controller = self.broker.controller
        assert controller is not None
        try:
            result, applied = await controller.client.partition_sealed(report)
            if result.error_code == ErrorCode.none:
                await controller.follower.wait_for(applied, 5.0)
        except Exception as exc:
            log.info("reporting a sealed classic log's size failed: %r", exc)
        # At most one report a second per partition (refused: a new leader reports its own;
        # answered without a change: this broker's image was behind the controller's).
        self._retry_at[(report.topic_id, report.partition)] = time.monotonic() + RETRY_S

    def _scan_to_classic(self, topic: TopicImage, me: int, now: float) -> None:
        m = topic.migration
        assert m is not None and self.broker.classic is not None
        for index, state in topic.partitions.items():
            key = (topic.topic_id, index)
            if key in self._running or self._retry_at.get(key, 0.0) > now:
                continue
            if m.boundary(index) is None:
                if m.state == MIGRATION_SEALING and state.leader == me:
                    task = asyncio.create_task(
                        self._seal_diskless(
                            topic.name, topic.topic_id, index, m.generation, state.leader_epoch
                        )
                    )
                else:
                    continue
            else:
                p = self.broker.classic.get(topic.topic_id, index)
                if p is None or (topic.topic_id, index, m.generation) in self._continued:
                    continue
                task = asyncio.create_task(self._continue(p, m.generation))
            self._running[key] = task
            task.add_done_callback(lambda _t, key=key: self._running.pop(key, None))

    def on_replica(self, p: ClassicPartition, topic: TopicImage) -> None:
        """Called by the replica manager for every hosted classic replica, before it takes
        the image's role: a replica of a partition sealed for classic continues its log at
        the boundary (the offsets below are in the diskless log, or in an older classic
        log this replica kept), and refuses appends until its producer states are loaded."""
        m = topic.migration
        if m is not None and m.direction == TO_DISKLESS and topic.diskless:
            self._retire(p, m.boundary(p.index))
            return
        if m is None or m.direction != TO_CLASSIC:
            return
        boundary = m.boundary(p.index)
        if boundary is None:
            return
        plog = p.log
        if self._short_of_earlier_seal(p, topic):
            # This replica lacks part of the classic log sealed by the earlier migration to
            # diskless (it was down then): continuing at the boundary would leave a hole
            # below it for good. As a follower it fetches the rest from the leader (a
            # replica that holds it all: ``election.keeps_classic_isr``), whose log jumps
            # from that seal to this boundary, and joins the ISR once caught up.
            pass
        elif plog.log_end_offset < boundary:
            if plog.log_end_offset == plog.log_start_offset:
                plog.truncate_fully_and_start_at(boundary)
            else:
                # Keep the older classic records; an empty segment at the boundary makes
                # it the log end (offsets in between are not in this log: a gap, as a
                # compacted log has them). Redone after a restart that dropped it.
                plog.active.flush()
                plog.segments.append(plog._new_segment(boundary))
            p.high_watermark = max(p.high_watermark, boundary)
            log.info("%s-%d: classic log continues at %d", p.topic, p.index, boundary)
        if (p.topic_id, p.index, m.generation) not in self._continued:
            p.sealed = True

    def _short_of_earlier_seal(self, p: ClassicPartition, topic: TopicImage) -> bool:
        """A follower whose log ends below the seal of the earlier migration to diskless,
        whose sealed log has records (the leader does not: it continues at the boundary
        whatever it holds, so the partition takes appends)."""
        m = topic.migration  # to classic (on_replica's caller checked)
        state = topic.partitions.get(p.index)
        first = None if m is None else m.classic_seal_with_records(p.index)
        if first is None or state is None:
            return False
        return p.log.log_end_offset < first.boundary and state.leader != self.broker.config.node_id

    @staticmethod
    def _retire(p: ClassicPartition, boundary: int | None) -> None:
        """A sealed classic log of a topic now diskless: its last segment is closed too (an
        empty one at the boundary ends the log), so retention deletes every segment with
        records once they expire, and then the earliest offset is the diskless log's."""
        plog = p.log
        if boundary is not None and plog.log_end_offset == boundary and plog.active.size:
            plog.roll()

    async def _continue(self, p: ClassicPartition, generation: int) -> None:
        """Load the diskless log's producer states into a replica continuing at the
        boundary, then let it take appends."""
        key = (p.topic_id, p.index)
        try:
            sealed = await self.broker.coordinator.seal_log(PartitionKey(p.topic_id, p.index))
        except Exception as exc:
            log.warning("%s-%d: reading the sealed diskless log failed: %r", p.topic, p.index, exc)
            self._retry_at[key] = time.monotonic() + RETRY_S
            return
        if sealed.error:
            log.warning("%s-%d: sealed diskless log: error %d", p.topic, p.index, sealed.error)
            self._retry_at[key] = time.monotonic() + RETRY_S
            return
        # The classic log's own state of a producer is newer only if it took batches of it
        # from the boundary on (before a restart); older state (an earlier classic log below
        # the diskless part) is replaced by the diskless one.
        newest: dict[int, int] = {}
        for pid, _epoch, _first, _last, _base, last_offset in p.producers.retained_batches():
            newest[pid] = max(newest.get(pid, -1), last_offset)
        keep = {pid for pid, last in newest.items() if last >= sealed.boundary}
        for pid in {b.producer_id for b in sealed.producers} - keep:
            p.producers.forget(pid)
        for b in sealed.producers:
            if b.producer_id not in keep:
                count = (b.last_sequence - b.base_sequence) % (1 << 31) + 1
                p.producers.update(
                    b.producer_id, b.producer_epoch, b.base_sequence, count, b.base_offset
                )
        self._continued.add((p.topic_id, p.index, generation))
        p.sealed = False
        self.broker.watch.wake([(p.topic_id, p.index)])

    async def _seal_diskless(
        self, name: str, topic_id: UUID, index: int, generation: int, leader_epoch: int
    ) -> None:
        controller = self.broker.controller
        assert controller is not None
        key = (topic_id, index)
        done = False
        try:
            sealed = await self.broker.coordinator.seal_log(PartitionKey(topic_id, index))
            if sealed.error:
                log.info("%s-%d: not sealed yet: error %d", name, index, sealed.error)
            else:
                report = SealReport(
                    self.broker.config.node_id,
                    topic_id,
                    index,
                    generation,
                    leader_epoch,
                    sealed.boundary,
                    sealed.byte_size,
                    sealed.log_start_offset,
                )
                result, applied = await controller.client.partition_sealed(report)
                done = result.error_code in (
                    ErrorCode.none,
                    ErrorCode.not_leader_or_follower,
                    ErrorCode.fenced_leader_epoch,
                )
                if result.error_code == ErrorCode.none:
                    log.info("%s-%d: diskless log sealed at %d", name, index, sealed.boundary)
                    with contextlib.suppress(Exception):
                        await controller.follower.wait_for(applied, 5.0)
        except Exception as exc:
            log.warning("%s-%d: sealing the diskless log failed: %r", name, index, exc)
        if not done:
            self._retry_at[key] = time.monotonic() + RETRY_S

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
        if not p.sealed:
            log.info("%s-%d: sealing for diskless: appends stopped", p.topic, p.index)
        p.sealed = True
        while p.high_watermark < p.log.log_end_offset or p.last_stable_offset < p.high_watermark:
            if not self._still_leading(p, epoch):
                return True  # the new leader seals
            await asyncio.sleep(POLL_S)
        if not self._still_leading(p, epoch):
            return True
        boundary = p.log.log_end_offset
        producers = [SeededProducerBatch(*entry) for entry in p.producers.retained_batches()]
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
            classic_bytes(p),
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
