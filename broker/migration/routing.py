"""Which log serves a partition of a topic migrating (or migrated) between classic and
diskless.

Until the partition's leader sealed its old log and the controller recorded it
(``PartitionSealed`` in the image), the partition is of its topic's current kind. Then:

- classic → diskless at boundary B: offsets ≥ B in the diskless log (the batch
  coordinator's log starts at B), offsets < B in the sealed classic log, which every
  replica keeps and serves (any replica, as followers serve KIP-392 reads).
- diskless → classic at boundary H: offsets ≥ H in the classic log (every replica's log
  continues at H), offsets in [old start, H) in the sealed diskless log (any broker), and
  offsets below the diskless log's start at the seal (``old_start``) in the classic log
  again: the sealed classic log of an earlier migration to diskless, if there was one.

Replication fetches always go to the classic log. While a partition is being sealed
towards classic, no broker appends to its diskless log (``refuses_diskless_append``;
the batch coordinator refuses anything past the seal anyway).

Every function is a lookup in the image: a dict access or two on the produce and fetch
paths.
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from uuid import UUID

from kio.schema.errors import ErrorCode

from controller.image import (
    MIGRATION_SEALING,
    TO_CLASSIC,
    TO_DISKLESS,
    MetadataImage,
    MigrationState,
    TopicImage,
)
from storage.coordinator import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
)

if TYPE_CHECKING:
    from ..classic.replica_manager import ReplicaManager
    from ..node import Broker

CLASSIC = "classic"
DISKLESS = "diskless"


def _migration(broker: Broker, topic_id: UUID) -> MigrationState | None:
    controller = broker.controller
    if controller is None:
        return None
    topic = controller.image.topics.get(topic_id)
    return None if topic is None else topic.migration


def sealed_boundary(broker: Broker, topic_id: UUID, partition: int) -> int | None:
    """The boundary of a partition whose classic log is sealed for diskless (None: not)."""
    m = _migration(broker, topic_id)
    if m is None or m.direction != TO_DISKLESS:
        return None
    return m.boundary(partition)


def appends_classic(
    broker: Broker, classic: ReplicaManager, topic_id: UUID, partition: int
) -> bool:
    """Produce goes to the classic leader (else: the diskless append path)."""
    m = _migration(broker, topic_id)
    if m is None:
        return classic.is_classic(topic_id)
    sealed = m.boundary(partition) is not None
    if m.direction == TO_DISKLESS:
        return not sealed and classic.is_classic(topic_id)
    return sealed


def refuses_diskless_append(broker: Broker, topic_id: UUID, partition: int) -> bool:
    """A diskless partition being sealed towards classic: produce is answered with a
    retriable error until the seal is recorded (then it goes to the classic leader)."""
    m = _migration(broker, topic_id)
    return (
        m is not None
        and m.direction == TO_CLASSIC
        and m.state == MIGRATION_SEALING
        and m.boundary(partition) is None
    )


def az_routed(topic: TopicImage) -> bool:
    """Metadata applies the AZ transformer: diskless topics, but not once a migration to
    classic began (clients must find the classic leader of each sealed partition)."""
    m = topic.migration
    return topic.diskless and not (m is not None and m.direction == TO_CLASSIC)


def reads_classic(
    broker: Broker,
    classic: ReplicaManager,
    topic_id: UUID,
    partition: int,
    offset: int,
    replica_id: int,
) -> bool:
    """A fetch at ``offset`` reads the classic log (else: the diskless one)."""
    m = _migration(broker, topic_id)
    if m is not None and replica_id >= 0:
        # A follower of the classic log, sealed or not: never a diskless batch (one that
        # copied them would hold offsets its classic log does not own).
        return True
    s = None if m is None else m.sealed_partition(partition)
    if m is None or s is None:
        return classic.is_classic(topic_id)
    if m.direction == TO_DISKLESS:
        return offset < s.boundary
    return offset >= s.boundary or offset < s.old_start


def list_offset_route(
    broker: Broker,
    classic: ReplicaManager,
    topic_id: UUID,
    partition: int,
    timestamp: int,
    read_committed: bool,
) -> tuple[int, int, int, int] | str | None:
    """ListOffsets of a sealed partition: an answer from this broker's replica of the
    classic log (error, offset, timestamp, leader epoch), CLASSIC (the classic leader's
    answer), DISKLESS (the diskless log's), or None (no migration: the topic's kind)."""
    m = _migration(broker, topic_id)
    s = None if m is None else m.sealed_partition(partition)
    if m is None or s is None:
        return None
    p = classic.get(topic_id, partition)
    epoch = broker.leader_epoch(topic_id, partition)
    # Where the classic log below the boundary ends: B (to diskless) or the diskless
    # log's start (to classic).
    classic_below = s.boundary if m.direction == TO_DISKLESS else s.old_start
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        # EARLIEST: the whole classic log's start, its tiered part too; -4 the local one.
        start = p.log_start_offset if p is not None and timestamp == EARLIEST_TIMESTAMP else None
        if p is not None and start is None:
            start = p.log.log_start_offset
        if start is not None and start < classic_below:
            return 0, start, -1, epoch
        if m.direction == TO_CLASSIC and s.old_start >= s.boundary:
            return CLASSIC  # the diskless log held nothing: the classic one starts it all
        return DISKLESS
    if timestamp >= 0 and p is not None:
        error, offset, ts = p.list_offset(timestamp, read_committed)
        if not error and 0 <= offset < classic_below:
            return 0, offset, ts, epoch
    if m.direction == TO_DISKLESS:
        return DISKLESS
    if timestamp == LATEST_TIMESTAMP or timestamp < 0 or s.old_start >= s.boundary:
        return CLASSIC
    return DISKLESS


def epochs_route(
    broker: Broker,
    classic: ReplicaManager,
    topic_id: UUID,
    partition: int,
    replication: bool,
    epoch: int,
    current: int,
) -> tuple[int, int, int] | str | None:
    """OffsetForLeaderEpoch of a sealed partition: CLASSIC (the classic epoch cache, for
    replication), DISKLESS (the diskless answer), an answer (error, epoch, end offset), or
    None (no migration). Consumers never get the classic cache's answer: its epochs before
    the boundary are not in it, so an end offset from it could look like a truncation.
    As for a diskless log, every epoch up to the current one ends at the high watermark
    (the classic leader's, once the topic is classic from the boundary on)."""
    m = _migration(broker, topic_id)
    if m is None or m.boundary(partition) is None:
        return None
    p = classic.get(topic_id, partition)
    if replication and p is not None:
        return CLASSIC
    if m.direction == TO_DISKLESS:
        return DISKLESS
    if p is None or p.role != "leader":
        return int(ErrorCode.not_leader_or_follower), -1, -1
    return (0, epoch, p.high_watermark) if epoch <= current else (0, -1, -1)


def hosted_classic(image: MetadataImage, classic: set[UUID]) -> set[UUID]:
    """The topics whose classic logs the replica manager hosts: classic topics, topics
    migrated to diskless (their sealed classic logs) and topics migrating to classic (a
    partition's classic log continues at its boundary once sealed; until then it is
    empty, or the sealed log of an earlier migration to diskless, which must stay)."""
    return classic | {tid for tid, t in image.topics.items() if t.migration is not None}


def has_diskless_part(controller: object, topic_id: UUID) -> bool:
    """A topic migrated (or migrating) to classic: offsets below its boundaries are in the
    diskless log, whose retention the batch coordinator enforces."""
    image = getattr(controller, "image", None)
    topic = None if image is None else image.topics.get(topic_id)
    m = None if topic is None else topic.migration
    return m is not None and m.direction == TO_CLASSIC
