"""Which log serves a partition, for every API: the one place that decides it (issue 26).

``LogRouter.route(topic_id, partition, purpose, offset)`` gives a handler the
``PartitionLog`` that serves its call (``broker.logs.partition_log``): the diskless log,
this broker's classic replica (its tiered part behind it), or an answer the router
already has (a refusal, the sealed classic log below a boundary). Handlers call that log
and never ask which engine serves a partition; the rules below (image lookups) are used
by ``route`` and by the components that keep the engines (the replica manager's hosted
logs, the coordinator's retention, markers, the AZ transformer's metadata, group lag).
Outside ``broker/logs`` they are asked through the ``LogRouter`` only.

A partition is of its topic's kind (``read_topic``: from the image, so a new classic
topic's produce never takes the diskless path while its replicas open)
unless its topic is migrating or migrated between classic and diskless. Until the
partition's leader sealed its old log and the controller recorded it
(``PartitionSealed`` in the image), the partition is of its topic's current kind. Then:

- classic → diskless at boundary B: offsets ≥ B in the diskless log (the batch
  coordinator's log starts at B), offsets < B in the sealed classic log, which every
  replica keeps and serves (any replica, as followers serve KIP-392 reads).
- diskless → classic at boundary H: offsets ≥ H in the classic log (every replica's log
  continues at H), offsets in [old start, H) in the sealed diskless log (any broker), and
  offsets below the diskless log's start at the seal (``old_start``) in the classic log
  again: the sealed classic log of an earlier migration to diskless, if there was one.

A migration to classic that follows one to diskless keeps the earlier migration's
boundaries (``MigrationState.earlier``): until its partition is sealed again, offsets
below the first boundary are still in the first classic log, not in the diskless one.

Everything below a boundary is decided by ``classic_end_below``, for every API: the
fetch path (``reads_classic``), ListOffsets (``list_offset_route``), OffsetForLeaderEpoch
(``epochs_route``) and the log start of a diskless Fetch answer (``whole_log_start``).

A consumer's fetch is routed once but its long poll reads again: each read asks
``LogRouter.consumer_read`` first (``ReadPlan.moved``), and a slot whose offset a seal
moved to the other log is answered without records (the classic log continued at a
boundary has a gap below it, which a read would jump).

Replication fetches always go to the classic log. While a partition is being sealed
towards classic, no broker appends to its diskless log (``refuses_diskless_append``;
the batch coordinator refuses anything past the seal anyway).

Every function is a lookup in the image: a dict access or two on the produce and fetch
paths.
"""

from __future__ import annotations

from enum import Enum
from typing import TYPE_CHECKING, NamedTuple, Protocol
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.logs.partition_log import Answered, EpochAnswer, OffsetAnswer, PartitionLog
from broker.metadata.view import HandlerView
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
    from broker.logs.classic.partition import ClassicPartition
    from broker.metadata.controller_catalog import ControllerCatalog

CLASSIC = "classic"
DISKLESS = "diskless"


class ClassicReplicas(Protocol):
    """This broker's classic replicas (``ReplicaManager``), as the rules ask them."""

    def is_classic(self, topic_id: UUID) -> bool: ...  # without an image (``read_topic``)

    def get(self, topic_id: UUID, partition: int) -> ClassicPartition | None: ...

    def leader_partition(
        self, topic_id: UUID, partition: int
    ) -> tuple[ClassicPartition | None, int]: ...


class RoutingView(Protocol):
    """What the rules read: the controllers' image (None without a controller), this
    broker's classic replicas (None: no classic engine) and a partition's leader epoch."""

    @property
    def controller(self) -> ControllerCatalog | None: ...

    @property
    def classic(self) -> ClassicReplicas | None: ...

    def leader_epoch(self, topic_id: UUID, partition: int) -> int: ...


class TopicSeen(NamedTuple):
    """What the image says of a topic, read once per routed call: its migration (None:
    none) and its kind (``classic``: ``diskless.enable=false``). Every rule decides from
    it, so one call reads the image once, however many rules it asks."""

    migration: MigrationState | None
    classic: bool


_UNKNOWN_TOPIC = TopicSeen(None, False)


