"""ListOffsets, OffsetForLeaderEpoch and DeleteRecords on classic partitions (leader only,
as Kafka answers them)."""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from .replica_manager import ReplicaManager


def list_offset(
    manager: ReplicaManager, topic_id: UUID, partition: int, timestamp: int
) -> tuple[int, int, int, int]:
    """(error, offset, timestamp, leader epoch)."""
    p, error = manager.leader_partition(topic_id, partition)
    if p is None:
        return error, -1, -1, -1
    error, offset, ts = p.list_offset(timestamp)
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


def delete_records(
    manager: ReplicaManager, topic_id: UUID, partition: int, offset: int
) -> tuple[int, int]:
    """(error, low watermark). -1 deletes up to the high watermark; beyond it is
    OFFSET_OUT_OF_RANGE. Followers move their log start when their next fetch answer
    carries the leader's."""
    p, error = manager.leader_partition(topic_id, partition)
    if p is None:
        return error, -1
    if offset == -1:
        offset = p.high_watermark
    if offset < 0 or offset > p.high_watermark:
        return int(ErrorCode.offset_out_of_range), -1
    return 0, p.log.delete_records(offset)
