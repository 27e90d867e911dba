"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords on classic partitions (leader only,
as Kafka answers them)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from kio.schema.errors import ErrorCode

from protocol.record_scan import first_at_or_after
from storage.classic.batches import walk

if TYPE_CHECKING:
    from broker.logs.classic.partition import ClassicPartition
    from broker.logs.classic.replica_manager import ReplicaManager


async def list_offset(
    manager: ReplicaManager,
    topic_id: UUID,
    partition: int,
    timestamp: int,
    read_committed: bool = False,
) -> tuple[int, int, int, int]:
    """(error, offset, timestamp, leader epoch); read_committed: below the LSO. A lookup
    by time on a tiered partition searches the remote segments first (they hold the
    oldest records), then the local log."""
    p, error = manager.leader_partition(topic_id, partition)
    if p is None:
        return error, -1, -1, -1
    if timestamp >= 0 and p.remote.end >= 0:
        hw = p.last_stable_offset if read_committed else p.high_watermark
        found = await remote_offset_for_timestamp(manager, p, timestamp, hw)
        if found is not None:
            return 0, found[0], found[1], p.leader_epoch
    error, offset, ts = p.list_offset(timestamp, read_committed)
    return error, offset, ts, p.leader_epoch if offset >= 0 else -1


async def remote_offset_for_timestamp(
    manager: ReplicaManager, p: ClassicPartition, timestamp: int, hw: int
) -> tuple[int, int] | None:
    """(offset, timestamp) of the first record at or after ``timestamp`` in the tiered
    part below the local log, or None (then the local log answers)."""
    reader = manager.tiering.reader
    start = p.log_start_offset
    for segment in p.remote.line.segments:
        if segment.end_offset < start or segment.max_timestamp < timestamp:
            continue
        if segment.start_offset >= p.log.log_start_offset:
            return None  # the local log holds it too, and answers at once
        found = await reader.offset_for_timestamp(segment, timestamp)
        if found is None:
            continue
        base = max(found[0], start)
        data = await reader.read(segment, base, 1, min(hw, segment.end_offset + 1))
        batch = next(iter(walk(data)), None)
        if batch is None:
            return None
        hit = first_at_or_after(data[batch.position : batch.position + batch.size], timestamp)
        if hit is None:
            continue
        offset = max(batch.base_offset + hit[0], start)
        return (offset, hit[1]) if offset < hw else None
    return None


def end_offset_for_epoch(
    manager: ReplicaManager, topic_id: UUID, partition: int, epoch: int
) -> tuple[int, int, int]:
    """(error, epoch, end offset) from the leader's epoch cache (KIP-101/279)."""
    p, error = manager.leader_partition(topic_id, partition)
    if p is None:
        return error, -1, -1
    found, end = p.end_offset_for(epoch)
    return 0, found, end


async def delete_records(
    manager: ReplicaManager, topic_id: UUID, partition: int, offset: int
) -> tuple[int, int]:
    """(error, low watermark). -1 deletes up to the high watermark; beyond it is
    OFFSET_OUT_OF_RANGE. Followers move their log start when their next fetch answer
    carries the leader's. On a tiered partition the whole log's start moves (the shared
    remote log start; remote segments wholly below it go at the next retention run)."""
    p, error = manager.leader_partition(topic_id, partition)
    if p is None:
        return error, -1
    if offset == -1:
        offset = p.high_watermark
    if offset < 0 or offset > p.high_watermark:
        return int(ErrorCode.offset_out_of_range), -1
    if p.remote.end >= 0 and offset > p.log_start_offset:
        await manager.tiering.metadata.advance_log_start(topic_id, partition, offset)
        p.log.delete_records(offset)
        await manager.tiering.refresh(p)
        return 0, p.log_start_offset
    return 0, p.log.delete_records(offset)
