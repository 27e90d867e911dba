"""A partition's local log: segments in one directory, appended by a leader or a follower.

- The leader assigns offsets (``append_as_leader``): each batch gets the log end offset as
  its base offset and the leader epoch, written into its header (outside the CRC).
- A follower appends what the leader sent (``append_as_follower``): offsets and epochs as
  they are, which must continue the log exactly.
- The active segment rolls at ``segment.bytes`` or ``segment.ms``; retention deletes whole
  old segments (never the active one); DeleteRecords moves the log start.
- Durability as Kafka: fsync after ``flush.messages`` records or ``flush.ms`` (both off by
  default: replication is the durability, the OS writes back), and on roll and close.
- A clean close leaves ``.clean_shutdown``; without it, opening recovers every segment
  from the one holding the recovery point (the last flushed offset) on: a torn or corrupt
  tail is cut, indexes are rebuilt, the epoch cache forgets epochs past the new end.
"""

from __future__ import annotations

import bisect
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from protocol.records import BatchHeader

from .batches import walk, with_offset_and_epoch
from .cleaner import finish_swap
from .epoch_cache import EpochCache
from .segment import Segment

CLEAN_SHUTDOWN = ".clean_shutdown"
RECOVERY_POINT = "recovery-point"
LOG_START = "log-start-offset"
EPOCH_CHECKPOINT = "leader-epoch-checkpoint"
NO_LIMIT = 2**63 - 1


class OffsetOutOfRange(Exception):
    pass


class NotContiguous(Exception):
    """A follower's append that does not continue the log (a replication bug, or a fetch
    answered from a different offset)."""


@dataclass(frozen=True)
class LogConfig:
    """Kafka's topic configs for a local log (defaults as Kafka's)."""

    segment_bytes: int = 1 << 30
    segment_ms: int = 7 * 24 * 3600 * 1000
    index_interval_bytes: int = 4096
    flush_messages: int = NO_LIMIT
    flush_ms: int = NO_LIMIT
    retention_ms: int = 7 * 24 * 3600 * 1000
    retention_bytes: int = -1
    # cleanup.policy: "delete" in it (the default) deletes old segments by retention;
    # "compact" in it has the log cleaner keep the latest record per key.
    cleanup_delete: bool = True
    cleanup_compact: bool = False
    min_cleanable_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    # Tiered storage (KIP-405): with it, the local segments are deleted by the local
    # retention (local.retention.ms/bytes, already resolved: -2 taken as retention.*) once
    # they are tiered, and retention.ms/bytes apply to the whole log by the remote side.
    remote_storage: bool = False
    local_retention_ms: int = 7 * 24 * 3600 * 1000
    local_retention_bytes: int = -1
    max_compaction_lag_ms: int = (1 << 63) - 1
    # min.insync.replicas: with fewer in the ISR a leader refuses acks=all appends and, as
    # Kafka 4 does (KIP-966), holds its high watermark.
    min_insync_replicas: int = 1


