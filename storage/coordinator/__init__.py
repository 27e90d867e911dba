"""The batch coordinator: the one place that orders data.

Objects in the object store hold batches of many partitions; the coordinator is the
index that says which byte range of which object holds which offsets of which
partition. Every backend (SQLite embedded, PostgreSQL in production) implements
:class:`BatchCoordinator` and passes the same contract test suite.

Error codes are plain Kafka error code integers (see ``protocol.errors``) so results
can go into responses as they are.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple
from uuid import UUID

from storage.partition_key import PartitionKey
from storage.transactions import AbortedTransaction, TransactionStore

NO_PRODUCER_ID = -1
NO_SEQUENCE = -1

# Special timestamps of ListOffsets.
LATEST_TIMESTAMP = -1
EARLIEST_TIMESTAMP = -2
MAX_TIMESTAMP = -3
# "Earliest local" (KIP-405): with no tiering, every offset is local.
EARLIEST_LOCAL_TIMESTAMP = -4


class CoordinatorUnavailable(Exception):
    """The backend could not complete an operation (connection lost, timeout).

    Retriable for clients. ``outcome_unknown`` is True when a write may have been
    committed even though no answer arrived (the connection dropped after COMMIT was
    sent): its effects must then neither be acknowledged nor undone.
    """

    dependency_outage = True  # storage.outage: the database cannot be reached

    def __init__(self, message: str, outcome_unknown: bool = False) -> None:
        super().__init__(message)
        self.outcome_unknown = outcome_unknown


class SealedLogRefused(CoordinatorUnavailable):
    """A transaction's marker for a diskless log sealed by a migration to classic: the
    caller still saw the partition as diskless (its image lags the seal). Nothing was
    written; retriable, as by then the partition's marker goes to its classic leader."""

    dependency_outage = False  # an answer of a reachable database


# A NamedTuple: one is built per produced batch on the produce path, where a frozen
# dataclass cost ~4 us each and a tuple ~0.5 us.
class BatchToCommit(NamedTuple):
    """One validated record batch inside an uploaded object, before offsets exist."""

    topic_id: UUID
    partition: int
    byte_offset: int  # where the batch starts inside the object
    byte_size: int
    record_count: int  # last_offset_delta + 1
    max_timestamp: int  # as the producer set it (CreateTime topics)
    timestamp_type: int  # 0 = CreateTime, 1 = LogAppendTime
    producer_id: int = NO_PRODUCER_ID
    producer_epoch: int = -1
    base_sequence: int = NO_SEQUENCE
    # The batch's transactional attribute: it must belong to its producer's ongoing
    # transaction (see commit_file).
    transactional: bool = False


# Result types are built in bulk on the produce and fetch paths; plain slots
# dataclasses cost a quarter of frozen ones to create.
@dataclass(slots=True)
class CommitResult:
    """Outcome of one BatchToCommit, in the order they were given."""

    error: int  # 0 = NONE
    base_offset: int = -1
    log_append_time: int = -1  # -1 unless the batch is LogAppendTime
    log_start_offset: int = -1


# A NamedTuple: a consumer's fetch makes one per partition it names (a thousand on a
# full fetch of a large topic); a frozen dataclass costs several times more to create.
class FindRequest(NamedTuple):
    topic_id: UUID
    partition: int
    offset: int
    max_bytes: int


@dataclass(slots=True)
class BatchLocation:
    object_key: str
    byte_offset: int
    byte_size: int
    base_offset: int
    last_offset: int


@dataclass(slots=True)
class FindResult:
    error: int
    log_start_offset: int = -1
    high_watermark: int = -1
    batches: list[BatchLocation] = field(default_factory=list)
    last_stable_offset: int = -1  # -1 only for an unknown log
    # read_committed only: aborted transactions overlapping the batches returned
    # (Fetch's aborted_transactions), [] when no batch is returned (errors included);
    # None for read_uncommitted.
    aborted: list[AbortedTransaction] | None = None


@dataclass(frozen=True, slots=True)
class ListOffsetsRequest:
    topic_id: UUID
    partition: int
    timestamp: int  # LATEST_TIMESTAMP, EARLIEST_TIMESTAMP, MAX_TIMESTAMP or a time in ms


@dataclass(slots=True)
class ListOffsetsResult:
    error: int
    offset: int = -1
    timestamp: int = -1


@dataclass(slots=True)
class LogInfo:
    error: int
    log_start_offset: int = -1
    high_watermark: int = -1
    byte_size: int = 0


@dataclass(slots=True)
class DeleteRecordsResult:
    error: int
    low_watermark: int = -1


