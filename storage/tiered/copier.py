"""Copying a leader's rolled local segments to the object store (KIP-405's RLMTask copy).

Per segment: add its metadata (COPY_SEGMENT_STARTED) → upload the log, both indexes and
the epoch vector → COPY_SEGMENT_FINISHED. Only FINISHED segments are read or count in the
lineage, so a crash in between leaves a STARTED entry whose objects may be partial; the
next run deletes it first and copies the segment again under a new segment id.

Copying resumes right after the tiered lineage of this leader (``lineage.Lineage``), so
every offset below a tiered one is tiered too. Only one copier may run per partition: the
leader's. A deposed leader's copy in flight cannot finish once the new leader has moved its
STARTED entry to deletion (the transition is refused), so a zombie never adds a segment.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from uuid import UUID

from storage.classic.log import Log
from storage.classic.segment import Segment
from storage.objects import ObjectStore

from . import layout
from .deleter import SegmentDeleter
from .lineage import History, epoch_vector, lineage
from .metadata import RemoteLogMetadataStore, RemoteSegment, SegmentState


class CopyFenced(Exception):
    """The segment's metadata left COPY_SEGMENT_STARTED while it was being copied (a new
    leader cleaned it up): this copier is no longer the partition's."""


class LocalGap(Exception):
    """The next offset to tier is no longer in the local log (local retention deleted
    segments that were not tiered): copying further would leave a gap."""


def _now_ms() -> int:
    return int(time.time() * 1000)


def history_of(log: Log) -> History:
    return History(tuple(log.epochs.entries), log.log_end_offset)


class SegmentCopier:
    def __init__(
        self,
        store: ObjectStore,
        metadata: RemoteLogMetadataStore,
        broker_id: int,
        clock_ms: Callable[[], int] = _now_ms,
        new_id: Callable[[], UUID] = uuid.uuid4,
    ) -> None:
        self.store = store
        self.metadata = metadata
        self.broker_id = broker_id
        self._clock_ms = clock_ms
        self._new_id = new_id
        self.deleter = SegmentDeleter(store, metadata, clock_ms)

    async def copy_segment(
        self,
        log: Log,
        segment: Segment,
        topic_id: UUID,
        partition: int,
        leader_epoch: int,
        snapshot: Callable[[int, int], bytes] | None = None,
    ) -> RemoteSegment:
        """Copy one rolled segment of ``log``; returns its metadata (FINISHED).
        ``snapshot(start, end)`` gives what the segment [start, end) carries besides its
        records: the producers' state and its aborted transactions (the broker's)."""
        if segment is log.active:
            raise ValueError("the active segment is never copied: it still grows")
        last = segment.next_offset - 1
        meta = RemoteSegment(
            topic_id,
            partition,
            self._new_id(),
            segment.base_offset,
            last,
            segment.max_timestamp,
            leader_epoch,
            epoch_vector(log.epochs.entries, segment.base_offset, last),
            segment.size,
            self.broker_id,
            SegmentState.COPY_SEGMENT_STARTED,
            self._clock_ms(),
        )
        await self.metadata.add_segment(meta)
        files = await asyncio.to_thread(
            lambda: [
                Path(p).read_bytes() if Path(p).exists() else b""
                for p in (segment.path, segment.index.path, segment.time_index.path)
            ]
        )
        # The log last: an object present means its indexes are too (a reader of a segment
        # copied by an older version without them still works from the log alone).
        await self.store.put(layout.key(meta, layout.EPOCHS), [layout.epochs_checkpoint(meta)])
        # Always written (empty without producers), so every segment has all its files.
        state = snapshot(segment.base_offset, segment.next_offset) if snapshot else b"{}"
        await self.store.put(layout.key(meta, layout.PRODUCER_SNAPSHOT), [state])
        await self.store.put(layout.key(meta, layout.OFFSET_INDEX), [files[1]])
        await self.store.put(layout.key(meta, layout.TIME_INDEX), [files[2]])
        await self.store.put(layout.key(meta, layout.LOG), [files[0]])
        done = await self.metadata.update_state(
            meta.segment_id, SegmentState.COPY_SEGMENT_FINISHED, self._clock_ms()
        )
        if done is None:
            raise CopyFenced(f"segment {meta.segment_id} left COPY_SEGMENT_STARTED")
        return done

    async def copy_rolled(
        self,
        log: Log,
        topic_id: UUID,
        partition: int,
        leader_epoch: int,
        upto: int,
        snapshot: Callable[[int, int], bytes] | None = None,
    ) -> list[RemoteSegment]:
        """One run of the leader's copy task: clean up copies that never finished, then
        copy every rolled segment after the tiered lineage whose records all lie below
        ``upto`` (exclusive: the high watermark or last stable offset, so nothing a
        follower could still lose is tiered). Nothing below the shared remote log start
        is tiered again, whatever this replica's own log start."""
        remote_start = await self.metadata.log_start(topic_id, partition)
        start_of_log = max(log.log_start_offset, remote_start)
        segments = await self.metadata.list_segments(topic_id, partition)
        dangling = [s for s in segments if s.state is SegmentState.COPY_SEGMENT_STARTED]
        await self.deleter.delete_all(dangling)
        line = lineage(history_of(log), segments, remote_start, leader_epoch)
        if line.end >= 0 and log.log_start_offset > line.end + 1:
            # Local retention removed offsets that were never tiered.
            raise LocalGap(
                f"tiered up to {line.end}, the local log starts at {log.log_start_offset}"
            )
        next_offset = line.copy_from(start_of_log)
        copied: list[RemoteSegment] = []
        for segment in list(log.segments[:-1]):
            if segment.next_offset <= next_offset:
                continue  # tiered already
            if segment.next_offset > upto:
                break
            if segment.base_offset > next_offset:
                raise LocalGap(
                    f"next offset to tier {next_offset} is below the local segment at "
                    f"{segment.base_offset}"
                )
            copied.append(
                await self.copy_segment(log, segment, topic_id, partition, leader_epoch, snapshot)
            )
            next_offset = segment.next_offset
        return copied
