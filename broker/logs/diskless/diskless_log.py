"""The diskless engine as a ``PartitionLog``: one log per partition in the batch
coordinator and the object store, which every broker serves. Calls for many partitions
are one coordinator round trip; appends go to the appender, once per Produce request
(``AppendPlan``), and reads to the request's finds (``ReadPlan``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.logs.fetch_slots import FetchBudget, FetchSlot
from broker.logs.partition_log import (
    AppendPlan,
    DeleteAnswer,
    DeleteAsk,
    EpochAnswer,
    EpochAsk,
    OffsetAnswer,
    OffsetAsk,
    PartitionAppend,
    PartitionResult,
    ReadPlan,
)
from protocol.record_scan import first_at_or_after, max_timestamp_record
from protocol.records import BatchHeader
from storage.catalog import Topic
from storage.coordinator import (
    MAX_TIMESTAMP,
    CoordinatorUnavailable,
    FindRequest,
    ListOffsetsRequest,
    PartitionKey,
)

if TYPE_CHECKING:
    from broker.logs.diskless.diskless_read import Fetcher
    from storage.coordinator import BatchCoordinator
    from storage.objects.block_cache import BlockCache

log = logging.getLogger(__name__)


class DisklessHost(Protocol):
    """What the diskless engine reads of its broker: the batch coordinator, the reader of
    its batches, the block cache and each partition's leader epoch."""

    @property
    def coordinator(self) -> BatchCoordinator: ...

    @property
    def fetcher(self) -> Fetcher: ...

    @property
    def cache(self) -> BlockCache: ...

    def leader_epoch(self, topic_id: UUID, partition: int) -> int: ...