@dataclass(frozen=True, slots=True)
class RetentionPolicy:
    topic_id: UUID
    partition: int
    retention_ms: int  # -1 = unlimited
    retention_bytes: int  # -1 = unlimited


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    """A broker as the others find it: address, rack, and which process (incarnation)."""

    node_id: int
    host: str
    port: int
    rack: str | None
    incarnation: UUID


# Called with the partitions whose logs changed on another broker, or None for "any".
LogsChanged = Callable[[list[PartitionKey] | None], None]


@dataclass(frozen=True, slots=True)
class FileToDelete:
    object_key: str
    marked_at_ms: int


# ------------------------------------------------------------------ background jobs
# Snapshots of whole logs and atomic swaps of batch pointers, for the jobs that rewrite
# objects (jobs/: object merging, key compaction). Never on the produce or fetch path.

# The error of a replacement whose range changed since it was planned (retention,
# DeleteRecords, another merge or compaction got there first). Kafka has no exact
# equivalent; CONCURRENT_TRANSACTIONS ("retry later, someone else was first") is closest.
REPLACE_CONFLICT = 51
INVALID_REQUEST = 42


@dataclass(frozen=True, slots=True)
class ListBatchesRequest:
    """Batches of one log with ``last_offset >= start_offset`` and, unless
    ``end_offset`` is -1, ``base_offset < end_offset``."""

    topic_id: UUID
    partition: int
    start_offset: int = 0
    end_offset: int = -1


@dataclass(slots=True)
class StoredBatch:
    """One batch as the coordinator knows it, with the file (object) holding it."""

    object_key: str
    byte_offset: int
    byte_size: int
    base_offset: int
    last_offset: int
    timestamp_type: int
    max_timestamp: int
    log_append_time: int
    object_size: int
    reason: str  # why the object was written: 'produce' or 'merge'
    committed_at: int

    @property
    def timestamp(self) -> int:
        """The time the batch is retained and searched by."""
        return self.log_append_time if self.timestamp_type == 1 else self.max_timestamp


@dataclass(slots=True)
class BatchListing:
    error: int
    log_start_offset: int = -1
    high_watermark: int = -1
    batches: list[StoredBatch] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class ReplacedBatch:
    """A batch a replacement expects to find (and remove): its offsets and object."""

    base_offset: int
    last_offset: int
    object_key: str


@dataclass(frozen=True, slots=True)
class NewBatch:
    """A batch inside the rewritten object, keeping the offsets it had."""

    byte_offset: int
    byte_size: int
    base_offset: int
    last_offset: int
    timestamp_type: int
    max_timestamp: int
    log_append_time: int


@dataclass(frozen=True, slots=True)
class BatchReplacement:
    """Swap every batch of one log in ``[old[0].base_offset, old[-1].last_offset]`` for
    ``new`` (which may be fewer, smaller or none: compaction leaves offset gaps)."""

    topic_id: UUID
    partition: int
    old: Sequence[ReplacedBatch]
    new: Sequence[NewBatch]

    def is_valid(self) -> bool:
        """``old`` non-empty and ordered; ``new`` ordered, non-overlapping, in the range."""
        if not self.old:
            return False
        first, last = self.old[0].base_offset, self.old[-1].last_offset
        prev = first - 1
        for b in self.old:
            if b.base_offset <= prev or b.last_offset < b.base_offset:
                return False
            prev = b.last_offset
        prev = first - 1
        for n in self.new:
            if n.base_offset <= prev or n.last_offset < n.base_offset or n.last_offset > last:
                return False
            prev = n.last_offset
        return True


class SeededProducerBatch(NamedTuple):
    """One retained batch of an idempotent producer, for ``seed_log``."""

    producer_id: int
    producer_epoch: int
    base_sequence: int
    last_sequence: int
    base_offset: int
    last_offset: int


@dataclass(frozen=True)
class SealedLog:
    error: int
    log_start_offset: int = -1
    boundary: int = -1
    byte_size: int = 0
    producers: list[SeededProducerBatch] = field(default_factory=list)


