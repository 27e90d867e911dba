"""One classic partition replica on this broker: its local log and its role.

As leader it assigns offsets, tracks followers (``replication.leader.LeaderState``),
moves the high watermark and completes acks=all produces once the high watermark passes
them. As follower it appends what its leader's Fetch answers carry and keeps the leader's
high watermark. The role follows the metadata image (``ReplicaManager.reconcile``).

Everything here is synchronous and runs on the event loop: appends are page-cache writes.
"""

from __future__ import annotations

import asyncio
import logging
import mmap
import os
import time
from collections.abc import Callable
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.logs.classic.producer_state import ProducerState, marker_behind, producer_fields
from broker.logs.classic.remote_view import EMPTY, RemoteView
from broker.logs.partition_log import PartitionResult
from controller.image import PartitionState
from protocol.control_batch import marker_batch
from protocol.record_scan import first_at_or_after, max_timestamp_record
from protocol.records import (
    CONTROL_BIT,
    TRANSACTIONAL_BIT,
    BatchHeader,
    parse_batches,
    stamp_log_append_time,
)
from replication.leader import LeaderState, Progress
from storage.classic.batches import StoredBatch, walk
from storage.classic.log import Log, OffsetOutOfRange
from storage.classic.txn_index import TxnIndex, batch_txn_fields, marker_coordinator_epoch
from storage.coordinator import EARLIEST_TIMESTAMP, LATEST_TIMESTAMP, MAX_TIMESTAMP

log = logging.getLogger(__name__)

# ListOffsets' special timestamps of tiered storage (KIP-405, KIP-1005).
EARLIEST_LOCAL_TIMESTAMP = -4
LATEST_TIERED_TIMESTAMP = -5

LEADER = "leader"
FOLLOWER = "follower"
OFFLINE = "offline"
HW_CHECKPOINT = (
    "high-watermark-checkpoint"  # a replica without a leader to follow (or being deleted)
)


def now_ms() -> float:
    return time.time() * 1000