def read_topic(broker: RoutingView, classic: ClassicReplicas, topic_id: UUID) -> TopicSeen:
    """The topic as the image shows it now: its kind from the image itself, not from the
    replica manager's last reconcile (a new topic is in the image, and Metadata names this
    broker its leader, a database round trip before the reconcile that opens its
    replicas: a produce arriving then must not take the diskless path, into a log no
    reader of the classic partition looks at; until the replica is open the classic path
    answers NOT_LEADER_OR_FOLLOWER, which clients retry). Without an image (no
    controller) the replica manager's hosted topics are the classic ones."""
    controller = broker.controller
    if controller is None:
        return TopicSeen(None, classic.is_classic(topic_id))
    topic = controller.image.topics.get(topic_id)
    if topic is None:
        return _UNKNOWN_TOPIC
    return TopicSeen(topic.migration, not topic.diskless)


def _migration(broker: RoutingView, topic_id: UUID) -> MigrationState | None:
    controller = broker.controller
    if controller is None:
        return None
    topic = controller.image.topics.get(topic_id)
    return None if topic is None else topic.migration


def classic_end_below(m: MigrationState, partition: int) -> int:
    """Where a sealed classic log below the partition's diskless part ends (0: there is
    none): offsets under it are read from that classic log, on any of its replicas.

    - to diskless, sealed at B: B;
    - to classic, sealed: the diskless log's start at the seal (``old_start``);
    - to classic, not sealed yet: the earlier migration's boundary (a topic born
      diskless has none).
    """
    s = m.sealed_partition(partition)
    if m.direction == TO_DISKLESS:
        return 0 if s is None else s.boundary
    if s is not None:
        return max(s.old_start, 0)
    first = None if m.earlier is None else m.earlier.sealed_partition(partition)
    return 0 if first is None else first.boundary


def sealed_boundary(broker: RoutingView, topic_id: UUID, partition: int) -> int | None:
    """The end of a sealed classic log below a partition's diskless part (None: none)."""
    m = _migration(broker, topic_id)
    end = 0 if m is None else classic_end_below(m, partition)
    return end or None


def serves_any_broker(topic: TopicImage, partition: int) -> bool:
    """Whether any broker can serve a consumer of this partition, as the AZ transformer
    assumes of diskless ones when it sends a client to a broker of its AZ that is not a
    replica: not while a sealed classic log below its diskless part has records, which
    only that log's replicas hold (elsewhere EARLIEST and reads below it are refused)."""
    m = topic.migration
    return m is None or not (
        classic_end_below(m, partition) and m.classic_seal_with_records(partition) is not None
    )


def appends_classic(
    broker: RoutingView, classic: ClassicReplicas, topic_id: UUID, partition: int
) -> bool:
    """Produce goes to the classic leader (else: the diskless append path)."""
    return _appends_classic(read_topic(broker, classic, topic_id), partition)


def _appends_classic(t: TopicSeen, partition: int) -> bool:
    m = t.migration
    if m is None:
        return t.classic
    sealed = m.boundary(partition) is not None
    if m.direction == TO_DISKLESS:
        return not sealed and t.classic
    return sealed


def refuses_diskless_append(broker: RoutingView, topic_id: UUID, partition: int) -> bool:
    """A diskless partition being sealed towards classic: produce is answered with a
    retriable error until the seal is recorded (then it goes to the classic leader)."""
    return _refuses_diskless_append(_migration(broker, topic_id), partition)


def _refuses_diskless_append(m: MigrationState | None, partition: int) -> bool:
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
    broker: RoutingView,
    classic: ClassicReplicas,
    topic_id: UUID,
    partition: int,
    offset: int,
    replica_id: int,
) -> bool:
    """A fetch at ``offset`` reads the classic log (else: the diskless one)."""
    return _reads_classic(read_topic(broker, classic, topic_id), partition, offset, replica_id)


def _reads_classic(t: TopicSeen, partition: int, offset: int, replica_id: int) -> bool:
    m = t.migration
    if m is None:
        return t.classic
    if replica_id >= 0:
        # A follower of the classic log, sealed or not: never a diskless batch (one that
        # copied them would hold offsets its classic log does not own).
        return True
    if offset < classic_end_below(m, partition):
        return True
    s = m.sealed_partition(partition)
    if s is None:
        return t.classic
    return m.direction == TO_CLASSIC and offset >= s.boundary