class DisklessLog:
    __slots__ = ("_broker",)

    def __init__(self, broker: DisklessHost) -> None:
        self._broker = broker

    def begin_verification(self, topic: Topic, partition: int, batches: list[BatchHeader]) -> bool:
        # The batch coordinator checks a transactional batch against its transaction
        # when it commits it.
        return False

    def needs_transaction_add(
        self, topic: Topic, partition: int, batches: list[BatchHeader], added: bool
    ) -> bool:
        # Under transaction version 2 every transaction has its own epoch: a partition
        # this broker added to it stays in it until it ends. (Skipping is only a saving:
        # the batch coordinator still checks the batch when it commits it.)
        return not added

    def append(
        self,
        topic: Topic,
        partition: int,
        records: memoryview,
        batches: list[BatchHeader],
        log_append_time: bool,
        plan: AppendPlan,
    ) -> PartitionResult | int:
        plan.diskless.append(
            PartitionAppend(topic.topic_id, partition, records, batches, log_append_time)
        )
        plan.record_bytes += len(records)
        return len(plan.diskless) - 1

    def open_read(self, key: Any, topic: Topic, part: Any, plan: ReadPlan) -> FetchSlot:
        prefer = plan.prefer
        if prefer is not None and (preferred := prefer(topic, part.partition)) >= 0:
            # Like Kafka: no records, only the replica to switch to (librdkafka skips
            # records sent alongside a preferred replica anyway).
            log_key = PartitionKey(topic.topic_id, part.partition)
            slot = FetchSlot(key, part.partition, 0, -1, preferred, log_key)
        else:
            slot = FetchSlot(key, part.partition, 0, len(plan.finds))
            plan.finds.append(
                FindRequest(
                    topic.topic_id, part.partition, part.fetch_offset, part.partition_max_bytes
                )
            )
        return slot

    async def read_below(
        self, slots: list[FetchSlot], budget: FetchBudget, read_committed: bool
    ) -> int:
        return 0

    async def start_round(
        self, slots: list[FetchSlot], budget: FetchBudget, plan: ReadPlan, read_committed: bool
    ) -> None:
        # Every diskless partition of the request in one find, within what the answer has
        # left; each slot then takes its share in the request's order (``read_round``).
        finds = plan.finds
        fetcher = self._broker.fetcher
        plan.results = await fetcher.find(finds, budget.left, read_committed) if finds else []

    def read_round(
        self, slot: FetchSlot, budget: FetchBudget, plan: ReadPlan, read_committed: bool
    ) -> int:
        # (The batch coordinator applies the same limits, but to the diskless partitions
        # alone: the request's other logs share the budget.)
        i = slot.find_index
        if i < 0:
            return 0
        result = plan.results[i]
        if not result.batches:
            return 0  # nothing found: nothing to keep, nothing taken from the budget
        result = plan.results[i] = budget.keep(result, plan.finds[i].max_bytes)
        return sum(b.byte_size for b in result.batches)

    def interests(self, slot: FetchSlot, plan: ReadPlan) -> list[tuple[UUID, int, int]]:
        if slot.find_index < 0:
            return []
        f = plan.finds[slot.find_index]
        if plan.moved(self, f.topic_id, f.partition, f.offset):
            # Sealed for classic at this offset since the fetch was routed: nothing more
            # will come here; the consumer asks again and reads the classic log, rather
            # than after the whole long poll. (What was found below the seal stands.)
            return []
        return [(f.topic_id, f.partition, f.offset)]

    async def end_reads(self, slots: list[FetchSlot], plan: ReadPlan) -> None:
        broker = self._broker
        # The epoch is patched into the batches found: none to look up without them.
        epochs = [
            broker.leader_epoch(f.topic_id, f.partition) if r.batches else -1
            for f, r in zip(plan.finds, plan.results, strict=True)
        ]
        plan.records = await broker.fetcher.read(plan.results, epochs)

    async def describe(self, slots: list[FetchSlot], plan: ReadPlan) -> None:
        # Redirected partitions carry no records but, as in Kafka, their offsets: one lookup
        # for all of them (a consumer is redirected once per partition, then fetches
        # elsewhere).
        redirected = [slot for slot in slots if slot.log is not None]
        if not redirected:
            return
        try:
            found = await self._broker.coordinator.log_info([s.log for s in redirected if s.log])
        except CoordinatorUnavailable as exc:
            log.warning("offsets of redirected partitions unavailable: %s", exc)
            return
        plan.infos.update({id(s): info for s, info in zip(redirected, found, strict=True)})

    def entry(self, slot: FetchSlot, plan: ReadPlan, read_committed: bool) -> dict[str, Any]:
        i = slot.find_index
        if i < 0:
            # Redirected (KIP-392): no find, only the offsets ``describe`` looked up.
            info = plan.infos.get(id(slot))
            if info is None or info.error:
                return {}
            return {
                "high_watermark": info.high_watermark,
                "last_stable_offset": info.high_watermark,
                "log_start_offset": info.log_start_offset,
            }
        result = plan.results[i]
        data = plan.records[i]
        f = plan.finds[i]
        out: dict[str, Any] = {
            "error_code": result.error,
            "high_watermark": result.high_watermark,
            "last_stable_offset": result.last_stable_offset,
            # A migrated partition's log starts in its sealed classic log, if any.
            "log_start_offset": plan.log_start(f.topic_id, f.partition, result.log_start_offset),
            "records": data if data is not None else b"",
        }
        if result.aborted is not None:
            out["aborted_transactions"] = [
                {"producer_id": a.producer_id, "first_offset": a.first_offset}
                for a in result.aborted
            ]
        return out

    async def list_offsets(
        self, asks: Sequence[OffsetAsk], read_committed: bool
    ) -> list[OffsetAnswer]:
        broker = self._broker
        lookups = [ListOffsetsRequest(a.topic_id, a.partition, a.timestamp) for a in asks]
        results = await broker.coordinator.list_offsets(lookups, read_committed)
        answers: list[OffsetAnswer] = []
        for lookup, result in zip(lookups, results, strict=True):
            answer = OffsetAnswer(result.error, result.offset, result.timestamp)
            if not result.error and result.offset >= 0:
                epoch = broker.leader_epoch(lookup.topic_id, lookup.partition)
                answer = answer._replace(leader_epoch=epoch)
                if lookup.timestamp >= 0 or lookup.timestamp == MAX_TIMESTAMP:
                    answer = await self._to_record(lookup, answer)
            answers.append(answer)
        return answers

    async def _to_record(self, lookup: ListOffsetsRequest, answer: OffsetAnswer) -> OffsetAnswer:
        """Narrow a batch-level answer down to the record, reading that one batch.

        The coordinator indexes batches only; Kafka answers with the exact record, and
        consumers resetting by time rely on that.
        """
        broker = self._broker
        (found,) = await broker.fetcher.find(
            [FindRequest(lookup.topic_id, lookup.partition, answer.offset, 1)], 1
        )
        if found.error or not found.batches:
            return answer
        batch = found.batches[0]
        views = await broker.cache.read(batch.object_key, batch.byte_offset, batch.byte_size)
        data = b"".join(views)
        if lookup.timestamp == MAX_TIMESTAMP:
            hit = max_timestamp_record(data)
        else:
            hit = first_at_or_after(data, lookup.timestamp)
        if hit is None:
            return answer
        delta, timestamp = hit
        offset = max(batch.base_offset + delta, found.log_start_offset)
        return answer._replace(offset=offset, timestamp=timestamp)

    async def end_offsets(self, asks: Sequence[EpochAsk]) -> list[EpochAnswer]:
        infos = await self._broker.coordinator.log_info(
            [PartitionKey(a.topic_id, a.partition) for a in asks]
        )
        answers: list[EpochAnswer] = []
        for ask, info in zip(asks, infos, strict=True):
            if info.error:
                answers.append(EpochAnswer(info.error))
            elif 0 <= ask.epoch <= ask.current:
                # A diskless log never diverges: whichever leader wrote an offset, every
                # epoch up to the current one ends at the high watermark.
                answers.append(EpochAnswer(0, ask.epoch, info.high_watermark))
            else:
                # A newer epoch than ours (or -1) is unknown: Kafka answers -1/-1 without
                # error.
                answers.append(EpochAnswer(0))
        return answers

    async def delete_records(self, asks: Sequence[DeleteAsk]) -> list[DeleteAnswer]:
        results = await self._broker.coordinator.delete_records(
            [(PartitionKey(a.topic_id, a.partition), a.offset) for a in asks],
            int(time.time() * 1000),
        )
        return [DeleteAnswer(r.error, r.low_watermark) for r in results]

    async def write_marker(
        self,
        topic_id: UUID,
        partition: int,
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        coordinator_epoch: int,
    ) -> int:
        # Written by the transaction's coordinator into the shared log directly (EndTxn):
        # a leader is never asked (broker/transactions/write_txn_markers.py).
        return int(ErrorCode.invalid_request)
