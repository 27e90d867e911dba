"""Log compaction of a classic partition's local log (``cleanup.policy=compact``), as Kafka's
log cleaner does it, in three steps:

1. ``plan`` (event loop, headers only): the cleanable segments are the closed ones below the
   first unstable offset (the last stable offset, itself at most the high watermark) whose
   newest record is older than ``min.compaction.lag.ms``; they are cleaned when the dirty part
   (after the cleaner checkpoint) is at least ``min.cleanable.dirty.ratio`` of them, or at
   once, whatever the ratio, when the first dirty segment's first record is older than
   ``max.compaction.lag.ms`` (KIP-354; the log rolls its active segment by then too).
2. ``build`` (a worker thread: record-level work, off the event loop): the dirty part's keys
   map to their latest offset; every cleanable segment is rewritten without the records a
   later one of the same key replaces, without aborted transactions' records, and without
   tombstones older than ``delete.retention.ms`` that were already in the cleaned part (so a
   consumer has had that long to see them). Offsets never change; batches keep their base
   offset and last offset delta, an emptied batch disappears. Control batches (transaction
   markers) are kept. Records without a key are kept. The last batch of each idempotent or
   transactional producer is kept, emptied if none of its records stays, as Kafka keeps it:
   the producer's sequence state is rebuilt from the log, and without that batch a restarted
   replica would no longer recognise the producer's retries. The new segments (with their
   indexes) are written to a scratch directory.
3. ``swap`` (event loop): each rewritten segment replaces its original (three renames); a
   ``cleaner-swap`` file lists the segments being swapped so that a crash in the middle is
   finished, and the segment re-indexed, when the log opens again (``finish_swap``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import struct
from dataclasses import dataclass, field

from .batches import walk
from .record_filter import CorruptRecords, batch_records, rewrite
from .segment import Segment, file_name
from .txn_index import AbortedTxn, batch_txn_fields

log = logging.getLogger(__name__)

CHECKPOINT = "cleaner-offset-checkpoint"
SWAP_FILE = "cleaner-swap"
SCRATCH = "cleaner-scratch"
SUFFIXES = (".log", ".index", ".timeindex")
_CONTROL_BIT = 0x20
_TRANSACTIONAL_BIT = 0x10
LONG_MAX = (1 << 63) - 1
_FIRST_TIMESTAMP = struct.Struct(">q")
FIRST_TIMESTAMP_OFFSET = 27  # a v2 batch's baseTimestamp


@dataclass(frozen=True)
class CleanerConfig:
    min_dirty_ratio: float = 0.5
    delete_retention_ms: int = 86_400_000
    min_compaction_lag_ms: int = 0
    max_compaction_lag_ms: int = LONG_MAX


@dataclass
class Plan:
    directory: str
    index_interval_bytes: int
    segments: list[Segment]  # the cleanable ones, oldest first
    checkpoint: int  # offsets below it were cleaned before
    end: int  # first offset not cleaned this time
    now_ms: int
    config: CleanerConfig
    aborted: list[AbortedTxn] = field(default_factory=list)
    # Last offsets of each producer's last batch: kept (possibly empty), see the top.
    producer_last_batches: frozenset[int] = frozenset()


@dataclass
class Built:
    plan: Plan
    bases: list[int]  # segments rewritten in the scratch directory
    records_removed: int = 0


def read_checkpoint(directory: str) -> int:
    try:
        with open(os.path.join(directory, CHECKPOINT)) as f:
            return int(f.read().strip() or 0)
    except (OSError, ValueError):
        return 0


def write_checkpoint(directory: str, offset: int) -> None:
    path = os.path.join(directory, CHECKPOINT)
    with open(path + ".tmp", "w") as f:
        f.write(str(offset))
    os.replace(path + ".tmp", path)


def plan(
    segments: list[Segment],
    directory: str,
    index_interval_bytes: int,
    stable_end: int,
    now_ms: int,
    config: CleanerConfig,
    aborted: list[AbortedTxn],
    producer_last_batches: frozenset[int] = frozenset(),
) -> Plan | None:
    """What to clean now, or None (nothing closed and stable, or not dirty enough)."""
    checkpoint = read_checkpoint(directory)
    cleanable: list[Segment] = []
    for segment in segments[:-1]:  # never the active segment
        if segment.size == 0:
            continue  # emptied by an earlier cleaning: nothing in it, nothing stops here
        if segment.next_offset > stable_end:
            break
        if config.min_compaction_lag_ms > 0 and (
            segment.max_timestamp < 0
            or now_ms - segment.max_timestamp < config.min_compaction_lag_ms
        ):
            break
        cleanable.append(segment)
    if not cleanable:
        return None
    total = sum(s.size for s in cleanable)
    dirty = sum(s.size for s in cleanable if s.next_offset > checkpoint)
    if dirty == 0:
        return None
    if dirty / total < config.min_dirty_ratio and not _overdue(
        cleanable, checkpoint, now_ms, config
    ):
        return None
    return Plan(
        directory,
        index_interval_bytes,
        cleanable,
        checkpoint,
        cleanable[-1].next_offset,
        now_ms,
        config,
        [a for a in aborted if a.first_offset < cleanable[-1].next_offset],
        producer_last_batches,
    )


def _overdue(cleanable: list[Segment], checkpoint: int, now_ms: int, config: CleanerConfig) -> bool:
    """Whether the oldest dirty record waited ``max.compaction.lag.ms`` already."""
    if config.max_compaction_lag_ms >= LONG_MAX:
        return False
    first_dirty = next(s for s in cleanable if s.next_offset > checkpoint)
    try:
        with open(first_dirty.path, "rb") as f:
            head = f.read(FIRST_TIMESTAMP_OFFSET + 8)
    except OSError:
        return False
    if len(head) < FIRST_TIMESTAMP_OFFSET + 8:
        return False
    (first_ts,) = _FIRST_TIMESTAMP.unpack_from(head, FIRST_TIMESTAMP_OFFSET)
    return first_ts >= 0 and now_ms - first_ts > config.max_compaction_lag_ms


def _segment_bytes(segment: Segment) -> bytes:
    with open(segment.path, "rb") as f:
        return f.read(segment.size)


def _aborted(plan: Plan, pid: int, offset: int) -> bool:
    return any(
        a.producer_id == pid and a.first_offset <= offset <= a.last_offset for a in plan.aborted
    )


def build(plan: Plan) -> Built:
    """Write the cleaned segments into the scratch directory (runs in a worker thread)."""
    scratch = os.path.join(plan.directory, SCRATCH)
    shutil.rmtree(scratch, ignore_errors=True)
    os.makedirs(scratch)
    latest: dict[bytes, int] = {}
    for segment in plan.segments:
        if segment.next_offset <= plan.checkpoint:
            continue
        data = memoryview(_segment_bytes(segment))
        for b in walk(data, check_crc=False):
            batch = data[b.position : b.position + b.size]
            attributes, pid, _kind = batch_txn_fields(batch)
            if attributes & _CONTROL_BIT:
                continue
            if attributes & _TRANSACTIONAL_BIT and _aborted(plan, pid, b.base_offset):
                continue
            try:
                _section, records = batch_records(batch)
            except CorruptRecords:
                continue
            for r in records:
                if r.key is not None:
                    latest[r.key] = b.base_offset + r.offset_delta
    horizon = plan.now_ms - plan.config.delete_retention_ms
    built = Built(plan, [])
    for segment in plan.segments:
        data = memoryview(_segment_bytes(segment))
        out: list[tuple[bytes | memoryview, int, int, int]] = []
        changed = False
        for b in walk(data, check_crc=False):
            batch = data[b.position : b.position + b.size]
            attributes, pid, _kind = batch_txn_fields(batch)
            if attributes & _CONTROL_BIT:
                out.append((batch, b.base_offset, b.last_offset, b.max_timestamp))
                continue
            try:
                section, records = batch_records(batch)
            except CorruptRecords:
                out.append((batch, b.base_offset, b.last_offset, b.max_timestamp))
                continue
            if attributes & _TRANSACTIONAL_BIT and _aborted(plan, pid, b.base_offset):
                kept = []
            else:
                kept = [
                    r
                    for r in records
                    if r.key is None
                    or (
                        latest.get(r.key, -1) <= b.base_offset + r.offset_delta
                        and not (
                            r.tombstone
                            and b.base_offset + r.offset_delta < plan.checkpoint
                            and b.max_timestamp < horizon
                        )
                    )
                ]
            if len(kept) == len(records):
                out.append((batch, b.base_offset, b.last_offset, b.max_timestamp))
                continue
            changed = True
            built.records_removed += len(records) - len(kept)
            if kept or b.last_offset in plan.producer_last_batches:
                out.append(
                    (rewrite(batch, section, kept), b.base_offset, b.last_offset, b.max_timestamp)
                )
        if not changed:
            continue
        cleaned = Segment(scratch, segment.base_offset, plan.index_interval_bytes)
        try:
            for chunk, base, last, max_ts in out:
                cleaned.append(bytes(chunk), base, last, max_ts)
            cleaned.flush()
        finally:
            cleaned.close()
        built.bases.append(segment.base_offset)
    return built


def swap(built: Built, segments: list[Segment], log_end_offset: int) -> int:
    """Put the cleaned segments in place of their originals in ``segments`` (the log's own
    list, changed in place, on the event loop); returns how many were swapped. A segment
    that retention deleted or a truncation cut meanwhile keeps its original."""
    plan = built.plan
    scratch = os.path.join(plan.directory, SCRATCH)
    swapped = 0
    if log_end_offset >= plan.end and built.bases:
        wanted = set(built.bases)
        positions = {id(s): i for i, s in enumerate(segments) if i < len(segments) - 1}
        todo = [
            (positions[id(s)], s)
            for s in plan.segments
            if s.base_offset in wanted and id(s) in positions
        ]
        _write_swap_file(plan.directory, [s.base_offset for _, s in todo])
        for i, old in todo:
            old.close()
            _move_in(scratch, plan.directory, old.base_offset)
            new = Segment(plan.directory, old.base_offset, plan.index_interval_bytes)
            new.load()
            segments[i] = new
            swapped += 1
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(plan.directory, SWAP_FILE))
    write_checkpoint(plan.directory, plan.end)
    shutil.rmtree(scratch, ignore_errors=True)
    return swapped


def _write_swap_file(directory: str, bases: list[int]) -> None:
    path = os.path.join(directory, SWAP_FILE)
    with open(path + ".tmp", "w") as f:
        f.write("\n".join(str(b) for b in bases))
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def _move_in(scratch: str, directory: str, base: int) -> None:
    # The .log last: until it moves, a crash leaves the original data (re-indexed on open).
    for suffix in (".index", ".timeindex", ".log"):
        source = os.path.join(scratch, file_name(base, suffix))
        if os.path.exists(source):
            os.replace(source, os.path.join(directory, file_name(base, suffix)))


def finish_swap(directory: str) -> set[int]:
    """At open: a swap interrupted by a crash is completed; returns the bases of the
    segments concerned (their indexes must be rebuilt from the .log)."""
    path = os.path.join(directory, SWAP_FILE)
    if not os.path.exists(path):
        shutil.rmtree(os.path.join(directory, SCRATCH), ignore_errors=True)
        return set()
    try:
        with open(path) as f:
            bases = {int(line) for line in f.read().split() if line.strip().isdigit()}
    except (OSError, ValueError):
        bases = set()
    scratch = os.path.join(directory, SCRATCH)
    for base in bases:
        _move_in(scratch, directory, base)
    shutil.rmtree(scratch, ignore_errors=True)
    os.unlink(path)
    return bases
