"""The classic engine as a ``PartitionLog``: this broker's replica of a partition (leader
for appends, ListOffsets, OffsetForLeaderEpoch, DeleteRecords and markers, as Kafka; any
replica for consumer reads from Fetch v11), with its tiered part behind it.

The data path is here: produce to a leader with the checks Kafka makes before and after the
append (KIP-890's verification asked of the transaction coordinator is in
``txn_verification``), and fetch, consumers up to the high watermark, followers up to the
log end (their fetch offset is their progress), with KIP-392 preferred read replicas: a
classic partition's slot carries its replica, and the long poll reads it again each time a
watch wakes (an append, a high watermark move). ListOffsets, OffsetForLeaderEpoch and
DeleteRecords are in ``classic_offsets``, markers in ``classic_markers``; reads below the
local log go to the tiered part (``broker.logs.tiered``)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.logs.classic.classic_markers import mark
from broker.logs.classic.classic_offsets import delete_records, end_offset_for_epoch, list_offset
from broker.logs.classic.partition import FOLLOWER, LEADER, ClassicPartition, now_ms
from broker.logs.fetch_slots import DENIED_REPLICA, FetchBudget, FetchSlot
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
from broker.server.metrics import METRICS
from protocol.records import BatchHeader
from storage.catalog import Topic

if TYPE_CHECKING:
    from broker.logs.classic.replica_manager import ClassicHost, ReplicaManager


class ClassicSlot(FetchSlot):
    """A fetched partition the classic engine opened: the replica on this broker it reads
    (None when refused or redirected), the one the fetch started with even if the
    partition's replica is replaced while the fetch waits."""

    __slots__ = ("classic", "moved")

    def __init__(self, topic_key: Any, partition: int) -> None:
        super().__init__(topic_key, partition, 0, -1)
        self.classic: ClassicPartition | None = None
        # A seal moved the slot's offset to the other log (``ReadPlan.moved``): asked by
        # each round's read, kept for the round's interests and every later round.
        self.moved = False


# Reads slots whose offsets are in the tiered part only (``tiered_read.read_tiered``).
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

    def begin_verification(self, topic: Topic, partition: int, batches: list[BatchHeader]) -> bool:
        return begin_verification(self._manager, topic, partition, batches)

    def needs_transaction_add(
        self, topic: Topic, partition: int, batches: list[BatchHeader], added: bool
    ) -> bool:
        # The add is the leader's verification (KIP-890 part 1), asked while the leader
        # sees no open transaction of the producer here, whoever added it before.
        return begin_verification(self._manager, topic, partition, batches)

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
            topic,
            partition,
            records,
            batches,
            log_append_time,
            plan.acks,
            plan.timeout_ms,
        )
        plan.record_bytes += len(records)
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
        # A consumer's offsets below a tiered partition's local log: read once from the
        # remote segments (the tiered part is not asked when there are none).
        remote: list[ClassicSlot] = [
            s
            for s in slots
            if _reads_here(s)
            and s.replica < 0
            and s.classic is not None
            and s.classic.is_remote(s.offset)
        ]
        if not remote:
            return 0
        return await self._read_tiered(self._broker, remote, budget, read_committed)

    async def start_round(
        self, slots: list[FetchSlot], budget: FetchBudget, plan: ReadPlan, read_committed: bool
    ) -> None:
        return None

    def read_round(
        self, slot: FetchSlot, budget: FetchBudget, plan: ReadPlan, read_committed: bool
    ) -> int:
        if not _reads_here(slot):
            return 0
        if slot.moved or self._moved(slot, plan):
            # A migration sealed since the fetch was routed: this log may have a gap at the
            # offset now (its records in the diskless log), and reading it would answer
            # with the batches after the gap. Nothing from here (ReadPlan.moved), now or
            # in a later round, and nothing to wait for (``interests``).
            slot.moved = True
            slot.data = b""
            return 0
        # Read again from the local log each round (a replica's log grows as it waits).
        return read_classic(self._broker, slot, budget, read_committed)

    def interests(self, slot: FetchSlot, plan: ReadPlan) -> list[tuple[UUID, int, int]]:
        # Asked right after the round's read_round (no await between: the same image),
        # which found whether the slot moved.
        if not _reads_here(slot) or slot.moved:
            return []
        assert slot.classic is not None
        return [(slot.classic.topic_id, slot.partition, slot.offset)]

    def _moved(self, slot: ClassicSlot, plan: ReadPlan) -> bool:
        assert slot.classic is not None
        return slot.replica < 0 and plan.moved(
            self, slot.classic.topic_id, slot.partition, slot.offset
        )

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


