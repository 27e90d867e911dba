"""Deleting remote segments: retention (``retention.ms`` / ``retention.bytes`` over the
whole log, tiered and local), orphans of discarded lineages, and copies that never
finished.

Every deletion is DELETE_SEGMENT_STARTED → delete the objects → DELETE_SEGMENT_FINISHED →
forget the metadata. The state goes first so no reader picks the segment once its objects
may be going (readers take FINISHED segments only); a crash after it leaves a STARTED
deletion that ``finish_pending`` completes (deleting objects twice is harmless).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from uuid import UUID

from storage.objects import ObjectStore

from . import layout
from .lineage import History, Lineage, lineage
from .metadata import RemoteLogMetadataStore, RemoteSegment, SegmentState


def _now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class RetentionPlan:
    log_start: int | None  # the new log start (None: unchanged)
    delete: list[RemoteSegment]


def retention_plan(
    line: Lineage,
    now_ms: int,
    retention_ms: int,
    retention_bytes: int,
    local_only_bytes: int = 0,
) -> RetentionPlan:
    """Which lineage segments retention deletes, oldest first, as Kafka's remote log
    manager does: by age (the segment's newest timestamp older than ``retention.ms``)
    and by size (the partition — tiered lineage plus ``local_only_bytes``, the local bytes
    not tiered yet — larger than ``retention.bytes`` without the segment). The log start
    moves past the last one deleted, and segments wholly below it go too (overlapping
    copies)."""
    total = sum(s.size for s in line.segments) + local_only_bytes
    new_start: int | None = None
    for s in line.segments:  # ordered by start offset
        if new_start is not None and s.end_offset < new_start:
            continue  # inside what is already going
        too_old = (
            retention_ms >= 0 and s.max_timestamp >= 0 and now_ms - s.max_timestamp > retention_ms
        )
        too_big = retention_bytes >= 0 and total - s.size >= retention_bytes
        if not (too_old or too_big):
            break
        total -= s.size
        new_start = max(new_start or 0, s.end_offset + 1)
    if new_start is None:
        return RetentionPlan(None, [])
    return RetentionPlan(new_start, [s for s in line.segments if s.end_offset < new_start])


@dataclass(frozen=True, slots=True)
class RetentionRun:
    log_start: int  # the remote log start after the run
    expired: int  # segments deleted by retention (or wholly below the log start)
    orphans: int  # segments of discarded lineages deleted


class SegmentDeleter:
    def __init__(
        self,
        store: ObjectStore,
        metadata: RemoteLogMetadataStore,
        clock_ms: Callable[[], int] = _now_ms,
    ) -> None:
        self.store = store
        self.metadata = metadata
        self._clock_ms = clock_ms

    async def delete(self, segment: RemoteSegment) -> bool:
        """Delete one segment (any state before DELETE_SEGMENT_FINISHED); False when
        another deleter moved it first (it finishes the job)."""
        if segment.state is not SegmentState.DELETE_SEGMENT_STARTED:
            moved = await self.metadata.update_state(
                segment.segment_id, SegmentState.DELETE_SEGMENT_STARTED, self._clock_ms()
            )
            if moved is None:
                return False
        await self._finish(segment)
        return True

    async def delete_all(self, segments: Sequence[RemoteSegment]) -> int:
        done = 0
        for s in segments:
            done += await self.delete(s)
        return done

    async def finish_pending(self, topic_id: UUID, partition: int) -> int:
        """Complete deletions a crash interrupted; returns how many."""
        pending = await self.metadata.list_segments(
            topic_id,
            partition,
            states=[SegmentState.DELETE_SEGMENT_STARTED, SegmentState.DELETE_SEGMENT_FINISHED],
        )
        for s in pending:
            await self._finish(s)
        return len(pending)

    async def _finish(self, segment: RemoteSegment) -> None:
        await self.store.delete_many(layout.keys(segment))
        await self.metadata.update_state(
            segment.segment_id, SegmentState.DELETE_SEGMENT_FINISHED, self._clock_ms()
        )
        # Kafka keeps DELETE_SEGMENT_FINISHED in its metadata topic until compaction; here
        # the row itself goes, as nothing reads a deleted segment's metadata.
        await self.metadata.delete_segments([segment.segment_id])

    async def enforce(
        self,
        history: History,
        leader_epoch: int,
        topic_id: UUID,
        partition: int,
        retention_ms: int,
        retention_bytes: int,
        local_only_bytes: int = 0,
    ) -> RetentionRun:
        """One run of the leader's expiration task (only the partition's leader runs it:
        orphans are judged against its history, and segments copied in a newer epoch than
        ``leader_epoch`` are left to the leader that knows them). The shared log start
        moves first, so nothing reads the segments whose objects then go."""
        await self.finish_pending(topic_id, partition)
        start = await self.metadata.log_start(topic_id, partition)
        segments = await self.metadata.list_segments(topic_id, partition)
        line = lineage(history, segments, start, leader_epoch)
        plan = retention_plan(
            line, self._clock_ms(), retention_ms, retention_bytes, local_only_bytes
        )
        if plan.log_start is not None:
            start = await self.metadata.advance_log_start(topic_id, partition, plan.log_start)
        expired = await self.delete_all([*plan.delete, *line.below_start])
        orphans = await self.delete_all(line.orphans)
        return RetentionRun(start, expired, orphans)