class BatchCoordinator(TransactionStore, ABC):
    """Orders batches of uploaded objects into partition logs.

    Every method is one round trip to the backend (one transaction), whatever the
    number of partitions involved: callers batch, implementations never loop over
    round trips.
    """

    async def start(self) -> None:
        """Open connections, apply schema migrations."""

    async def close(self) -> None:
        """Release connections."""

    @abstractmethod
    async def create_logs(self, logs: Sequence[PartitionKey]) -> None:
        """Create empty logs (log start 0, high watermark 0); existing ones are kept."""

    async def seed_log(
        self, key: PartitionKey, start: int, producers: Sequence[SeededProducerBatch]
    ) -> tuple[int, int]:
        """Make an empty log start at ``start`` (log start = high watermark = ``start``)
        with ``producers``' retained batches, so idempotent producers keep their sequences:
        a classic partition migrating to diskless continues here at its boundary. Only a
        log whose high watermark is at most ``start`` is changed: its batches are dropped
        (a classic partition's log takes none, but one from before postgres migration 0011
        / sqlite 8 may hold markers of its transactions); again with a later start is fine
        (a new leader sealed later); a log that took batches past ``start`` is left alone.
        Returns the log's (log start, high watermark) afterwards."""
        raise NotImplementedError

    async def seal_log(self, key: PartitionKey) -> SealedLog:
        """Seal a diskless log for a migration to classic: no batch is committed at or
        after its high watermark (the boundary) any more, by any broker (a commit trying
        fails whole, retriably, and writes nothing; a transaction's marker too:
        txn_complete raises SealedLogRefused). Refused with CONCURRENT_TRANSACTIONS
        while a transaction is open in it. Idempotent: a sealed log answers its boundary.
        Returns the boundary and the producer states the classic log continues with."""
        raise NotImplementedError

    @abstractmethod
    async def delete_logs(self, topic_ids: Sequence[UUID], now_ms: int) -> None:
        """Forget the logs of deleted topics (with their open and aborted transactions);
        their files become deleting when no live batch of another log remains in them.
        Transactions that added their partitions keep them: their markers there are
        skipped (see txn_complete)."""

    @abstractmethod
    async def commit_file(
        self,
        object_key: str,
        object_size: int,
        uploader_broker_id: int,
        batches: Sequence[BatchToCommit],
        now_ms: int,
    ) -> list[CommitResult]:
        """Register an uploaded object and assign offsets to its batches, atomically.

        Per batch, in the given order: unknown log -> UNKNOWN_TOPIC_OR_PARTITION;
        idempotence checks when ``producer_id >= 0`` (stale epoch ->
        INVALID_PRODUCER_EPOCH, duplicate of one of the last 5 batches -> NONE with the
        original base offset, sequence gap -> OUT_OF_ORDER_SEQUENCE_NUMBER); otherwise
        ``base_offset = high_watermark`` and the high watermark advances by
        ``record_count``. ``log_append_time`` is ``now_ms`` for LogAppendTime batches.
        A file with no accepted batch is marked deleting at once.

        A ``transactional`` batch (KIP-890's verification, done here in the same
        transaction) is accepted only if its producer id has an ONGOING transaction with
        the same epoch that includes the batch's partition: another epoch ->
        INVALID_PRODUCER_EPOCH, otherwise INVALID_TXN_STATE. The verification comes
        after the unknown-log check and before the idempotence checks, so a retry of a
        batch whose transaction has ended is refused, not answered as a duplicate. When
        appended (not a duplicate), it opens the producer's transaction in that
        partition at its base offset unless one is open already.
        """

    @abstractmethod
    async def commit_outcome(
        self, object_key: str, batches: Sequence[BatchToCommit]
    ) -> list[CommitResult] | None:
        """What became of a :meth:`commit_file` whose answer was lost (CoordinatorUnavailable
        with ``outcome_unknown``): None if ``object_key`` was never committed, else per
        batch in the given order the answer it got (NONE with its offsets when appended or
        recognised as a duplicate; REQUEST_TIMED_OUT for one refused then, whose error is
        not kept). A commit of the same logs still running in the backend ends first, so
        None is final: committing the object again cannot append anything twice."""

    @abstractmethod
    async def find_batches(
        self, requests: Sequence[FindRequest], max_total_bytes: int, read_committed: bool = False
    ) -> list[FindResult]:
        """Batches to serve a fetch, one result per request in order.

        Every result of a known log carries the last stable offset (OFFSET_OUT_OF_RANGE
        ones too). With ``read_committed`` only batches whose last offset is below it are
        returned (none when the offset is at or past it: not an error), and ``aborted``
        lists the aborted transactions with ``last_offset >= offset`` and
        ``first_offset <=`` the last returned batch's last offset (empty when no batch),
        in no particular order.

        OFFSET_OUT_OF_RANGE when ``offset < log_start_offset`` or ``offset >
        high_watermark``; batches with ``last_offset >= offset`` in offset order while
        within the partition's ``max_bytes`` and the overall ``max_total_bytes``, except
        that the first batch of the whole answer is always included so a consumer can
        make progress past a batch larger than its limits.
        """

    @abstractmethod
    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest], read_committed: bool = False
    ) -> list[ListOffsetsResult]:
        """Earliest, latest, max-timestamp or first offset with timestamp >= the given one.

        With ``read_committed`` (ListOffsets isolation level 1) latest is the last stable
        offset, and a timestamp or max-timestamp lookup whose offset is not below it finds
        nothing (offset -1, timestamp -1), as in Kafka; earliest is unchanged."""

    @abstractmethod
    async def log_info(self, logs: Sequence[PartitionKey]) -> list[LogInfo]:
        """Log start offset, high watermark and size of each log."""

    @abstractmethod
    async def delete_records(
        self, requests: Sequence[tuple[PartitionKey, int]], now_ms: int
    ) -> list[DeleteRecordsResult]:
        """Move log start offsets forward (offset -1 means the high watermark); aborted
        transactions whose marker falls below the new start are forgotten."""

    @abstractmethod
    async def enforce_retention(
        self, policies: Sequence[RetentionPolicy], now_ms: int
    ) -> list[LogInfo]:
        """Drop whole batches older than retention.ms / beyond retention.bytes (and, as
        delete_records, the aborted transactions below the new log start)."""

    @abstractmethod
    async def files_to_delete(self, marked_before_ms: int, limit: int) -> list[FileToDelete]:
        """Files marked deleting before the given time (the grace period is the caller's)."""

    @abstractmethod
    async def allocate_producer_ids(self, count: int) -> int:
        """Reserve ``count`` consecutive producer ids unique across all brokers sharing
        this coordinator, durably; returns the first."""

    @abstractmethod
    async def unknown_objects(self, object_keys: Sequence[str]) -> list[str]:
        """The keys among ``object_keys`` that no file row names: objects uploaded whose
        commit never happened (or whose outcome was unknown and turned out a failure)."""

    @abstractmethod
    async def forget_files(self, object_keys: Sequence[str]) -> None:
        """Remove rows of files whose objects have been deleted from the store."""

    # ------------------------------------------------------------ cluster (many brokers)

    @abstractmethod
    async def cluster_id(self, proposed: str) -> str:
        """The cluster's id: ``proposed`` if none is stored yet, else the stored one."""

    @abstractmethod
    async def broker_heartbeat(
        self, me: BrokerRegistration, session_timeout_ms: int, starting: bool
    ) -> list[BrokerRegistration]:
        """Record that ``me`` is alive and return every broker seen within the session
        timeout, by node id. When ``starting``, a node id still held by another live
        incarnation is not taken over: the answer shows that incarnation instead."""

    @abstractmethod
    async def broker_leave(self, me: BrokerRegistration) -> None:
        """Forget ``me`` at once (a clean shutdown), if still its incarnation."""

    async def watch_logs(self, on_change: LogsChanged) -> None:
        """Run until cancelled, calling ``on_change`` when another process's commit or log
        start move changes logs. Backends without notifications return at once and the
        broker polls instead."""
        return

    # ------------------------------------------------------------ background jobs

    @abstractmethod
    async def list_batches(self, requests: Sequence[ListBatchesRequest]) -> list[BatchListing]:
        """Every batch in the requested ranges with its object, from ONE consistent
        snapshot (one read transaction), in offset order per request; unknown logs get
        UNKNOWN_TOPIC_OR_PARTITION. The planning read of the jobs in jobs/."""

    @abstractmethod
    async def replace_batches(
        self,
        object_key: str,
        object_size: int,
        replacements: Sequence[BatchReplacement],
        now_ms: int,
    ) -> list[int]:
        """Register a rewritten object (reason 'merge') and swap batch pointers to it,
        atomically, in one transaction; one error code per replacement, in order.

        A replacement is applied only if the batches of its log overlapping
        ``[old[0].base_offset, old[-1].last_offset]`` are now exactly ``old`` (same
        offsets, same objects); otherwise REPLACE_CONFLICT and nothing of it changes (a
        retention run, DeleteRecords or another job changed the range since it was
        planned). UNKNOWN_TOPIC_OR_PARTITION for a deleted log; INVALID_REQUEST when
        ``old`` is empty or ``new`` is not ordered, non-overlapping and inside the range.
        Applied: the old batches go, the new ones point into ``object_key``, the log's
        byte size follows, and files left without batches are marked deleting (the
        cleaner deletes them after the grace period). Offsets, the high watermark and
        the log start never move. A call that leaves no batch in its object (none applied,
        or all compacted away) marks that file deleting at once. A key already registered
        is answered REPLACE_CONFLICT for every replacement, with no change (a retry of a
        call whose outcome was unknown).
        """
