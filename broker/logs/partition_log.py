"""What a request handler asks of a partition's log, whichever engine holds it.

``broker.logs.router`` picks the log for a call (``LogRouter.route``); the handler calls
it and never asks which engine that is. Implemented by ``DisklessLog`` (the batch
coordinator and object store, shared by every broker), ``ClassicLog`` (this broker's
replica, its tiered part behind it) and ``Answered`` (a call the router already answered:
a refusal, or the sealed classic log below a migration boundary).

Calls that a diskless log serves for many partitions at once (one coordinator round trip)
take a list: a handler routes each partition, groups them by log (``by_log``) and calls
each log once. A produce or fetch request's partitions go into a plan the request owns
(``AppendPlan``, ``ReadPlan``): the diskless appends are submitted, and the diskless finds
made, once for the whole request, in request order.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.logs.fetch_slots import FetchBudget, FetchSlot
from protocol.codec import RecordChunks
from protocol.records import BatchHeader
from storage.catalog import Topic
from storage.coordinator import FindRequest, FindResult, LogInfo
from storage.outage import is_outage

A = TypeVar("A")

_log = logging.getLogger(__name__)


@dataclass(slots=True)
class PartitionAppend:
    """One partition's records from one produce request, already validated."""

    topic_id: UUID
    partition: int
    records: memoryview
    batches: list[BatchHeader]
    log_append_time: bool


class PartitionResult(NamedTuple):
    """One partition's answer to an append, from whichever engine took it."""

    # A NamedTuple: one per partition of every produce request (frozen dataclasses are
    # several times slower to make).
    error: int
    base_offset: int = -1
    log_append_time: int = -1
    log_start_offset: int = -1


class OffsetAsk(NamedTuple):
    """ListOffsets of one partition: a timestamp, or EARLIEST/LATEST/... (-2, -1, ...)."""

    topic_id: UUID
    partition: int
    timestamp: int


class OffsetAnswer(NamedTuple):
    error: int
    offset: int = -1
    timestamp: int = -1
    leader_epoch: int = -1


class EpochAsk(NamedTuple):
    """OffsetForLeaderEpoch of one partition: the epoch asked about, and this broker's
    current leader epoch of the partition."""

    topic_id: UUID
    partition: int
    epoch: int
    current: int


class EpochAnswer(NamedTuple):
    error: int
    leader_epoch: int = -1
    end_offset: int = -1


class DeleteAsk(NamedTuple):
    """DeleteRecords of one partition: up to ``offset`` (-1: the high watermark)."""

    topic_id: UUID
    partition: int
    offset: int


class DeleteAnswer(NamedTuple):
    error: int
    low_watermark: int = -1


@dataclass(slots=True)
class AppendPlan:
    """One Produce request's appends. ``PartitionLog.append`` answers each partition with
    a slot: a ``PartitionResult`` now, an index (>= 0) into ``diskless`` (answered when
    the appender commits them, submitted once for the request), or -1 - i for the i-th
    of ``waits`` (acks=all on a log whose high watermark completes it)."""

    acks: int
    timeout_ms: int
    diskless: list[PartitionAppend] = field(default_factory=list)
    waits: list[asyncio.Future[PartitionResult]] = field(default_factory=list)
    # The record bytes handed to the logs, both engines' (counted per AZ by the handler).
    record_bytes: int = 0


@dataclass(slots=True)
class ReadPlan:
    """One Fetch request's reads: who asks (``replica_id`` >= 0: a follower replicating),
    its version and rack, the KIP-392 redirect finder of diskless partitions (None: no
    redirect), where a diskless answer's log starts (``log_start``: the router's), the log
    a consumer's read at an offset goes to now (``reads``: the router's; None: the logs
    that opened the slots), and the diskless finds, made once per round for the whole
    request, with their results, record bytes and the offsets of redirected partitions."""

    replica_id: int
    version: int
    rack: str | None
    prefer: Callable[[Topic, int], int] | None
    log_start: Callable[[UUID, int, int], int]
    reads: Callable[[UUID, int, int], PartitionLog] | None = None
    finds: list[FindRequest] = field(default_factory=list)
    results: list[FindResult] = field(default_factory=list)
    records: list[RecordChunks | None] = field(default_factory=list)
    infos: dict[int, LogInfo] = field(default_factory=dict)

    def moved(self, log: PartitionLog, topic_id: UUID, partition: int, offset: int) -> bool:
        """Whether a consumer's slot opened by ``log`` at ``offset`` is no longer that log's
        to read. A fetch routes each partition once, but its long poll reads it again
        until it ends; a migration sealed meanwhile moves offsets between the logs (the
        classic log sealed at B continues at H, offsets [B, H) in the diskless log), and
        the old log would answer with what it holds past them: records skipped. Such a
        slot stops reading and waiting (answered without records); the consumer asks
        again and is routed anew. (Followers always read the classic log.)"""
        return (
            self.reads is not None
            and self.replica_id < 0
            and self.reads(topic_id, partition, offset) is not log
        )