def list_offset_route(
    broker: RoutingView,
    classic: ClassicReplicas,
    topic_id: UUID,
    partition: int,
    timestamp: int,
    read_committed: bool,
    seen: TopicSeen | None = None,
) -> tuple[int, int, int, int] | str | None:
    """ListOffsets of a partition with a sealed log: an answer from this broker's replica
    of the classic log below the diskless part (error, offset, timestamp, leader epoch),
    CLASSIC (the classic leader's answer), DISKLESS (the diskless log's), or None (the
    topic's kind answers: no migration, or nothing sealed that matters yet). ``seen``: the
    topic as the caller read it (``LogRouter.route``), else read here."""
    m = seen.migration if seen is not None else _migration(broker, topic_id)
    if m is None:
        return None
    s = m.sealed_partition(partition)
    below = classic_end_below(m, partition)
    if s is None and not below:
        return None
    p = classic.get(topic_id, partition)
    epoch = broker.leader_epoch(topic_id, partition)
    if timestamp in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
        # EARLIEST: the whole classic log's start, its tiered part too; -4 the local one.
        start = None
        if p is not None:
            start = (
                p.log_start_offset if timestamp == EARLIEST_TIMESTAMP else p.log.log_start_offset
            )
        if start is not None and start < below:
            return 0, start, -1, epoch
        if p is None and below and m.classic_seal_with_records(partition) is not None:
            # The classic part has records but no replica of it here (a client routed by
            # AZ to this broker): retriable, never the diskless start, past them.
            return int(ErrorCode.not_leader_or_follower), -1, -1, -1
        if s is not None and m.direction == TO_CLASSIC and s.old_start >= s.boundary:
            return CLASSIC  # the diskless log held nothing: the classic one starts it all
        return DISKLESS
    if timestamp >= 0 and p is not None:
        error, offset, ts = p.list_offset(timestamp, read_committed)
        if not error and 0 <= offset < below:
            return 0, offset, ts, epoch
    if m.direction == TO_DISKLESS or s is None:
        return DISKLESS
    if timestamp == LATEST_TIMESTAMP or timestamp < 0 or s.old_start >= s.boundary:
        return CLASSIC
    return DISKLESS


def whole_log_start(
    broker: RoutingView,
    classic: ClassicReplicas,
    topic_id: UUID,
    partition: int,
    diskless_start: int,
) -> int:
    """The log start a Fetch answer from the diskless log carries: the start of the
    classic log below it when this broker holds it (clients take it for the partition's
    earliest offset: lag, watermarks), else the diskless log's."""
    m = _migration(broker, topic_id)
    below = 0 if m is None else classic_end_below(m, partition)
    p = classic.get(topic_id, partition) if below else None
    if p is None or p.log_start_offset >= below:
        return diskless_start
    return min(p.log_start_offset, diskless_start)


def epochs_route(
    broker: RoutingView,
    classic: ClassicReplicas,
    topic_id: UUID,
    partition: int,
    replication: bool,
    epoch: int,
    current: int,
    seen: TopicSeen | None = None,
) -> tuple[int, int, int] | str | None:
    """OffsetForLeaderEpoch of a sealed partition: CLASSIC (the classic epoch cache, for
    replication), DISKLESS (the diskless answer), an answer (error, epoch, end offset), or
    None (no migration).

    A consumer of a partition migrated to classic gets the classic cache's answer (Kafka's,
    so a truncation of the classic log is detected) only for an epoch the classic log
    wrote from the boundary on. Older epochs are the diskless part's and the sealed logs'
    below it, which the cache does not know (its answer could look like a truncation): they
    end at the log end, as a diskless log's epochs do; nothing below the boundary is ever
    truncated. Never the high watermark: a new leader's trails its log end until its
    followers fetch again, and a consumer whose position is between the two would take it
    for a truncation and seek back (librdkafka drops what it had fetched ahead: records
    skipped). ``seen``: as for ``list_offset_route``."""
    m = seen.migration if seen is not None else _migration(broker, topic_id)
    if m is None:
        return None
    p = classic.get(topic_id, partition)
    if replication and p is not None:
        return CLASSIC  # a follower of the classic log, sealed or not (as reads_classic)
    boundary = m.boundary(partition)
    if boundary is None:
        return None
    if m.direction == TO_DISKLESS:
        return DISKLESS
    if p is None or p.role != "leader":
        return int(ErrorCode.not_leader_or_follower), -1, -1
    if epoch > current:
        return 0, -1, -1
    first = p.log.epochs.first_epoch_from(boundary)
    if 0 <= first <= epoch:
        found, end = p.end_offset_for(epoch)
        return 0, found, end
    return 0, epoch, p.log.log_end_offset


