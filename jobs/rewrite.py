"""Writing a rewritten object and swapping batch pointers to it (merge and compaction).

One executor task = one new object: the task reads its batches, builds the object's
bytes, uploads it under a fresh key and calls ``replace_batches`` once: ONE coordinator
transaction per object, which applies each log range only if it is still exactly what the
plan saw. Crash safety comes from that order:

* crash before the upload completes: nothing happened;
* crash between upload and commit: the object is an orphan (no file row names it); the
  brokers' orphan sweep deletes it after ``orphan.grace.ms``. To never commit an object
  the sweep may already be deleting, a task does not commit an upload older than
  ``max_commit_delay_ms`` (default 5 min, half the default grace);
* crash after the commit: the swap is done and durable; a re-run plans from a new
  snapshot and does not redo it.

A commit whose outcome is unknown (connection lost) is reported as such and left: either
it applied, or the object is an orphan.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any
from uuid import UUID

import crc32c

from broker.config import BrokerConfig
from protocol.records import ATTRIBUTES_OFFSET, HEADER_SIZE, LOG_OVERHEAD
from storage.coordinator import (
    BatchReplacement,
    CoordinatorUnavailable,
    NewBatch,
    ReplacedBatch,
)
from storage.objects import MERGE_KEY_PREFIX, ObjectNotFound, new_data_key

from . import runtime
from .decode import patched
from .fetch import read_batches
from .plan import BatchRef, now_ms

KEY_PREFIX = MERGE_KEY_PREFIX
# Test knob: seconds to sleep after each commit, so a test can kill the driver between
# commits of one run (the crash-and-re-run test).
PAUSE_ENV = "SLUICE_JOBS_PAUSE_AFTER_COMMIT_S"

_HEADER = struct.Struct(">qiibIhi")  # baseOffset .. lastOffsetDelta


@dataclass(slots=True)
class Run:
    """Consecutive batches of one log, replaced together (one BatchReplacement)."""

    topic: str
    topic_id: UUID
    partition: int
    refs: list[BatchRef]

    @property
    def bytes(self) -> int:
        return sum(r.byte_size for r in self.refs)


@dataclass(slots=True)
class RewriteTask:
    index: int
    runs: list[Run]
    # Compaction: offsets to drop (None: a merge, every record stays).
    drop: Sequence[int] | None = None

    @property
    def bytes(self) -> int:
        return sum(r.bytes for r in self.runs)


@dataclass(slots=True)
class TaskResult:
    task: int
    object_key: str = ""
    read_bytes: int = 0
    written_bytes: int = 0
    batches_in: int = 0
    batches_out: int = 0
    applied: int = 0
    conflicts: int = 0
    records_dropped: int = 0  # compaction: records removed by the applied replacements
    status: str = "ok"  # ok | skipped | stale | expired | unknown | failed
    error: str = ""
    seconds: float = 0.0
    errors: list[int] = field(default_factory=list)


def check_batch(view: memoryview, r: BatchRef) -> None:
    """The bytes read are the batch the coordinator points at, intact."""
    if len(view) != r.byte_size or len(view) < HEADER_SIZE:
        raise ValueError(f"{r.topic}-{r.partition}@{r.base_offset}: short read")
    _base, length, _epoch, magic, crc, _attrs, last_delta = _HEADER.unpack_from(view)
    if magic != 2 or length + LOG_OVERHEAD != r.byte_size:
        raise ValueError(f"{r.topic}-{r.partition}@{r.base_offset}: not the batch expected")
    if last_delta != r.last_offset - r.base_offset:
        raise ValueError(f"{r.topic}-{r.partition}@{r.base_offset}: offsets do not match")
    if crc32c.crc32c(view[ATTRIBUTES_OFFSET:]) != crc:
        raise ValueError(f"{r.topic}-{r.partition}@{r.base_offset}: CRC mismatch")


def run_task(config: BrokerConfig, task: RewriteTask, max_commit_delay_ms: int) -> TaskResult:
    started = time.perf_counter()
    try:
        result = runtime.run(_run(config, task, max_commit_delay_ms))
    except Exception as exc:  # one task's failure must not hide the others' results
        result = TaskResult(task.index, status="failed", error=repr(exc)[:500])
    result.seconds = round(time.perf_counter() - started, 3)
    return result


async def _run(config: BrokerConfig, task: RewriteTask, max_commit_delay_ms: int) -> TaskResult:
    from .decode import filter_batch

    store = await runtime.store(config)
    coordinator = await runtime.coordinator(config)
    result = TaskResult(task.index)
    refs = [r for run in task.runs for r in run.refs]
    try:
        data = await read_batches(store, refs)
    except ObjectNotFound:
        # A source object is gone: its batches were rewritten since the plan (and the
        # cleaner ran). Nothing to do here; a re-run plans afresh.
        result.status = "stale"
        return result
    result.read_bytes = sum(r.byte_size for r in refs)
    result.batches_in = len(refs)
    drop = set(task.drop) if task.drop is not None else None

    chunks: list[bytes | memoryview] = []
    replacements: list[BatchReplacement] = []
    pos = 0
    for run in task.runs:
        new: list[NewBatch] = []
        run_chunks: list[bytes | memoryview] = []
        run_pos = pos
        changed = drop is None
        for r in run.refs:
            view = memoryview(data[r])
            check_batch(view, r)
            kept: Any = view
            if drop is not None:
                kept = filter_batch(view, r.base_offset, drop)
                changed = changed or kept is not view
                if kept is None:
                    continue
            run_chunks.extend(patched(kept, r.base_offset))
            new.append(
                NewBatch(
                    run_pos,
                    len(kept),
                    r.base_offset,
                    r.last_offset,
                    r.timestamp_type,
                    r.max_timestamp,
                    r.log_append_time,
                )
            )
            run_pos += len(kept)
        if not changed:
            continue  # compaction found nothing to drop here: the range stays where it is
        chunks.extend(run_chunks)
        pos = run_pos
        old = [ReplacedBatch(r.base_offset, r.last_offset, r.object_key) for r in run.refs]
        replacements.append(BatchReplacement(run.topic_id, run.partition, old, new))
        result.batches_out += len(new)
    if not replacements:
        result.status = "skipped"
        return result

    key = new_data_key(KEY_PREFIX)
    result.object_key = key
    upload_started = time.monotonic()
    if chunks:
        await store.put(key, chunks)
    result.written_bytes = pos
    if (time.monotonic() - upload_started) * 1000 > max_commit_delay_ms:
        # The orphan sweep may already consider this object: leave it to the sweep.
        result.status = "expired"
        return result
    try:
        errors = await coordinator.replace_batches(key, pos, replacements, now_ms())
    except CoordinatorUnavailable as exc:
        result.status = "unknown" if exc.outcome_unknown else "failed"
        result.error = str(exc)[:500]
        return result
    result.errors = errors
    result.applied = sum(1 for e in errors if e == 0)
    result.conflicts = len(errors) - result.applied
    if drop is not None and result.applied == len(errors):
        result.records_dropped = len(drop)
    pause = float(os.environ.get(PAUSE_ENV, "0") or 0)
    if pause:
        time.sleep(pause)
    return result


def summarize(results: Sequence[TaskResult], seconds: float) -> dict[str, Any]:
    written = sum(r.written_bytes for r in results)
    read = sum(r.read_bytes for r in results)
    statuses: dict[str, int] = {}
    for r in results:
        statuses[r.status] = statuses.get(r.status, 0) + 1
    return {
        "tasks": len(results),
        "statuses": statuses,
        "replacements_applied": sum(r.applied for r in results),
        "replacements_conflicting": sum(r.conflicts for r in results),
        "batches_in": sum(r.batches_in for r in results),
        "batches_out": sum(r.batches_out for r in results),
        "objects_written": sum(1 for r in results if r.applied),
        "records_dropped": sum(r.records_dropped for r in results),
        "read_bytes": read,
        "written_bytes": written,
        "seconds": round(seconds, 3),
        "read_mib_per_s": round(read / 2**20 / seconds, 2) if seconds > 0 else 0.0,
        "errors": [r.error for r in results if r.error][:10],
    }