class PartitionLog(Protocol):
    """One engine's answers for the partitions the router sends it."""

    def begin_verification(self, topic: Topic, partition: int, batches: list[BatchHeader]) -> bool:
        """KIP-890: whether the batches open a transaction in this partition, so the
        producer's transaction must be verified with its coordinator before they are
        appended; the engine notes that the verification began (the lowest sequence it
        saw: a batch with a higher one is refused until the transaction has one here)."""
        ...

    def needs_transaction_add(
        self, topic: Topic, partition: int, batches: list[BatchHeader], added: bool
    ) -> bool:
        """KIP-890 part 2 (Produce v12+): whether the partition must be added to the
        producer's transaction before the batches are appended (``added``: this broker
        added it to the same transaction already)."""
        ...

    def append(
        self,
        topic: Topic,
        partition: int,
        records: memoryview,
        batches: list[BatchHeader],
        log_append_time: bool,
        plan: AppendPlan,
    ) -> PartitionResult | int:
        """Append validated batches (producer-state checks are the log's); the slot of
        ``AppendPlan``."""
        ...

    def open_read(self, key: Any, topic: Topic, part: Any, plan: ReadPlan) -> FetchSlot:
        """The slot of one Fetch partition (``part``: its fetch_offset, partition_max_bytes);
        this log reads it (the handler keeps which log opened which slot)."""
        ...

    # A Fetch's long poll, over its slots in request order (the client rotates it): the
    # answer's size limits (``FetchBudget``) are shared by every log of the request.

    async def read_below(
        self, slots: list[FetchSlot], budget: FetchBudget, read_committed: bool
    ) -> int:
        """Before the rounds, first in the budget: what no round reads again (offsets in a
        classic log's tiered part: always there, never waited for). Bytes read."""
        ...

    async def start_round(
        self, slots: list[FetchSlot], budget: FetchBudget, plan: ReadPlan, read_committed: bool
    ) -> None:
        """A round begins (the diskless finds of the whole request, within ``budget``)."""
        ...

    def read_round(
        self, slot: FetchSlot, budget: FetchBudget, plan: ReadPlan, read_committed: bool
    ) -> int:
        """The slot's part of this round within what the answer has left; bytes available."""
        ...

    def interests(self, slot: FetchSlot, plan: ReadPlan) -> list[tuple[UUID, int, int]]:
        """(topic id, partition, offset) whose advance wakes the long poll (none: nothing
        to wait for)."""
        ...

    async def end_reads(self, slots: list[FetchSlot], plan: ReadPlan) -> None:
        """The rounds are over: fetch the record bytes found."""
        ...

    async def describe(self, slots: list[FetchSlot], plan: ReadPlan) -> None:
        """The offsets of slots answered without records (KIP-392 redirects)."""
        ...

    def entry(self, slot: FetchSlot, plan: ReadPlan, read_committed: bool) -> dict[str, Any]:
        """The slot's fields of the Fetch answer (over the defaults: no records, -1s)."""
        ...

    async def list_offsets(
        self, asks: Sequence[OffsetAsk], read_committed: bool
    ) -> list[OffsetAnswer]: ...

    async def end_offsets(self, asks: Sequence[EpochAsk]) -> list[EpochAnswer]: ...

    async def delete_records(self, asks: Sequence[DeleteAsk]) -> list[DeleteAnswer]: ...

    async def write_marker(
        self,
        topic_id: UUID,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> int:
        """A transaction's COMMIT/ABORT marker (WriteTxnMarkers); the Kafka error code."""
        ...


def by_log(
    routed: Sequence[tuple[PartitionLog, A]],
) -> list[tuple[PartitionLog, list[int], list[A]]]:
    """The asks grouped by the log serving them, in first-seen order: (log, the asks'
    positions in ``routed``, the asks)."""
    groups: dict[int, tuple[PartitionLog, list[int], list[A]]] = {}
    for i, (log, ask) in enumerate(routed):
        group = groups.get(id(log))
        if group is None:
            group = groups[id(log)] = (log, [], [])
        group[1].append(i)
        group[2].append(ask)
    return list(groups.values())


async def ask_each(
    routed: Sequence[tuple[PartitionLog, A]],
    call: Callable[[PartitionLog, list[A]], Any],
    failed: Callable[[int], Any],
) -> list[Any]:
    """Each log called once with its asks (``call(log, asks)``, awaited in turn); the
    answers in ``routed``'s order.

    A log whose storage cannot be reached (the batch coordinator's database or the object
    store, after their own retries: ``storage.outage.is_outage``) answers each of its asks
    ``failed(KAFKA_STORAGE_ERROR)``, as Kafka answers the partitions of an offline log
    directory: the client retries them, and the request's other partitions are answered as
    usual. Without this the handler failed as a whole, and a request without a top-level
    error code (OffsetForLeaderEpoch) could only be answered by closing the connection."""
    answers: list[Any] = [None] * len(routed)
    for log, positions, asks in by_log(routed):
        try:
            got = await call(log, asks)
        except Exception as exc:
            if not is_outage(exc):
                raise
            _log.debug("%d partitions answered KAFKA_STORAGE_ERROR: %s", len(asks), exc)
            got = [failed(int(ErrorCode.kafka_storage_error))] * len(asks)
        for i, answer in zip(positions, got, strict=True):
            answers[i] = answer
    return answers


class Answered:
    """A log whose answer the router already has: a refusal (``error`` for every call), or
    what the sealed classic log below a migration boundary answered (``offsets``,
    ``epochs``)."""

    __slots__ = ("by_request_handler", "epochs", "error", "offsets")

    def __init__(
        self,
        error: int,
        offsets: OffsetAnswer | None = None,
        epochs: EpochAnswer | None = None,
        by_request_handler: bool = True,
    ) -> None:
        self.error = error
        self.offsets = offsets
        self.epochs = epochs
        # Where Kafka gives this refusal: in its request handler (unknown topic or
        # partition, authorization: a fetch answers an empty aborted-transactions list)
        # or in its log layer (null), which a fetch answer shows.
        self.by_request_handler = by_request_handler

    def begin_verification(self, topic: Topic, partition: int, batches: list[BatchHeader]) -> bool:
        return False

    def needs_transaction_add(
        self, topic: Topic, partition: int, batches: list[BatchHeader], added: bool
    ) -> bool:
        return False

    def append(
        self,
        topic: Topic,
        partition: int,
        records: memoryview,
        batches: list[BatchHeader],
        log_append_time: bool,
        plan: AppendPlan,
    ) -> PartitionResult | int:
        return PartitionResult(self.error)

    def open_read(self, key: Any, topic: Topic | None, part: Any, plan: ReadPlan) -> FetchSlot:
        return FetchSlot(key, part.partition, self.error, -1)

    async def read_below(
        self, slots: list[FetchSlot], budget: FetchBudget, read_committed: bool
    ) -> int:
        return 0

    async def start_round(
        self, slots: list[FetchSlot], budget: FetchBudget, plan: ReadPlan, read_committed: bool
    ) -> None:
        return None

    def read_round(
        self, slot: FetchSlot, budget: FetchBudget, plan: ReadPlan, read_committed: bool
    ) -> int:
        return 0

    def interests(self, slot: FetchSlot, plan: ReadPlan) -> list[tuple[UUID, int, int]]:
        return []

    async def end_reads(self, slots: list[FetchSlot], plan: ReadPlan) -> None:
        return None

    async def describe(self, slots: list[FetchSlot], plan: ReadPlan) -> None:
        return None

    def entry(self, slot: FetchSlot, plan: ReadPlan, read_committed: bool) -> dict[str, Any]:
        return {}

    async def list_offsets(
        self, asks: Sequence[OffsetAsk], read_committed: bool
    ) -> list[OffsetAnswer]:
        return [self.offsets or OffsetAnswer(self.error)] * len(asks)

    async def end_offsets(self, asks: Sequence[EpochAsk]) -> list[EpochAnswer]:
        return [self.epochs or EpochAnswer(self.error)] * len(asks)

    async def delete_records(self, asks: Sequence[DeleteAsk]) -> list[DeleteAnswer]:
        return [DeleteAnswer(self.error)] * len(asks)

    async def write_marker(
        self,
        topic_id: UUID,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> int:
        return self.error