def hosted_classic(image: MetadataImage, classic: set[UUID]) -> set[UUID]:
    """The topics whose classic logs the replica manager hosts: classic topics, topics
    migrated to diskless (their sealed classic logs) and topics migrating to classic (a
    partition's classic log continues at its boundary once sealed; until then it is
    empty, or the sealed log of an earlier migration to diskless, which must stay)."""
    return classic | {tid for tid, t in image.topics.items() if t.migration is not None}


def coordinator_retains(broker: RoutingView, topic_id: UUID) -> bool:
    """Whether the batch coordinator enforces this topic's retention: diskless topics, and
    the diskless part of a topic migrated (or migrating) to classic (classic logs are
    local: broker/logs/classic enforces theirs)."""
    classic = broker.classic
    if classic is None:
        return True
    t = read_topic(broker, classic, topic_id)
    m = t.migration
    return not t.classic or (m is not None and m.direction == TO_CLASSIC)


def markers_on_classic_leader(broker: RoutingView, topic_id: UUID, partition: int) -> bool:
    """A transaction's marker of this partition goes to its classic leader
    (WriteTxnMarkers), else into its diskless log with the transaction's outcome: where
    its produce goes (a partition sealed for diskless takes its markers in the diskless
    log)."""
    classic = broker.classic
    return classic is not None and appends_classic(broker, classic, topic_id, partition)


class Purpose(Enum):
    APPEND = "append"  # Produce (offset: unused)
    READ = "read"  # Fetch at an offset (replica_id >= 0: a follower's)
    LIST_OFFSETS = "list_offsets"  # offset: the timestamp asked (or -1, -2, ...)
    EPOCHS = "epochs"  # OffsetForLeaderEpoch (offset: the epoch asked; replica_id >= 0: a
    # follower's, with CLUSTER_ACTION)
    DELETE = "delete"  # DeleteRecords
    MARKER = "marker"  # WriteTxnMarkers