class ClassicPartition:
    def __init__(
        self, topic_id: UUID, topic: str, index: int, plog: Log, me: int, lag_max_ms: int
    ) -> None:
        self.topic_id = topic_id
        self.topic = topic
        self.index = index
        self.log = plog
        self.me = me
        self.lag_max_ms = lag_max_ms
        self.role = OFFLINE
        self.leader = -1
        self.leader_epoch = -1
        self.partition_epoch = -1
        self.replicas: tuple[int, ...] = ()
        self.isr: tuple[int, ...] = ()
        self.leader_state: LeaderState | None = None
        # As a follower: the leader's high watermark minus this log's end after the last
        # fetch (Kafka's FetcherLagMetrics; the broker exports the largest, MaxLag).
        self.fetcher_lag = 0
        # Checkpointed every second and on close (Kafka: replication-offset-checkpoint), so a
        # restarted leader does not show consumers a high watermark back at the log start.
        self._hw_path = os.path.join(plog.dir, HW_CHECKPOINT)
        self.high_watermark = self._read_high_watermark()
        self._hw_written = self.high_watermark
        # A follower must cut a possibly divergent tail (OffsetForLeaderEpoch) before it
        # fetches from a new leader.
        self.needs_truncation = False
        # acks=all produces: (last offset, future); completed when the HW passes them.
        # (last offset, the answer once replicated, its future): acks=all produces waiting
        # for the high watermark
        self._waiters: list[tuple[int, PartitionResult, asyncio.Future[PartitionResult]]] = []
        # An ISR change asked of the controller and not answered yet (one at a time).
        self.isr_change_pending = False
        self.isr_retry_at = 0.0  # ms: a refused ISR change is not asked again before
        # Sealed by a migration to diskless (broker/logs/migration): no appends here any more.
        self.sealed = False
        self.producers = ProducerState()
        self.txns = TxnIndex()
        # Tiered storage: the remote segments of this replica's lineage (refreshed by
        # broker.logs.tiered.manager); EMPTY for a topic that never tiered.
        self.remote: RemoteView = EMPTY
        # Whether the aborted transactions of the tiered part were read from its segments
        # (broker.logs.tiered.manager.load_tiered_aborted), after the local log's.
        self.tiered_aborted_loaded = False
        self._load_producers()

    @property
    def min_isr(self) -> int:
        """min.insync.replicas as it applies here: never more than the replicas there are
        (Kafka's effectiveMinIsr), so a topic asking more than its replication factor still
        takes acks=all writes."""
        return min(self.log.config.min_insync_replicas, max(len(self.replicas), 1))

    @property
    def under_min_isr(self) -> bool:
        return len(self.isr) < self.min_isr

    @property
    def log_start_offset(self) -> int:
        """The whole log's start: the first tiered offset when the tiered part reaches the
        local log without a gap, else the local log start (``log.log_start_offset``)."""
        local = self.log.log_start_offset
        first = self.remote.start
        if first < 0 or self.remote.end + 1 < local:
            return local
        return min(first, local)

    def reload_transactions(self, ongoing_before: dict[int, int]) -> None:
        """The transactions again, with those open where the local log starts (a restarted
        replica learns them from the tiered part only after opening its log)."""
        self._load_producers(producers=False, ongoing_before=ongoing_before)

    def is_remote(self, offset: int) -> bool:
        """Whether ``offset`` is served from a remote segment (below the local log)."""
        return offset < self.log.log_start_offset and self.log_start_offset <= offset

    # ---------------------------------------------------------------- state changes

    def _load_producers(
        self, producers: bool = True, ongoing_before: dict[int, int] | None = None
    ) -> None:
        """Producer state and transactions from the log's batch headers (the transaction
        index alone after a truncation: the producer state cuts itself). ``ongoing_before``:
        transactions already open where the local log starts (known from the tiered part),
        so that their markers in the local log are understood."""
        self.txns.clear()
        self.txns.ongoing.update(ongoing_before or {})
        self.tiered_aborted_loaded = False
        # Headers only, through a mapping: a 1 GiB segment is not read into memory.
        for segment in self.log.segments:
            if segment.size == 0:
                continue
            with (
                open(segment.path, "rb") as f,
                mmap.mmap(f.fileno(), segment.size, access=mmap.ACCESS_READ) as mapped,
            ):
                data = memoryview(mapped)
                try:
                    for b in walk(data, check_crc=False):
                        self._observe(data[b.position : b.position + b.size], b, producers)
                finally:
                    data.release()

    def _observe(self, batch: memoryview, b: StoredBatch, producers: bool = True) -> None:
        """One batch now in the log (loaded, or copied from the leader): per batch, never
        per record."""
        attributes, pid, kind = batch_txn_fields(batch)
        self.txns.observe(attributes, pid, kind, b.base_offset, b.last_offset)
        if not producers:
            return
        if attributes & TRANSACTIONAL_BIT:
            # Its transaction here is open (data) or over (a marker), as Kafka clears a
            # verification whatever wrote the batch (a replica copying it too).
            self.producers.end_verification(pid)
        if attributes & CONTROL_BIT:
            self.producers.fence(pid, producer_fields(batch)[1])
            self.producers.marker(pid, marker_coordinator_epoch(batch), b.base_offset)
        else:
            pid, epoch, seq = producer_fields(batch)
            self.producers.update(pid, epoch, seq, b.last_offset - b.base_offset + 1, b.base_offset)

    def apply(self, state: PartitionState, on_change: Callable[[ClassicPartition], None]) -> None:
        """The image's view of this partition changed (or is seen the first time)."""
        if state.leader_epoch < max(self.leader_epoch, self.log.epochs.latest_epoch):
            # An image older than what this replica already knows (its log holds a newer
            # leader epoch): acting on it would make this broker a leader of the past and
            # rewrite its epoch history (Kafka ignores a stale LeaderAndIsr the same way).
            log.warning(
                "%s-%d: ignoring a stale view of the partition (leader epoch %d, this "
                "replica knows %d)",
                self.topic,
                self.index,
                state.leader_epoch,
                max(self.leader_epoch, self.log.epochs.latest_epoch),
            )
            return
        self.replicas, self.isr = state.replicas, state.isr
        new_epoch = state.leader_epoch != self.leader_epoch or state.leader != self.leader
        self.partition_epoch = state.partition_epoch
        if state.leader == self.me:
            if new_epoch or self.role != LEADER:
                self._become_leader(state)
                on_change(self)
            else:
                ls = self.leader_state
                assert ls is not None
                ls.isr = set(state.isr)
                ls.replicas = list(state.replicas)
                for r in state.replicas:
                    # A reassignment's new replica: tracked from now on.
                    if r != self.me and r not in ls.progress:
                        ls.progress[r] = Progress(-1, now_ms())
                self.isr_change_pending = False
                self._advance()
        else:
            if new_epoch or self.role == LEADER:
                self._become_follower(state)
                on_change(self)
        self.leader, self.leader_epoch = state.leader, state.leader_epoch

    def _become_leader(self, state: PartitionState) -> None:
        end = self.log.log_end_offset
        # The epoch starts at this leader's log end (KIP-101): followers truncate to it.
        self.log.epochs.assign(state.leader_epoch, end)
        self.role = LEADER
        self.leader_state = LeaderState(
            self.me,
            list(state.replicas),
            set(state.isr),
            end,
            min(self.high_watermark, end),
            now_ms(),
            self.lag_max_ms,
        )
        self.isr_change_pending = False
        self.needs_truncation = False
        self.high_watermark = self.leader_state.high_watermark
        self._advance()
        log.info(
            "%s-%d: leader at epoch %d (log end %d)",
            self.topic,
            self.index,
            state.leader_epoch,
            end,
        )

    def _become_follower(self, state: PartitionState) -> None:
        self.role = FOLLOWER if state.leader >= 0 else OFFLINE
        self.leader_state = None
        self.needs_truncation = True
        self.fail_waiters(ErrorCode.not_leader_or_follower)

    def fail_waiters(self, error: ErrorCode) -> None:
        waiters, self._waiters = self._waiters, []
        for _last, _base, future in waiters:
            if not future.done():
                future.set_result(PartitionResult(int(error)))

    def close(self) -> None:
        self.fail_waiters(ErrorCode.not_leader_or_follower)
        self.role = OFFLINE
        self.log.close()
        self.checkpoint_high_watermark()

    def _read_high_watermark(self) -> int:
        start, end = self.log.log_start_offset, self.log.log_end_offset
        try:
            with open(self._hw_path) as f:
                return max(start, min(int(f.read().strip()), end))
        except (OSError, ValueError):
            return start

    def checkpoint_high_watermark(self) -> None:
        if self.high_watermark == self._hw_written:
            return
        tmp = self._hw_path + ".tmp"
        try:
            with open(tmp, "w") as f:
                f.write(str(self.high_watermark))
            os.replace(tmp, self._hw_path)
            self._hw_written = self.high_watermark
        except OSError as exc:  # a deleted partition's directory, a full disk: next time
            log.debug("%s-%d: high watermark checkpoint: %r", self.topic, self.index, exc)

    # ---------------------------------------------------------------- leader: produce

    def append(
        self,
        records: memoryview,
        batches: list[BatchHeader],
        log_append_time: bool,
        acks: int,
        timeout_ms: int,
    ) -> PartitionResult | asyncio.Future[PartitionResult]:
        if self.role != LEADER:
            return PartitionResult(int(ErrorCode.not_leader_or_follower))
        if acks == -1 and self.under_min_isr:
            # With the log start offset: Kafka's answer to an append refused by the log.
            return PartitionResult(
                int(ErrorCode.not_enough_replicas), log_start_offset=self.log_start_offset
            )
        first = batches[0]
        if first.producer_id >= 0:
            last_seq = first.base_sequence + sum(b.record_count for b in batches) - 1
            error, duplicate = self.producers.check(
                first.producer_id, first.producer_epoch, first.base_sequence, last_seq
            )
            if error is not None:
                # With the log start offset, as Kafka answers a sequence or epoch refusal.
                return PartitionResult(int(error), log_start_offset=self.log_start_offset)
            if duplicate is not None:
                # A retry of a batch already written: nothing appended, answered with its
                # original offset, and under acks=all only once the high watermark has
                # passed it, as the original would have been (Kafka's delayed produce
                # waits for the duplicate's last offset too). Answering at once would
                # acknowledge a batch that only this leader may hold.
                base, last = duplicate
                result = PartitionResult(
                    0, base, self._batch_timestamp(base), self.log_start_offset
                )
                if acks != -1 or self.high_watermark > last:
                    return result
                return self._wait_for_high_watermark(last, result, timeout_ms)
        append_time = -1
        if log_append_time:
            append_time = int(now_ms())
            stamped = b"".join(
                stamp_log_append_time(records[b.offset : b.offset + b.size], append_time)
                for b in batches
            )
            records = memoryview(stamped)
            pos = 0
            moved = []
            for b in batches:
                moved.append(b._replace(offset=pos))
                pos += b.size
            batches = moved
        base, last_offset = self.log.append_as_leader(records, batches, self.leader_epoch)
        offset = base
        for b in batches:
            self.producers.update(
                b.producer_id, b.producer_epoch, b.base_sequence, b.record_count, offset
            )
            if b.is_transactional:
                # Clients never send control batches (validated): data of a transaction.
                self.txns.observe(b.attributes, b.producer_id, -1, offset, offset)
                self.producers.end_verification(b.producer_id)
            offset += b.record_count
        self._advance()
        result = PartitionResult(0, base, append_time, self.log_start_offset)
        if acks != -1 or self.high_watermark > last_offset:
            return result
        return self._wait_for_high_watermark(last_offset, result, timeout_ms)

    def _batch_timestamp(self, offset: int) -> int:
        """What Kafka answers a retry of the batch at ``offset`` with as its log append
        time: the batch's timestamp as written (its BatchMetadata), the log append time
        or the batch's max timestamp. Read from the log: duplicates are rare."""
        try:
            batch = next(iter(walk(self.log.read(offset, 1, min_one=True), check_crc=False)))
        except (OffsetOutOfRange, StopIteration):
            return -1
        return batch.max_timestamp

    def append_marker(
        self, producer_id: int, producer_epoch: int, commit: bool, coordinator_epoch: int
    ) -> PartitionResult | asyncio.Future[PartitionResult]:
        """WriteTxnMarkers on the leader: the COMMIT/ABORT control batch ends the producer's
        transaction here; answered, as Kafka does, once it is replicated to the ISR.

        ``coordinator_epoch`` >= 1 is the transaction's number (its id's completion count,
        storage.transactions): a marker numbered below the producer's last one here is a
        late copy of an earlier transaction's (a request that waited on a connection the
        coordinator gave up on while it re-sent): appended now it would end the producer's
        next transaction in this partition, so it is refused as Kafka refuses an older
        coordinator epoch (TRANSACTION_COORDINATOR_FENCED). The same number again is a
        repeat of the marker already in the log: answered once that one is replicated,
        nothing appended."""
        if self.role != LEADER:
            return PartitionResult(int(ErrorCode.not_leader_or_follower))
        if producer_epoch < self.producers.epoch_of(producer_id):
            return PartitionResult(int(ErrorCode.invalid_producer_epoch))
        last = self.producers.last_marker(producer_id)
        if last is not None and coordinator_epoch >= 1:
            number, at = last
            behind = marker_behind(coordinator_epoch, number)
            if behind > 0:
                return PartitionResult(int(ErrorCode.transaction_coordinator_fenced))
            if behind == 0:
                done = PartitionResult(0, at, -1, self.log_start_offset)
                if self.high_watermark > at:
                    return done
                return self._wait_for_high_watermark(at, done, 30_000)
        data = marker_batch(producer_id, producer_epoch, commit, int(now_ms()), coordinator_epoch)
        view = memoryview(data)
        batches = parse_batches(view, len(data))
        base, last_offset = self.log.append_as_leader(view, batches, self.leader_epoch)
        self.producers.fence(producer_id, producer_epoch)
        self.producers.marker(producer_id, coordinator_epoch, base)
        self.producers.end_verification(producer_id)
        self.txns.observe(batches[0].attributes, producer_id, int(commit), base, last_offset)
        self._advance()
        result = PartitionResult(0, base, -1, self.log_start_offset)
        if self.high_watermark > last_offset:
            return result
        return self._wait_for_high_watermark(last_offset, result, 30_000)

    def _wait_for_high_watermark(
        self, last_offset: int, result: PartitionResult, timeout_ms: int
    ) -> asyncio.Future[PartitionResult]:
        future: asyncio.Future[PartitionResult] = asyncio.get_running_loop().create_future()
        self._waiters.append((last_offset, result, future))
        loop = asyncio.get_running_loop()
        handle = loop.call_later(
            max(timeout_ms, 0) / 1000,
            lambda: (
                future.done()
                or future.set_result(PartitionResult(int(ErrorCode.request_timed_out)))
            ),
        )
        future.add_done_callback(lambda _f: handle.cancel())
        return future

    def _advance(self) -> None:
        """Recompute the high watermark; complete the produces it passed."""
        if self.leader_state is None:
            return
        if self.under_min_isr:
            # Kafka 4 (KIP-966, Partition.maybeIncrementLeaderHW): with fewer in the ISR than
            # min.insync.replicas nothing more counts as committed, so an acks=1 write is not
            # shown to consumers before enough replicas hold it, and acks=all waiters stay
            # until the ISR is back (or their timeout).
            return
        hw = self.leader_state.advance_high_watermark(self.log.log_end_offset)
        self.high_watermark = hw
        if not self._waiters or self._waiters[0][0] >= hw:
            return
        done = [w for w in self._waiters if w[0] < hw]
        self._waiters = [w for w in self._waiters if w[0] >= hw]
        # Kafka's NOT_ENOUGH_REPLICAS_AFTER_APPEND (the ISR shrank below the minimum after
        # the append) cannot arise here: the high watermark does not pass a batch then.
        for _last, result, future in done:
            if not future.done():
                # The answer as appended (its log append time on a LogAppendTime topic, a
                # duplicate's original timestamp), with the log start of now.
                future.set_result(result._replace(log_start_offset=self.log_start_offset))

    # ---------------------------------------------------------------- leader: fetch

    @property
    def last_stable_offset(self) -> int:
        return self.txns.last_stable_offset(self.high_watermark)

    def read(
        self,
        offset: int,
        max_bytes: int,
        replica: int,
        read_committed: bool = False,
        min_one: bool = True,
    ) -> tuple[int, bytes | memoryview]:
        """(error, records) for a consumer (up to the HW) or a follower (up to the log end,
        recording its progress), within ``max_bytes`` unless ``min_one`` and the first
        batch alone is larger (see ``broker.logs.fetch_slots.FetchBudget``)."""
        if replica >= 0:
            if self.role != LEADER or self.leader_state is None:
                return int(ErrorCode.not_leader_or_follower), b""
            if replica not in self.leader_state.progress:
                # Not a replica of this partition: no uncommitted data for it.
                return int(ErrorCode.not_leader_or_follower), b""
            if offset < self.log.log_start_offset and self.remote.end >= 0:
                # Tiered below the local log: the follower starts after it instead of
                # fetching it (KIP-405), from the remote metadata.
                return int(ErrorCode.offset_moved_to_tiered_storage), b""
            end = self.log.log_end_offset
            if offset <= end:
                self.leader_state.on_fetch(replica, offset, end, now_ms())
                self._advance()
            limit = None
        else:
            # read_committed stops at the last stable offset (the first open transaction).
            limit = self.last_stable_offset if read_committed else self.high_watermark
            if offset > limit and offset <= self.log.log_end_offset:
                return 0, b""  # not committed yet: nothing, no error (as Kafka)
            if self.is_remote(offset):
                return 0, b""  # read from the remote segment (broker.logs.tiered.tiered_read)
        try:
            return 0, self.log.read(offset, max_bytes, limit, min_one)
        except OffsetOutOfRange:
            return int(ErrorCode.offset_out_of_range), b""

    # ---------------------------------------------------------------- follower

    def append_fetched(self, data: bytes | memoryview, leader_hw: int, leader_start: int) -> int:
        """Append a leader's Fetch answer; returns the bytes appended."""
        view = memoryview(data)
        before = self.log.log_end_offset
        batches = [b for b in walk(view)]
        if batches:
            self.log.append_as_follower(view)
            for b in batches:
                if b.base_offset < before:
                    continue
                self._observe(view[b.position : b.position + b.size], b)
        if leader_start > self.log.log_start_offset:
            self.log.delete_records(leader_start)
        self.high_watermark = max(
            min(leader_hw, self.log.log_end_offset), self.log.log_start_offset
        )
        return sum(b.size for b in batches)

    def truncate(self, offset: int) -> None:
        if offset < self.log.log_end_offset:
            log.info(
                "%s-%d: truncating from %d to %d",
                self.topic,
                self.index,
                self.log.log_end_offset,
                offset,
            )
        end = self.log.log_end_offset
        self.log.truncate_to(offset)
        self.producers.truncate_from(self.log.log_end_offset)
        if self.log.log_end_offset < end:
            # Rare (a new leader's divergent tail): the transactions are read again.
            self._load_producers(producers=False)
        self.high_watermark = min(self.high_watermark, self.log.log_end_offset)
        self.needs_truncation = False

    # ---------------------------------------------------------------- offsets

    def list_offset(self, timestamp: int, read_committed: bool = False) -> tuple[int, int, int]:
        """(error, offset, timestamp) for ListOffsets (committed records only; below the
        last stable offset for read_committed)."""
        hw = self.last_stable_offset if read_committed else self.high_watermark
        if timestamp == EARLIEST_TIMESTAMP:
            return 0, self.log_start_offset, -1
        if timestamp == EARLIEST_LOCAL_TIMESTAMP:
            return 0, self.log.log_start_offset, -1
        if timestamp == LATEST_TIERED_TIMESTAMP:
            # KIP-1005: the last tiered offset (-1 when nothing is).
            return 0, self.remote.end, -1
        if timestamp == LATEST_TIMESTAMP:
            return 0, hw, -1
        if timestamp == MAX_TIMESTAMP:
            best = max(self.log.segments, key=lambda s: s.max_timestamp)
            if best.max_timestamp < 0:
                return 0, -1, -1
            found = self.log.offset_for_timestamp(best.max_timestamp)
        elif timestamp >= 0:
            found = self.log.offset_for_timestamp(timestamp)
        else:
            return int(ErrorCode.invalid_request), -1, -1
        if found is None or found[0] >= hw:
            return 0, -1, -1
        base = found[0]
        try:
            data = self.log.read(base, 1, hw)
        except OffsetOutOfRange:
            return 0, -1, -1
        batch = next(iter(walk(data)), None)
        if batch is None:
            return 0, -1, -1
        one = data[batch.position : batch.position + batch.size]
        hit = (
            max_timestamp_record(one)
            if timestamp == MAX_TIMESTAMP
            else first_at_or_after(one, timestamp)
        )
        if hit is None:
            return 0, -1, -1
        delta, ts = hit
        offset = max(batch.base_offset + delta, self.log.log_start_offset)
        return (0, offset, ts) if offset < hw else (0, -1, -1)

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        return self.log.epochs.end_offset_for(epoch, self.log.log_end_offset)
