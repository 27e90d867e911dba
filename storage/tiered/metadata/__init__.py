"""Remote log segment metadata (KIP-405's RemoteLogSegmentMetadata), kept in the batch
coordinator's database: the coordinator already orders the cluster's data and is backed up
and replicated as one, so tiered data needs no private metadata topic or file.

A segment's life, each step one database round trip:

    add_segment (COPY_SEGMENT_STARTED) → upload → COPY_SEGMENT_FINISHED
        → DELETE_SEGMENT_STARTED → delete objects → DELETE_SEGMENT_FINISHED → delete_segments

A crash between two steps leaves the row in the earlier state: a STARTED copy is never
read (only FINISHED segments are) and is deleted and retried by the next copier; a STARTED
delete is finished by the next deleter. Every backend passes
tests/unit/test_remote_log_metadata_contract.py.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Any
from uuid import UUID


class SegmentState(StrEnum):
    COPY_SEGMENT_STARTED = "COPY_SEGMENT_STARTED"
    COPY_SEGMENT_FINISHED = "COPY_SEGMENT_FINISHED"
    DELETE_SEGMENT_STARTED = "DELETE_SEGMENT_STARTED"
    DELETE_SEGMENT_FINISHED = "DELETE_SEGMENT_FINISHED"


# The states a segment may move to from each state (Kafka's RemoteLogSegmentState
# transitions): a copy that never finished may go straight to deletion.
ALLOWED_TRANSITIONS: dict[SegmentState, tuple[SegmentState, ...]] = {
    SegmentState.COPY_SEGMENT_STARTED: (
        SegmentState.COPY_SEGMENT_FINISHED,
        SegmentState.DELETE_SEGMENT_STARTED,
    ),
    SegmentState.COPY_SEGMENT_FINISHED: (SegmentState.DELETE_SEGMENT_STARTED,),
    SegmentState.DELETE_SEGMENT_STARTED: (SegmentState.DELETE_SEGMENT_FINISHED,),
    SegmentState.DELETE_SEGMENT_FINISHED: (),
}


def predecessors(state: SegmentState) -> tuple[SegmentState, ...]:
    return tuple(s for s, nexts in ALLOWED_TRANSITIONS.items() if state in nexts)


# (leader epoch, first offset it wrote) for every epoch with records in the segment,
# ascending: the slice of the leader's epoch cache that covers the segment.
EpochVector = tuple[tuple[int, int], ...]


@dataclass(frozen=True, slots=True)
class RemoteSegment:
    topic_id: UUID
    partition: int
    segment_id: UUID
    start_offset: int
    end_offset: int  # inclusive: the segment's last offset
    max_timestamp: int
    leader_epoch: int  # the copying leader's epoch (not necessarily in ``epochs``)
    epochs: EpochVector
    size: int  # bytes of the .log file
    broker_id: int  # the broker that copied it
    state: SegmentState = SegmentState.COPY_SEGMENT_STARTED
    event_ms: int = 0  # when the state last changed (the caller's clock)

    def __post_init__(self) -> None:
        if self.end_offset < self.start_offset:
            raise ValueError(f"segment {self.segment_id}: end before start")
        if not self.epochs or self.epochs[0][1] > self.start_offset:
            raise ValueError(f"segment {self.segment_id}: epoch vector must cover its start")
        for (e1, s1), (e2, s2) in zip(self.epochs, self.epochs[1:], strict=False):
            if e2 <= e1 or s2 <= s1 or s2 > self.end_offset:
                raise ValueError(f"segment {self.segment_id}: bad epoch vector {self.epochs}")

    def with_state(self, state: SegmentState, event_ms: int) -> RemoteSegment:
        return replace(self, state=state, event_ms=event_ms)

    def epoch_at(self, offset: int) -> int:
        """The epoch that wrote ``offset`` according to this segment."""
        epoch = self.epochs[0][0]
        for e, start in self.epochs:
            if start > offset:
                break
            epoch = e
        return epoch


def encode_epochs(epochs: EpochVector) -> str:
    """The epoch vector as text ("epoch:start,..."): one column on both backends, and
    readable in a SQL shell."""
    return ",".join(f"{e}:{s}" for e, s in epochs)


def decode_epochs(text: str) -> EpochVector:
    out = []
    for item in text.split(","):
        epoch, start = item.split(":")
        out.append((int(epoch), int(start)))
    return tuple(out)


class SegmentExists(Exception):
    """add_segment of a segment id already known."""


class RemoteLogMetadataStore(ABC):
    async def start(self) -> None:  # noqa: B027 - optional hook
        pass

    async def close(self) -> None:  # noqa: B027 - optional hook
        pass

    @abstractmethod
    async def add_segment(self, segment: RemoteSegment) -> None:
        """Record a copy that is starting (``segment.state`` must be COPY_SEGMENT_STARTED).
        Raises SegmentExists for a known segment id."""

    @abstractmethod
    async def update_state(
        self, segment_id: UUID, state: SegmentState, event_ms: int
    ) -> RemoteSegment | None:
        """Move a segment to ``state`` if that is an allowed transition from its current one
        (ALLOWED_TRANSITIONS); returns the segment as updated, or None when it is unknown
        or in a state that does not lead there (nothing changed)."""

    @abstractmethod
    async def list_segments(
        self,
        topic_id: UUID,
        partition: int,
        *,
        from_offset: int | None = None,
        states: Sequence[SegmentState] | None = None,
    ) -> list[RemoteSegment]:
        """A partition's segments ordered by (start offset, segment id): those ending at or
        after ``from_offset`` when given, in ``states`` when given. Lineage (which of them
        belong to a leader's history) is decided by ``storage.tiered.lineage``."""

    @abstractmethod
    async def delete_segments(self, segment_ids: Sequence[UUID]) -> int:
        """Forget these segments' metadata (after their objects are gone); returns how many
        were known."""

    @abstractmethod
    async def delete_topics(self, topic_ids: Sequence[UUID]) -> int:
        """Forget every segment and log start of these (deleted) topics; returns how many
        segments."""

    @abstractmethod
    async def topic_partitions(self) -> dict[UUID, set[int]]:
        """Every (topic, partition) with segments in any state: the sweep of deleted topics
        whose replicas were all down when they were deleted."""

    @abstractmethod
    async def log_start(self, topic_id: UUID, partition: int) -> int:
        """The partition's remote log start offset (0 when never set)."""

    @abstractmethod
    async def advance_log_start(self, topic_id: UUID, partition: int, offset: int) -> int:
        """Move the remote log start up to ``offset`` (never down); returns it after.

        Kept here, shared by every leader, and not only in a leader's local log: a replica
        elected with an older log start (unclean election) must not tier again offsets
        retention already deleted, which would leave a hole in the lineage below the
        offsets retention kept (found by the lineage simulator)."""


def segment_from_row(row: Sequence[Any], uuid_of: Callable[[Any], UUID]) -> RemoteSegment:
    """A segment from a row of the backends' common column order; ``uuid_of`` turns the
    backend's stored id (SQLite bytes, asyncpg's UUID) into a plain UUID."""
    return RemoteSegment(
        uuid_of(row[0]),
        row[1],
        uuid_of(row[2]),
        row[3],
        row[4],
        row[5],
        row[6],
        decode_epochs(row[7]),
        row[8],
        row[9],
        SegmentState(row[10]),
        row[11],
    )


def segment_to_row(s: RemoteSegment, id_of: Callable[[UUID], Any]) -> tuple[Any, ...]:
    """The inverse of :func:`segment_from_row`: the columns in the common order, ``id_of``
    turning a UUID into what the backend stores (SQLite bytes, the UUID for asyncpg)."""
    return (
        id_of(s.topic_id),
        s.partition,
        id_of(s.segment_id),
        s.start_offset,
        s.end_offset,
        s.max_timestamp,
        s.leader_epoch,
        encode_epochs(s.epochs),
        s.size,
        s.broker_id,
        s.state.value,
        s.event_ms,
    )


def check_new(segment: RemoteSegment) -> None:
    """A segment enters the store only as a copy just begun."""
    if segment.state is not SegmentState.COPY_SEGMENT_STARTED:
        raise ValueError("a segment is added in COPY_SEGMENT_STARTED")
