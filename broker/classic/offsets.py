"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords on classic partitions (leader only,
as Kafka answers them)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from .replica_manager import ReplicaManager


def list_offset(
    manager: ReplicaManager,
    topic_id: UUID,
    partition: int,
    timestamp: int,
    read_committed: bool = False,
) -> tuple[int, int, int, int]:
    """(error, offset, timestamp, leader epoch); read_committed: below the LSO."""
    p, error = manager.leader_partition(topic_id, partition)
    if p is None:
        return error, -1, -1, -1
    error, offset, ts = p.list_offset(timestamp, read_committed)
    return error, offset, ts, p.leader_epoch if offset >= 0 else -1


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