# -- Produce


def begin_verification(
    manager: ReplicaManager, topic: Topic, partition: int, batches: list[BatchHeader]
) -> bool:
    """KIP-890 part 1: the first transactional batch of a producer's transaction in this
    partition is checked against the transaction coordinator before it is appended (later
    ones extend a transaction the partition already has open). Headers only. When it is,
    the leader notes the batch's sequence as the lowest seen for that verification (Kafka's
    VerificationStateEntry, whether the verification then succeeds or not): until a batch
    of the transaction is appended here, one with a higher sequence is refused."""
    if not batches or not batches[0].is_transactional:
        return False
    p, _error = manager.leader_partition(topic.topic_id, partition)
    first = batches[0]
    if p is None or first.producer_id in p.txns.ongoing:
        return False
    p.producers.begin_verification(
        first.producer_id, first.base_sequence, first.producer_epoch, now_ms()
    )
    return True


def classic_append(
    manager: ReplicaManager,
    topic: Topic,
    partition: int,
    records: memoryview,
    batches: list[BatchHeader],
    log_append_time: bool,
    acks: int,
    timeout_ms: int,
) -> PartitionResult | asyncio.Future[PartitionResult]:
    """The result now (acks 0/1, errors, acks=all already replicated) or a future the
    high watermark completes. Only the leader appends (NOT_LEADER_OR_FOLLOWER elsewhere)."""
    p, error = manager.leader_partition(topic.topic_id, partition)
    if p is None:
        return PartitionResult(error)
    if p.sealed:
        # Being migrated to diskless (broker/logs/migration): retriable, nothing written; the
        # producer's retry goes to the diskless log once the seal is recorded.
        return PartitionResult(int(ErrorCode.not_leader_or_follower))
    if not batches:
        return PartitionResult(0, p.log.log_end_offset, -1, p.log_start_offset)
    try:
        result = p.append(records, batches, log_append_time, acks, timeout_ms)
    except OSError:
        # The disk refused (full, I/O error): retriable for the client, as Kafka answers.
        return PartitionResult(int(ErrorCode.kafka_storage_error))
    if not isinstance(result, PartitionResult) or result.error == 0:
        METRICS.produced_bytes.inc(len(records))
        METRICS.topics.produced(topic.topic_id, sum(b.record_count for b in batches), len(records))
    # Followers long-polling this partition have new data; so do consumers if the HW moved.
    manager.broker.watch.notify([(p.topic_id, p.index, p.log.log_end_offset)])
    return result


# -- Fetch

# Consumers may fetch from a follower from Fetch v11 on (KIP-392), as Kafka allows.
FOLLOWER_FETCH_VERSION = 11


def classic_slot(
    manager: ReplicaManager,
    key: Any,
    topic: Topic,
    part: Any,
    replica_id: int,
    version: int,
    rack: str | None,
) -> ClassicSlot:
    slot = ClassicSlot(key, part.partition)
    p = manager.get(topic.topic_id, part.partition)
    if replica_id == DENIED_REPLICA:
        slot.error = int(ErrorCode.cluster_authorization_failed)
        return slot
    if p is None or manager.stopping:
        slot.error = int(ErrorCode.not_leader_or_follower)
        return slot
    if replica_id >= 0:
        if p.role != LEADER:
            slot.error = int(ErrorCode.not_leader_or_follower)
            return slot
    elif p.role == LEADER:
        if rack and version >= FOLLOWER_FETCH_VERSION:
            slot.preferred = preferred_read_replica(manager.broker, p, rack)
    elif not (p.role == FOLLOWER and version >= FOLLOWER_FETCH_VERSION):
        slot.error = int(ErrorCode.not_leader_or_follower)
        return slot
    elif p.leader >= 0 and _not_copied_yet(manager, p, int(part.fetch_offset)):
        # A replica added to a migrated partition, still fetching the sealed classic log:
        # the consumer reads it from the leader (KIP-392's redirect) rather than getting
        # OFFSET_OUT_OF_RANGE for an offset this copy does not have yet.
        slot.preferred = p.leader
        return slot
    slot.classic = p
    slot.offset = int(part.fetch_offset)
    slot.max_bytes = int(part.partition_max_bytes)
    slot.replica = replica_id
    return slot


