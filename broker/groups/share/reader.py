"""Reading a partition's log for a share fetch: the Fetch read path's logs (the router
picks the diskless log, this broker's classic replica or a refusal such as
NOT_LEADER_OR_FOLLOWER), then the batches walked for their offsets and, under
read_committed, which ones an aborted transaction or a control record makes
undeliverable.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NamedTuple
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.groups.share.partition_state import LogBatch
from broker.logs.fetch_slots import FetchBudget, FetchSlot
from broker.logs.partition_log import PartitionLog, ReadPlan
from broker.logs.router import Purpose
from protocol.codec import RecordChunks
from storage.coordinator import CoordinatorUnavailable
from storage.objects import ObjectStoreError

if TYPE_CHECKING:
    from broker.logs.router import RoutedView
    from storage.catalog import Topic

# baseOffset, batchLength, partitionLeaderEpoch, magic, crc, attributes, lastOffsetDelta,
# baseTimestamp, maxTimestamp, producerId
_HEAD = struct.Struct(">qiibIhiqqq")
_HEADER_SIZE = 61
_LOG_OVERHEAD = 12
_TRANSACTIONAL = 0x10
_CONTROL = 0x20
_ABORT_MARKER = 0
_FETCH_VERSION = 16  # reads as a Fetch by topic id would
# The most one share fetch reads of one partition's log, unless the topic allows larger
# batches (max.message.bytes): a consumer's default max.partition.fetch.bytes, about what
# MaxRecords (500 by default) of 1-2 KiB records need. ShareFetch has no per-partition
# limit, and reading up to the request's MaxBytes (tens of MiB from the stock clients) of
# every partition, for the few hundred records acquired, copied and walked tens of MiB
# per answer, read again at the next fetch (issue 30's bench: a diskless share group
# delivered a tenth of a consumer group's rate). Any batch the topic accepts still fits
# one partition's read, as it did within MaxBytes (only the request's first batch may
# exceed the limits, KIP-74: a later partition's batch larger than its limit would wait).
PARTITION_READ_BYTES = 1_048_576


class _Part(NamedTuple):
    partition: int
    fetch_offset: int
    partition_max_bytes: int


class ReadAsk(NamedTuple):
    topic: Topic
    partition: int
    offset: int
    max_bytes: int


@dataclass(slots=True)
class ReadResult:
    error: int
    data: bytes = b""
    log_start: int = -1
    high_watermark: int = -1
    batches: list[tuple[LogBatch, int, int]] = field(default_factory=list)  # batch, pos, size


async def read(
    broker: RoutedView, asks: Sequence[ReadAsk], max_bytes: int, read_committed: bool
) -> tuple[list[ReadResult], list[tuple[UUID, int, int]]]:
    """One read of each partition at its offset, without waiting (one round of the Fetch
    path's, within ``max_bytes``); the results and what a long poll would wait on."""
    router = broker.router
    plan = ReadPlan(-1, _FETCH_VERSION, None, None, router.log_start, router.consumer_read)
    slots: list[FetchSlot] = []
    readers: list[PartitionLog] = []
    for ask in asks:
        log = broker.router.route(ask.topic.topic_id, ask.partition, Purpose.READ, ask.offset)
        part = _Part(ask.partition, ask.offset, partition_read_bytes(broker, ask))
        slots.append(log.open_read(ask.topic.topic_id, ask.topic, part, plan))
        readers.append(log)
    groups: dict[int, tuple[PartitionLog, list[FetchSlot]]] = {}
    for slot, reader in zip(slots, readers, strict=True):
        groups.setdefault(id(reader), (reader, []))[1].append(slot)
    interests: list[tuple[UUID, int, int]] = []
    try:
        budget = FetchBudget(max_bytes)
        for reader, group in groups.values():
            await reader.read_below(group, budget, read_committed)
        for reader, group in groups.values():
            await reader.start_round(group, budget, plan, read_committed)
        for slot, reader in zip(slots, readers, strict=True):
            reader.read_round(slot, budget, plan, read_committed)
            interests += reader.interests(slot, plan)
        for reader, group in groups.values():
            await reader.end_reads(group, plan)
        for reader, group in groups.values():
            await reader.describe(group, plan)
    except (CoordinatorUnavailable, ObjectStoreError):
        # Retriable: the consumer fetches again.
        return [ReadResult(int(ErrorCode.kafka_storage_error)) for _ in asks], []
    results: list[ReadResult] = []
    for slot, reader in zip(slots, readers, strict=True):
        entry: dict[str, Any] = {"error_code": slot.error, "records": b""}
        entry.update(reader.entry(slot, plan, read_committed))
        records = entry["records"]
        data = (
            b"".join(bytes(p) for p in records.parts)
            if isinstance(records, RecordChunks)
            else bytes(records or b"")
        )
        result = ReadResult(
            int(entry["error_code"]),
            data,
            int(entry.get("log_start_offset", -1)),
            int(entry.get("high_watermark", -1)),
        )
        if not result.error:
            result.batches = walk(data, entry.get("aborted_transactions") or [], read_committed)
        results.append(result)
    return results, interests


def partition_read_bytes(broker: RoutedView, ask: ReadAsk) -> int:
    """How much of ``ask``'s partition one share fetch reads: PARTITION_READ_BYTES, or the
    topic's largest batch if larger, within the request's MaxBytes."""
    largest_batch = broker.topics.int_config(ask.topic, "max.message.bytes")
    return min(ask.max_bytes, max(PARTITION_READ_BYTES, largest_batch))


def walk(
    data: bytes, aborted: list[dict[str, int]], read_committed: bool
) -> list[tuple[LogBatch, int, int]]:
    """The whole batches of ``data`` (a partial one at the end is left out): each as a
    LogBatch with its position and size. Under read_committed a batch of an aborted
    transaction is not deliverable (Kafka's consumer rule: from the transaction's first
    offset to the producer's abort marker); control batches never are."""
    pending = sorted((a["first_offset"], a["producer_id"]) for a in aborted)
    aborting: set[int] = set()
    out: list[tuple[LogBatch, int, int]] = []
    pos = 0
    while len(data) - pos >= _HEADER_SIZE:
        base, length, _epoch, _magic, _crc, attrs, delta, _bt, _mt, pid = _HEAD.unpack_from(
            data, pos
        )
        size = length + _LOG_OVERHEAD
        if pos + size > len(data):
            break
        last = base + delta
        while pending and pending[0][0] <= last:
            aborting.add(pending.pop(0)[1])
        deliverable = True
        if attrs & _CONTROL:
            deliverable = False
            if pid in aborting and _control_type(data, pos) == _ABORT_MARKER:
                aborting.discard(pid)
        elif read_committed and attrs & _TRANSACTIONAL and pid in aborting:
            deliverable = False
        out.append((LogBatch(base, last, deliverable), pos, size))
        pos += size
    return out


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    shift = result = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7


def _control_type(data: bytes, batch_pos: int) -> int:
    """The type of a control batch's record (0 abort, 1 commit): its key's second int16."""
    pos = batch_pos + _HEADER_SIZE
    _length, pos = _varint(data, pos)
    pos += 1  # attributes
    _ts, pos = _varint(data, pos)
    _od, pos = _varint(data, pos)
    key_length, pos = _varint(data, pos)
    if key_length < 4:
        return -1
    return int(struct.unpack_from(">h", data, pos + 2)[0])
