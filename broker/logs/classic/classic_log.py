"""The classic engine as a ``PartitionLog``: this broker's replica of a partition (leader
for appends, ListOffsets, OffsetForLeaderEpoch, DeleteRecords and markers, as Kafka; any
replica for consumer reads from Fetch v11), with its tiered part behind it. The work is
done in ``broker.logs.classic`` (and ``broker.logs.tiered`` for the remote part)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard
from uuid import UUID

from broker.logs.classic.classic_append import classic_append, needs_verification
from broker.logs.classic.classic_markers import mark
from broker.logs.classic.classic_offsets import delete_records, end_offset_for_epoch, list_offset
from broker.logs.classic.classic_read import ClassicSlot, classic_entry, classic_slot, read_classic
from broker.logs.fetch_slots import FetchBudget, FetchSlot
from broker.logs.partition_log import (
    AppendPlan,
    DeleteAnswer,
    DeleteAsk,
    EpochAnswer,
    EpochAsk,
    OffsetAnswer,
    OffsetAsk,
    PartitionResult,
    ReadPlan,
)
from protocol.records import BatchHeader
from storage.catalog import Topic

if TYPE_CHECKING:
    from broker.logs.classic.replica_manager import ClassicHost, ReplicaManager


# Reads the slots whose offsets are in the tiered part only (``tiered_read.read_tiered``).
ReadTiered = Callable[["ClassicHost", list[ClassicSlot], FetchBudget, bool], Awaitable[int]]


class ClassicLog:
    """Read ``broker.classic`` on every call: the router sends nothing here without it.
    Reads below a replica's local log go to its tiered part (``read_tiered``, given by
    ``broker.logs.engines``: the tiered engine sits on top of this one)."""

    __slots__ = ("_broker", "_read_tiered")

    def __init__(self, broker: ClassicHost, read_tiered: ReadTiered) -> None:
        self._broker = broker
        self._read_tiered = read_tiered

    @property
    def _manager(self) -> ReplicaManager:
        manager = self._broker.classic
        assert manager is not None
        return manager

    def needs_verification(self, topic: Topic, partition: int, batches: list[BatchHeader]) -> bool:
        return needs_verification(self._manager, topic, partition, batches)

    def append(
        self,
        topic: Topic,
        partition: int,
        records: memoryview,
        batches: list[BatchHeader],
        log_append_time: bool,
        plan: AppendPlan,
    ) -> PartitionResult | int:
        outcome = classic_append(
            self._manager,
            self._broker.topics,
            topic,
            partition,
            records,
            batches,
            log_append_time,
            plan.acks,
            plan.timeout_ms,
        )
        plan.local_bytes += len(records)
        if isinstance(outcome, PartitionResult):
            return outcome
        plan.waits.append(outcome)
        return -len(plan.waits)  # -1 - its index

    def open_read(self, key: Any, topic: Topic, part: Any, plan: ReadPlan) -> FetchSlot:
        return classic_slot(
            self._manager, key, topic, part, plan.replica_id, plan.version, plan.rack
        )

    async def read_below(
        self, slots: list[FetchSlot], budget: FetchBudget, read_committed: bool
    ) -> int:
        # Offsets below a tiered partition's local log: read once from the remote segments.
        local: list[ClassicSlot] = [s for s in slots if _reads_here(s)]
        if not local:
            return 0
        return await self._read_tiered(self._broker, local, budget, read_committed)

    async def start_round(
        self, slots: list[FetchSlot], budget: FetchBudget, plan: ReadPlan, read_committed: bool
    ) -> None:
        return None

    def read_round(
        self, slot: FetchSlot, budget: FetchBudget, plan: ReadPlan, read_committed: bool
    ) -> int:
        # Read again from the local log each round (a replica's log grows as it waits).
        return read_classic(self._broker, slot, budget, read_committed) if _reads_here(slot) else 0

    def interests(self, slot: FetchSlot, plan: ReadPlan) -> list[tuple[UUID, int, int]]:
        if not _reads_here(slot):
            return []
        assert slot.classic is not None
        return [(slot.classic.topic_id, slot.partition, slot.offset)]

    async def end_reads(self, slots: list[FetchSlot], plan: ReadPlan) -> None:
        return None

    async def describe(self, slots: list[FetchSlot], plan: ReadPlan) -> None:
        return None

    def entry(self, slot: FetchSlot, plan: ReadPlan, read_committed: bool) -> dict[str, Any]:
        if isinstance(slot, ClassicSlot) and slot.classic is not None:
            return classic_entry(slot, read_committed)
        return {}

    async def list_offsets(
        self, asks: Sequence[OffsetAsk], read_committed: bool
    ) -> list[OffsetAnswer]:
        manager = self._manager
        return [
            OffsetAnswer(
                *await list_offset(manager, a.topic_id, a.partition, a.timestamp, read_committed)
            )
            for a in asks
        ]

    async def end_offsets(self, asks: Sequence[EpochAsk]) -> list[EpochAnswer]:
        manager = self._manager
        return [
            EpochAnswer(*end_offset_for_epoch(manager, a.topic_id, a.partition, a.epoch))
            for a in asks
        ]

    async def delete_records(self, asks: Sequence[DeleteAsk]) -> list[DeleteAnswer]:
        manager = self._manager
        return [
            DeleteAnswer(*await delete_records(manager, a.topic_id, a.partition, a.offset))
            for a in asks
        ]

    async def write_marker(
        self,
        topic_id: UUID,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> int:
        return await mark(
            self._manager,
            topic_id,
            partition,
            producer_id,
            producer_epoch,
            commit,
            coordinator_epoch,
        )


def _reads_here(slot: FetchSlot) -> TypeGuard[ClassicSlot]:
    """A replica on this broker serves the slot (not a KIP-392 redirect, not refused)."""
    return isinstance(slot, ClassicSlot) and slot.classic is not None and slot.preferred < 0
