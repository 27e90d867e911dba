"""Which log serves a partition of a topic migrating (or migrated) classic → diskless.

Once the partition's leader sealed the classic log at ``boundary`` and the controller
recorded it (``PartitionSealed`` in the image), offsets ≥ boundary live in the diskless log
(the batch coordinator's log starts there) and offsets < boundary in the sealed classic log
(any replica of it serves them, as followers serve KIP-392 reads). Before that, the
partition is classic. Replication fetches always go to the classic log: its followers
copy it up to the boundary and never see diskless batches.

Every function is a lookup in the image: they cost a dict access or two on the produce
and fetch paths of classic and migrated topics only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from controller.image import TO_DISKLESS, MetadataImage
from storage.coordinator import EARLIEST_LOCAL_TIMESTAMP, EARLIEST_TIMESTAMP

if TYPE_CHECKING:
    from ..classic.replica_manager import ReplicaManager
    from ..node import Broker


def sealed_boundary(broker: Broker, topic_id: UUID, partition: int) -> int | None:
    """The boundary of a partition whose classic log is sealed for diskless (None: not)."""
    controller = broker.controller
    if controller is None:
        return None
    topic = controller.image.topics.get(topic_id)
    if topic is None or topic.migration is None or topic.migration.direction != TO_DISKLESS:
        return None
    return topic.migration.boundary(partition)


def appends_classic(
    broker: Broker, classic: ReplicaManager, topic_id: UUID, partition: int
) -> bool:
    """Produce goes to the classic leader (else: the diskless append path)."""
    return classic.is_classic(topic_id) and sealed_boundary(broker, topic_id, partition) is None


def reads_classic(
    broker: Broker,
    classic: ReplicaManager,
    topic_id: UUID,
    partition: int,
    offset: int,
    replica_id: int,
) -> bool:
    """A fetch at ``offset`` reads the classic log (else: the diskless one)."""
    boundary = sealed_boundary(broker, topic_id, partition)
    if boundary is None:
        return classic.is_classic(topic_id)
    if replica_id >= 0:
        return True  # a follower of the sealed classic log
    return offset < boundary


def answers_epochs_classic(
    broker: Broker, classic: ReplicaManager, topic_id: UUID, partition: int, replication: bool
) -> bool:
    """OffsetForLeaderEpoch from the classic epoch cache (else: the diskless answer, whose
    end offset is the diskless high watermark: a consumer past the boundary must not see
    the classic end as a truncation)."""
    if sealed_boundary(broker, topic_id, partition) is None:
        return classic.is_classic(topic_id)
    return replication and classic.get(topic_id, partition) is not None


def sealed_list_offset(
    broker: Broker,
    classic: ReplicaManager,
    topic_id: UUID,
    partition: int,
    timestamp: int,
    read_committed: bool,
) -> tuple[int, int, int, int] | None:
    """ListOffsets of a sealed partition answered by the classic log (error, offset,
    timestamp, leader epoch): the earliest offset while the classic log still holds
    records, a time below the boundary. None: the diskless log answers (latest, max
    timestamp, times after the boundary, or no local classic replica)."""
    boundary = sealed_boundary(broker, topic_id, partition)
    p = classic.get(topic_id, partition)
    if boundary is None or p is None:
        return None
    epoch = broker.leader_epoch(topic_id, partition)
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        start = p.log.log_start_offset
        return (0, start, -1, epoch) if start < boundary else None
    if timestamp < 0:
        return None
    error, offset, ts = p.list_offset(timestamp, read_committed)
    if error or offset < 0 or offset >= boundary:
        return None
    return 0, offset, ts, epoch


def migrated_with_classic_logs(image: MetadataImage) -> set[UUID]:
    """Topics migrated to diskless whose replicas keep their sealed classic logs."""
    return {
        tid
        for tid, t in image.topics.items()
        if t.diskless and t.migration is not None and t.migration.direction == TO_DISKLESS
    }