class LogRouter:
    """Which log serves a call: ``route`` answers for every API, from the image (the
    rules above) and this broker's replicas. The engines are given to it (built by
    ``broker.logs.engines``), so the rules import neither."""

    __slots__ = ("_broker", "classic", "diskless")

    def __init__(self, broker: RoutingView, diskless: PartitionLog, classic: PartitionLog) -> None:
        self._broker = broker
        self.diskless = diskless
        self.classic = classic

    def route(
        self,
        topic_id: UUID,
        partition: int,
        purpose: Purpose,
        offset: int = -1,
        *,
        replica_id: int = -1,
        read_committed: bool = False,
    ) -> PartitionLog:
        broker = self._broker
        manager = broker.classic
        if manager is None:
            # No classic engine on this broker (no controller): every log is diskless.
            return self.diskless
        # The image read once for the call: every rule below decides from it.
        t = read_topic(broker, manager, topic_id)
        if purpose is Purpose.READ:
            return (
                self.classic if _reads_classic(t, partition, offset, replica_id) else self.diskless
            )
        if purpose is Purpose.APPEND or purpose is Purpose.MARKER:
            if _appends_classic(t, partition):
                # A classic partition: appended to (its markers written by) this broker's
                # log if it leads it.
                return self.classic
            if purpose is Purpose.MARKER:
                return self.diskless  # answers INVALID_REQUEST: its coordinator writes them
            if _refuses_diskless_append(t.migration, partition):
                # Being sealed for a migration to classic: retriable, nothing written.
                return Answered(int(ErrorCode.not_leader_or_follower))
            return self.diskless
        if purpose is Purpose.LIST_OFFSETS:
            route = list_offset_route(
                broker, manager, topic_id, partition, offset, read_committed, t
            )
            if isinstance(route, tuple):
                # A migrated partition: the old classic log (below a boundary) answered.
                return Answered(route[0], offsets=OffsetAnswer(*route))
            return self._kind(route, t)
        if purpose is Purpose.EPOCHS:
            current = broker.leader_epoch(topic_id, partition)
            epochs = epochs_route(
                broker, manager, topic_id, partition, replica_id >= 0, offset, current, t
            )
            if isinstance(epochs, tuple):
                # A partition migrated to classic, asked by a consumer.
                return Answered(epochs[0], epochs=EpochAnswer(*epochs))
            return self._kind(epochs, t)
        if purpose is Purpose.DELETE:
            return self.classic if t.classic else self.diskless
        raise ValueError(purpose)

    def _kind(self, route: str | None, t: TopicSeen) -> PartitionLog:
        """CLASSIC, DISKLESS, or None: the topic's kind."""
        if route == CLASSIC or (route is None and t.classic):
            return self.classic
        return self.diskless

    def consumer_read(self, topic_id: UUID, partition: int, offset: int) -> PartitionLog:
        """The log a consumer's fetch at ``offset`` reads now: asked again by the engines
        at each round of a long poll (``ReadPlan.moved``), which a seal may outlast."""
        return self.route(topic_id, partition, Purpose.READ, offset)

    def sealed_boundary(self, topic_id: UUID, partition: int) -> int | None:
        """The end of a sealed classic log below the partition's diskless part (None:
        none): the classic engine's reads stop there (``sealed_boundary``)."""
        return sealed_boundary(self._broker, topic_id, partition)

    @staticmethod
    def hosted_classic(image: MetadataImage, classic: set[UUID]) -> set[UUID]:
        """The topics whose classic logs the replica manager hosts (``hosted_classic``)."""
        return hosted_classic(image, classic)

    def az_routed(self, topic: TopicImage) -> bool:
        """Metadata applies the AZ transformer to the topic (``az_routed``)."""
        return az_routed(topic)

    def serves_any_broker(self, topic: TopicImage, partition: int) -> bool:
        """Any broker can serve the partition's consumers (``serves_any_broker``)."""
        return serves_any_broker(topic, partition)

    def coordinator_retains(self, topic_id: UUID) -> bool:
        """The batch coordinator enforces the topic's retention (``coordinator_retains``)."""
        return coordinator_retains(self._broker, topic_id)

    def markers_on_classic_leader(self, topic_id: UUID, partition: int) -> bool:
        """A transaction's marker of the partition is sent to its classic leader, else it
        goes into the diskless log with the outcome (``markers_on_classic_leader``)."""
        return markers_on_classic_leader(self._broker, topic_id, partition)

    def latest_led_here(self, topic_id: UUID, partition: int) -> bool | None:
        """None when the log that answers the partition's latest offset (ListOffsets
        LATEST, as ``route`` picks it) is one any broker reads (diskless), else whether
        this broker leads the classic replica that answers it: only its leader knows the
        high watermark. Who exports a group's lag of the partition follows from it
        (broker/groups/lag.py), so the broker that reports a lag is always one that can
        read the log it is computed from."""
        manager = self._broker.classic
        if manager is None:
            return None
        latest = self.route(topic_id, partition, Purpose.LIST_OFFSETS, LATEST_TIMESTAMP)
        if latest is not self.classic:
            return None
        return manager.leader_partition(topic_id, partition)[0] is not None

    def log_start(self, topic_id: UUID, partition: int, diskless_start: int) -> int:
        """The log start a Fetch answer from the diskless log carries (``whole_log_start``)."""
        manager = self._broker.classic
        if manager is None or diskless_start < 0:
            return diskless_start
        return whole_log_start(self._broker, manager, topic_id, partition, diskless_start)


class RoutedView(HandlerView, Protocol):
    """What the data-path handlers use: the metadata view, the access checks and the
    router that gives them each partition's log."""

    @property
    def router(self) -> LogRouter: ...