class Log:
    def _roll_ms(self) -> int:
        # KIP-354: the cleaner never touches the active segment, so a compacted log rolls it
        # by max.compaction.lag.ms for its records to become cleanable in time.
        c = self.config
        return min(c.segment_ms, c.max_compaction_lag_ms) if c.cleanup_compact else c.segment_ms

    def __init__(
        self, directory: str, config: LogConfig, clock: Callable[[], float] = time.time
    ) -> None:
        self.dir = directory
        self.config = config
        self._clock = clock
        os.makedirs(directory, exist_ok=True)
        self.epochs = EpochCache(os.path.join(directory, EPOCH_CHECKPOINT))
        self.log_start_offset = self._read_int(LOG_START, 0)
        self.segments: list[Segment] = []
        self._unflushed = 0
        self._last_flush = clock()
        self.recovered_bytes = 0
        self._open()

    # ---------------------------------------------------------------- open / close

    def _open(self) -> None:
        # A cleaner swap interrupted by a crash: finished, those segments re-indexed.
        reindex = finish_swap(self.dir)
        bases = sorted(
            int(name[:-4])
            for name in os.listdir(self.dir)
            if name.endswith(".log") and name[:-4].isdigit()
        )
        self.segments = [Segment(self.dir, b, self.config.index_interval_bytes) for b in bases]
        if not self.segments:
            self.segments.append(self._new_segment(self.log_start_offset))
            return
        clean = os.path.exists(os.path.join(self.dir, CLEAN_SHUTDOWN))
        for segment in self.segments:
            if segment.base_offset in reindex:
                self.recovered_bytes += segment.recover()
        if clean:
            for segment in self.segments:
                segment.load()
            os.unlink(os.path.join(self.dir, CLEAN_SHUTDOWN))
        else:
            recovery_point = self._read_int(RECOVERY_POINT, 0)
            first = max(0, self._segment_index(recovery_point))
            for segment in self.segments[:first]:
                segment.load()
            for segment in self.segments[first:]:
                self.recovered_bytes += segment.recover()
            self._drop_empty_tail_segments()
        self.epochs.truncate_from_end(self.log_end_offset)

    def _drop_empty_tail_segments(self) -> None:
        # A segment rolled just before a crash may hold nothing valid: the log ends in the
        # one before it, so keep exactly one active segment at the end.
        while len(self.segments) > 1 and self.segments[-1].size == 0:
            self.segments.pop().delete()

    def close(self) -> None:
        self.flush()
        for segment in self.segments:
            segment.close()
        with open(os.path.join(self.dir, CLEAN_SHUTDOWN), "w"):
            pass

    # ---------------------------------------------------------------- state

    @property
    def active(self) -> Segment:
        return self.segments[-1]

    @property
    def log_end_offset(self) -> int:
        return self.active.next_offset

    @property
    def unflushed(self) -> int:
        """Records appended since the last flush."""
        return self._unflushed

    @property
    def last_flush(self) -> float:
        return self._last_flush

    @property
    def size(self) -> int:
        return sum(s.size for s in self.segments)

    def _segment_index(self, offset: int) -> int:
        """Index of the segment whose range holds ``offset`` (the last one starting at or
        before it), -1 if none does."""
        return bisect.bisect_right([s.base_offset for s in self.segments], offset) - 1

    # ---------------------------------------------------------------- append

    def append_as_leader(
        self, records: memoryview, batches: Sequence[BatchHeader], leader_epoch: int
    ) -> tuple[int, int]:
        """Give the batches the next offsets and ``leader_epoch``; returns (first offset,
        last offset)."""
        first = self.log_end_offset
        if self.epochs.latest_epoch < leader_epoch:
            self.epochs.assign(leader_epoch, first)
        for b in batches:
            base = self.log_end_offset
            data = with_offset_and_epoch(records[b.offset : b.offset + b.size], base, leader_epoch)
            self._append(data, base, base + b.last_offset_delta, b.max_timestamp)
        return first, self.log_end_offset - 1

    def append_as_follower(self, data: bytes | memoryview) -> int:
        """Append the leader's batches as they are; returns the new log end offset."""
        view = memoryview(data)
        # Whole batches only: what follows the last one (a fetch answer may end with a
        # partial batch) is simply not appended; the next fetch starts after the last.
        for batch in walk(view):
            # Offsets only increase; gaps are normal (a compacted leader's log).
            if batch.base_offset < self.log_end_offset:
                raise NotContiguous(
                    f"batch at offset {batch.base_offset}, log ends at {self.log_end_offset}"
                )
            if batch.leader_epoch > self.epochs.latest_epoch:
                self.epochs.assign(batch.leader_epoch, batch.base_offset)
            chunk = bytes(view[batch.position : batch.position + batch.size])
            self._append(chunk, batch.base_offset, batch.last_offset, batch.max_timestamp)
        return self.log_end_offset

    def _append(self, data: bytes, base: int, last: int, max_timestamp: int) -> None:
        segment = self.active
        if segment.size and (
            segment.size + len(data) > self.config.segment_bytes
            or (self._clock() - segment.created) * 1000 >= self._roll_ms()
        ):
            segment = self.roll()
        segment.append(data, base, last, max_timestamp)
        self._unflushed += last - base + 1
        if (
            self._unflushed >= self.config.flush_messages
            or (self._clock() - self._last_flush) * 1000 >= self.config.flush_ms
        ):
            self.flush()

    def roll(self) -> Segment:
        """Start a new active segment at the log end (the old one is flushed first)."""
        self.active.flush()
        segment = self._new_segment(self.log_end_offset)
        self.segments.append(segment)
        return segment

    def _new_segment(self, base: int) -> Segment:
        segment = Segment(self.dir, base, self.config.index_interval_bytes, self._clock())
        segment.next_offset = base
        return segment

    def flush(self) -> None:
        for segment in self.segments[-2:]:  # a roll flushed everything older
            segment.flush()
        self._write_int(RECOVERY_POINT, self.log_end_offset)
        self._unflushed = 0
        self._last_flush = self._clock()

    # ---------------------------------------------------------------- read

    def read(
        self, offset: int, max_bytes: int, max_offset: int | None = None, min_one: bool = True
    ) -> bytes | memoryview:
        """Whole batches from the one holding ``offset``, below ``max_offset`` (the high
        watermark for consumers; the log end for followers), within ``max_bytes`` unless
        the first batch alone is larger and ``min_one``."""
        end = self.log_end_offset if max_offset is None else max_offset
        if offset < self.log_start_offset or offset > self.log_end_offset:
            raise OffsetOutOfRange(
                f"offset {offset} outside [{self.log_start_offset}, {self.log_end_offset}]"
            )
        if offset >= end:
            # Nothing below ``max_offset`` from here (a batch holding the offset ends at or
            # past it): a consumer at the high watermark, the steady state of most of a
            # large fetch's partitions, costs no index lookup or segment walk.
            return b""
        i = max(0, self._segment_index(offset))
        for segment in self.segments[i:]:
            if segment.base_offset >= end:
                break
            data = segment.read(offset, max_bytes, end, min_one)
            if data or segment.next_offset > max(offset, segment.base_offset):
                # Nothing read although this segment has a batch at or after the offset (past
                # ``max_offset``, or larger than ``max_bytes`` without ``min_one``): the
                # answer is empty, never a later segment's batches. (An empty segment, as
                # compaction leaves them, or one ending before the offset: the next one.)
                return data
        return b""

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch with max timestamp >= the one
        given, or None."""
        for segment in self.segments:
            if segment.max_timestamp < timestamp:
                continue
            found = segment.offset_for_timestamp(timestamp)
            if found is not None:
                return max(found[0], self.log_start_offset), found[1]
        return None

    # ---------------------------------------------------------------- truncation / deletion

    def truncate_to(self, offset: int) -> None:
        """Cut the log back so it ends at (or, batches being whole, before) ``offset``."""
        if offset >= self.log_end_offset:
            return
        while len(self.segments) > 1 and self.active.base_offset >= offset:
            self.segments.pop().delete()
        if self.active.base_offset >= offset:
            self.active.truncate_to(self.active.base_offset)
        else:
            self.active.truncate_to(offset)
        self.epochs.truncate_from_end(self.log_end_offset)
        self._write_int(RECOVERY_POINT, min(self._read_int(RECOVERY_POINT, 0), self.log_end_offset))

    def truncate_fully_and_start_at(self, offset: int) -> None:
        """Drop everything; the log restarts empty at ``offset`` (a follower far behind a
        leader whose log start passed it)."""
        for segment in self.segments:
            segment.delete()
        self.segments = [self._new_segment(offset)]
        self.log_start_offset = offset
        self._write_int(LOG_START, offset)
        self._write_int(RECOVERY_POINT, offset)
        self.epochs.truncate_from_end(offset)

    def delete_records(self, new_start: int) -> int:
        """DeleteRecords: the log start moves to ``new_start`` (at most the log end); whole
        segments below it are deleted. Returns the new log start."""
        new_start = min(new_start, self.log_end_offset)
        if new_start <= self.log_start_offset:
            return self.log_start_offset
        self.log_start_offset = new_start
        self._write_int(LOG_START, new_start)
        while len(self.segments) > 1 and self.segments[1].base_offset <= new_start:
            self.segments.pop(0).delete()
        self.epochs.truncate_from_start(new_start)
        return new_start

    def enforce_retention(self, tiered_upto: int | None = None) -> int:
        """Delete old segments by ``retention.ms`` (their newest timestamp) and
        ``retention.bytes`` (oldest first), never the active one; returns how many.

        With tiered storage (``config.remote_storage``) the local limits apply instead, and
        only to segments wholly below ``tiered_upto`` (the first offset not tiered yet):
        a segment not copied stays, whatever its age. ``log_start_offset`` is then the
        *local* log start; the epoch cache keeps the epochs of the tiered offsets below it
        (the partition's history goes on in the remote segments), truncated only where the
        whole log starts (``forget_epochs_before``)."""
        tiered = self.config.remote_storage
        if tiered:
            retention_ms = self.config.local_retention_ms
            retention_bytes = self.config.local_retention_bytes
            upto = -1 if tiered_upto is None else tiered_upto
        else:
            retention_ms, retention_bytes, upto = (
                self.config.retention_ms,
                self.config.retention_bytes,
                NO_LIMIT,
            )
        now_ms = self._clock() * 1000
        deleted = 0
        while self.config.cleanup_delete and len(self.segments) > 1:
            oldest = self.segments[0]
            if oldest.next_offset > upto:
                break
            too_old = retention_ms >= 0 and (
                # A segment the cleaner emptied (compact,delete) holds nothing to keep.
                oldest.size == 0
                or (oldest.max_timestamp >= 0 and now_ms - oldest.max_timestamp > retention_ms)
            )
            too_big = retention_bytes >= 0 and self.size - oldest.size >= retention_bytes
            if not (too_old or too_big):
                break
            self.segments.pop(0).delete()
            deleted += 1
        if deleted:
            self.log_start_offset = max(self.log_start_offset, self.segments[0].base_offset)
            self._write_int(LOG_START, self.log_start_offset)
            if not tiered:
                self.epochs.truncate_from_start(self.log_start_offset)
        return deleted

    def forget_epochs_before(self, log_start: int) -> None:
        """The whole log (tiered and local) starts at ``log_start`` now: epochs that ended
        before it go from the cache."""
        self.epochs.truncate_from_start(log_start)

    def untiered_bytes(self, tiered_upto: int) -> int:
        """Bytes of the local segments not wholly tiered (below ``tiered_upto``)."""
        return sum(s.size for s in self.segments if s.next_offset > tiered_upto)

    # ---------------------------------------------------------------- checkpoints

    def _read_int(self, name: str, default: int) -> int:
        try:
            with open(os.path.join(self.dir, name)) as f:
                return int(f.read().strip() or default)
        except (FileNotFoundError, ValueError):
            return default

    def _write_int(self, name: str, value: int) -> None:
        path = os.path.join(self.dir, name)
        with open(path + ".tmp", "w") as f:
            f.write(str(value))
        os.replace(path + ".tmp", path)