def _not_copied_yet(manager: ReplicaManager, p: ClassicPartition, offset: int) -> bool:
    if offset < p.log.log_end_offset:
        return False
    boundary = manager.broker.router.sealed_boundary(p.topic_id, p.index)
    return boundary is not None and offset < boundary


def preferred_read_replica(broker: ClassicHost, p: ClassicPartition, rack: str) -> int:
    """KIP-392: an in-sync replica in the consumer's rack, when the leader is not in it
    (-1: stay on the leader). Spread over the candidates by partition."""
    racks = {b.node_id: b.rack for b in broker.endpoints()}
    if racks.get(p.me) == rack:
        return -1
    candidates = [r for r in p.isr if r != p.me and racks.get(r) == rack]
    if not candidates:
        return -1
    return candidates[p.index % len(candidates)]


def read_classic(
    broker: ClassicHost, slot: ClassicSlot, budget: FetchBudget, read_committed: bool = False
) -> int:
    """Read a classic slot (again) within what the answer has left; returns the bytes
    found. A follower's fetch offset is recorded even when nothing fits any more (Kafka
    updates every fetched partition's follower state)."""
    p = slot.classic
    assert p is not None
    if slot.replica < 0 and p.is_remote(slot.offset):
        return 0  # read from the remote segment (broker.logs.tiered.tiered_read)
    hw_before = p.high_watermark
    manager = broker.classic
    throttle = (
        slot.replica >= 0
        and manager is not None
        and p.role == LEADER
        and manager.throttles(p, slot.replica, as_leader=True)
    )
    if throttle and manager is not None and manager.leader_quota.exceeded():
        # Over leader.replication.throttled.rate: no records for this catching-up follower
        # now, though its position still counts (Kafka's leader throttle).
        error, data = p.read(slot.offset, 0, slot.replica, False, False)
        data = b""
    else:
        error, data = p.read(
            slot.offset,
            budget.room(slot.max_bytes),
            slot.replica,
            read_committed and slot.replica < 0,
            budget.min_one,
        )
        if throttle and manager is not None:
            manager.leader_quota.record(len(data))
    slot.error, slot.data = error, data
    budget.take(len(data))
    if slot.replica >= 0 and p.role == LEADER:
        if manager is not None:
            manager.check_isr(p)
        if p.high_watermark > hw_before:
            # Consumers and acks=all produces waiting on the high watermark.
            broker.watch.notify([(p.topic_id, p.index, p.high_watermark)])
    return len(data)


def classic_entry(slot: ClassicSlot, read_committed: bool = False) -> dict[str, Any]:
    p = slot.classic
    assert p is not None
    lso = p.last_stable_offset
    entry: dict[str, Any] = {
        "error_code": slot.error,
        "high_watermark": p.high_watermark,
        "last_stable_offset": lso,
        "log_start_offset": p.log_start_offset,
        "records": slot.data if slot.preferred < 0 else b"",
    }
    if read_committed and slot.replica < 0 and slot.data and not slot.error:
        # The aborted transactions overlapping what is returned (at most up to the LSO):
        # the consumer drops their records (Kafka's collectAbortedTransactions).
        entry["aborted_transactions"] = [
            {"producer_id": a.producer_id, "first_offset": a.first_offset}
            for a in p.txns.aborted_between(slot.offset, lso)
        ]
    return entry
