"""Transactions in the batch coordinator's database: the transaction coordinator's state
and, per partition, the open transactions and the aborted-transactions index.

Kafka keeps transaction state in ``__transaction_state`` and writes commit/abort markers
to each partition leader one by one, so it needs Prepare* states to finish a decision
after a crash. Here the markers of a transaction's diskless partitions are one file (a
marker object made from its key, storage/objects/marker_objects.py, or an uploaded
object) and ONE database transaction registers them, moves the committed offsets into place and
records the outcome: deciding and completing are one atomic step, and any broker can take
over a transactional id at any moment from what the database says. Classic partitions'
markers go to their leaders afterwards (WriteTxnMarkers), so that same database
transaction records them as *pending markers* (Kafka's PrepareCommit/PrepareAbort) until
the leaders acknowledge; the id's coordinator (any broker, after a failover) resends them,
and the id refuses a new transaction (CONCURRENT_TRANSACTIONS) meanwhile.

Every method is one transaction (one round trip on PostgreSQL). Error codes are Kafka's.
The broker side (broker/transactions/) maps them onto each API's version.

Per partition (what consumers need):

- an *open transaction* is (producer id, first offset) from a producer's first
  transactional batch in the partition until its marker; the **last stable offset** (LSO)
  is the smallest open first offset, or the high watermark when none is open (never
  below the log start);
- an *aborted transaction* is (producer id, first offset, last offset = the abort marker's
  offset); Fetch answers list those overlapping the fetched range (read_committed). The
  stores also keep the partition's LSO just after the marker (as Kafka's AbortedTxn
  does): no transaction aborted later can reach back below it, which bounds the search.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from storage.groups import CommittedOffset
    from storage.partition_key import PartitionKey

# Kafka's TransactionState names, as DescribeTransactions and ListTransactions show them.
EMPTY = "Empty"
ONGOING = "Ongoing"
COMPLETE_COMMIT = "CompleteCommit"
COMPLETE_ABORT = "CompleteAbort"
STATES = (EMPTY, ONGOING, COMPLETE_COMMIT, COMPLETE_ABORT)

# A producer epoch is an int16; at the last usable value a new producer id is handed out
# with epoch 0 (as Kafka does), so epochs never wrap.
MAX_PRODUCER_EPOCH = 32767

NONE = int(ErrorCode.none)
INVALID_PRODUCER_EPOCH = int(ErrorCode.invalid_producer_epoch)
INVALID_TXN_STATE = int(ErrorCode.invalid_txn_state)
INVALID_PRODUCER_ID_MAPPING = int(ErrorCode.invalid_producer_id_mapping)
CONCURRENT_TRANSACTIONS = int(ErrorCode.concurrent_transactions)
PRODUCER_FENCED = int(ErrorCode.producer_fenced)


@dataclass(slots=True)
class TransactionState:
    """One transactional id as the coordinator database knows it."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    state: str  # one of STATES
    timeout_ms: int
    # When the ongoing (or, once ended, the last) transaction began, as Kafka's
    # DescribeTransactions shows it; -1 after txn_init (none begun since).
    started_ms: int
    updated_ms: int  # last state change
    # Only while ONGOING (cleared on completion and on init):
    partitions: list[PartitionKey] = field(default_factory=list)  # sorted by (topic, part)
    groups: list[str] = field(default_factory=list)  # sorted
    # Set by txn_get/txn_list: the outcome is stored but classic leaders still owe it a
    # marker (txn_pending_markers). Kafka calls that PrepareCommit/PrepareAbort.
    markers_pending: bool = False
    # How many transactions the id has completed (txn_complete counts them; set by
    # txn_pending_markers). The classic markers of a transaction carry its number as their
    # coordinator epoch: a marker request that reaches a leader late (sent on a connection
    # that was then cut, say) names an older number than the one the leader has seen and
    # is refused, instead of ending the producer's next transaction there.
    completions: int = 0

    @property
    def shown_state(self) -> str:
        """The state as Kafka's tools name it (Describe/ListTransactions)."""
        if self.markers_pending and self.state.startswith("Complete"):
            return "Prepare" + self.state.removeprefix("Complete")
        return self.state


@dataclass(slots=True)
class InitResult:
    error: int
    producer_id: int = -1
    producer_epoch: int = -1
    # With CONCURRENT_TRANSACTIONS: the ongoing transaction (with partitions) that must be
    # aborted first (txn_complete with commit=False, bump_epoch=True); then init again.
    pending: TransactionState | None = None


@dataclass(frozen=True, slots=True)
class Marker:
    """One control batch (one record) inside the markers' file."""

    topic_id: object  # UUID (typed loosely to keep this module import-light)
    partition: int
    byte_offset: int
    byte_size: int
    timestamp: int  # the batch's max timestamp (CreateTime)


@dataclass(frozen=True, slots=True)
class CompleteRequest:
    """What txn_complete is asked: end ``transactional_id``'s transaction (see there)."""

    transactional_id: str
    producer_id: int
    producer_epoch: int
    commit: bool  # False: abort
    bump_epoch: bool  # a coordinator abort: the producer is fenced (epoch + 1)
    # The file holding the markers: a marker object's key (nothing uploaded) or an uploaded
    # object's; ignored with no markers. The coordinator treats both alike.
    object_key: str
    object_size: int
    uploader_broker_id: int
    markers: Sequence[Marker]  # the diskless partitions' markers, inside that object
    now_ms: int
    pending: Sequence[PartitionKey] = ()  # the classic partitions (their leaders' markers)
    # The timeout sweep's: end only the transaction that started then (>= 0), not a newer
    # one of the same producer epoch begun since the sweep read it (CONCURRENT_TRANSACTIONS).
    started_ms: int = -1
    # KIP-890 part 2 (EndTxn v5+, with ``bump_epoch``): the producer's own end of a
    # transaction bumps its epoch; an abort at the stored epoch when nothing is ongoing
    # (Empty, Complete*) ends an empty transaction the same way; and a bump reaching
    # MAX_PRODUCER_EPOCH moves the id to a new producer id at epoch 0 (the markers keep the
    # old id and the bumped epoch). The result names the id and epoch to go on with.
    tv2: bool = False


@dataclass(slots=True)
class CompleteResult:
    error: int
    # Per marker, in order: its offset, or -1 when its log no longer exists (topic deleted)
    # or when nothing was appended (error, or the retry of a completed transaction).
    offsets: list[int] = field(default_factory=list)
    # True when the call registered the file (markers appended). False: the caller
    # deletes the object if it uploaded one.
    registered: bool = False
    # With NONE: the id's completed-transaction count after the call, i.e. the number of
    # the transaction just ended (or, for a retry, of the one that ended it): its classic
    # markers carry it.
    completions: int = 0
    # With NONE: the id's producer id and epoch after the call (a TV2 end's bumped ones,
    # which EndTxn v5 answers); -1 otherwise.
    producer_id: int = field(default=-1, compare=False)
    producer_epoch: int = field(default=-1, compare=False)


@dataclass(slots=True)
class ActiveProducer:
    """A producer with retained state in a partition (DescribeProducers, KIP-664)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int  # of its newest retained batch; -1 when that batch is gone
    current_txn_start_offset: int  # first offset of its open transaction, -1 if none


@dataclass(slots=True)
class AbortedTransaction:
    producer_id: int
    first_offset: int


class TransactionStore(ABC):
    """The transaction coordinator's operations; implemented by every BatchCoordinator
    backend (the markers and the verification of transactional batches need the same
    database transaction as the batches themselves)."""

    @abstractmethod
    async def txn_get(self, transactional_ids: Sequence[str]) -> list[TransactionState | None]:
        """The state of each id (None: unknown), in the given order."""

    @abstractmethod
    async def txn_list(
        self, states: Sequence[str], producer_ids: Sequence[int], min_duration_ms: int, now_ms: int
    ) -> list[TransactionState]:
        """ListTransactions: every id whose state is in ``states`` (empty: any), whose
        producer id is in ``producer_ids`` (empty: any) and, when ``min_duration_ms >= 0``,
        that is ONGOING and began at least that long before ``now_ms``. Sorted by id;
        ``partitions``/``groups`` may be left empty."""

    @abstractmethod
    async def txn_init(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int,
        expected_epoch: int,
        now_ms: int,
    ) -> InitResult:
        """InitProducerId with a transactional id.

        - Unknown id: a new producer id (from the same counter as ``allocate_producer_ids``),
          epoch 0, state EMPTY, whatever ``expected_producer_id`` says (the id may have
          been forgotten, as Kafka's expiry of transactional ids does).
        - ``expected_producer_id >= 0`` (KIP-360 re-initialisation) that is not the stored
          (producer id, epoch) nor (producer id, the epoch last bumped from): PRODUCER_FENCED,
          nothing changes. The epoch last bumped from (a retry whose answer was lost, or
          the epoch a coordinator abort fenced) is answered the stored epoch, not bumped
          again, and the id becomes EMPTY with the new ``timeout_ms`` (unless ONGOING).
        - ONGOING with partitions: CONCURRENT_TRANSACTIONS and ``pending``; nothing changes.
        - Otherwise (EMPTY, COMPLETE_*, or ONGOING with only groups, whose pending offsets
          are discarded): epoch + 1 (or, when that would reach MAX_PRODUCER_EPOCH, a new
          producer id with epoch 0), state EMPTY, the new ``timeout_ms``, no partitions,
          no groups, ``started_ms`` -1.
        """

    @abstractmethod
    async def txn_add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[PartitionKey],
        groups: Sequence[str],
        now_ms: int,
    ) -> int:
        """AddPartitionsToTxn / AddOffsetsToTxn: add to the ongoing transaction, starting
        one (ONGOING, ``started_ms = now_ms``, empty sets) from EMPTY or COMPLETE_*.

        Unknown id or another producer id: INVALID_PRODUCER_ID_MAPPING; another epoch:
        PRODUCER_FENCED. Nothing changes on error. Adding what is already there is NONE;
        adding nothing (both lists empty) is NONE and starts no transaction.
        """

    @abstractmethod
    async def txn_commit_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets: Sequence[CommittedOffset],
        now_ms: int,
    ) -> int:
        """TxnOffsetCommit: keep ``offsets`` of ``group_id`` pending in the transaction
        (replacing pending ones of the same partition; for a partition given twice the
        last wins); they become the group's committed offsets (with the commit timestamps
        given here) when it commits and vanish when it aborts.

        Errors as txn_add, plus INVALID_TXN_STATE when the transaction is not ONGOING or
        ``group_id`` was not added to it."""

    @abstractmethod
    async def txn_complete(self, request: CompleteRequest) -> CompleteResult:
        """EndTxn, and the coordinator's own aborts: end the ONGOING transaction of
        (``producer_id``, ``producer_epoch``), atomically (the names are the request's
        fields):

        - the object (reason 'produce') is registered and each marker appended to its log
          as a one-record batch at the high watermark (timestamp type CreateTime); a marker
          for a log that no longer exists is skipped (offset -1), and when no marker's log
          exists the object is not registered;
        - in each marker's partition the producer's open transaction closes; on abort, if
          one was open, (producer id, its first offset, the marker's offset) joins the
          partition's aborted transactions;
        - on commit the pending offsets of its groups become committed offsets (the
          group store's table), on abort they are dropped;
        - state COMPLETE_COMMIT / COMPLETE_ABORT, no partitions, no groups, ``started_ms``
          kept, ``completions`` + 1 (answered in the result), and with ``bump_epoch`` epoch
          + 1 (a coordinator abort fences the producer: its later requests get
          PRODUCER_FENCED, but its KIP-360 txn_init with the fenced epoch is answered the
          new one, see txn_init).

        The markers (the diskless partitions) and ``pending`` (the classic ones) together
        must name exactly the transaction's partitions (in any order); if they do not, or
        the markers name one twice (a partition was added since the caller read the
        state): CONCURRENT_TRANSACTIONS. A marker for a partition also in ``pending`` is
        not written (offset -1): a broker from before markers were diskless-only gives
        one for every partition. A partition in ``pending`` holding an open transaction
        of the producer in its diskless log (it migrated to diskless since the caller
        read which partitions are classic): CONCURRENT_TRANSACTIONS too. A marker for a
        log sealed by a migration to classic (see ``seal_log``) raises SealedLogRefused
        and changes nothing. Unknown id / other
        producer id: INVALID_PRODUCER_ID_MAPPING; a retried EndTxn (not ONGOING but already
        in the state asked for, with the stored epoch ``producer_epoch``, or
        ``producer_epoch + 1`` with ``bump_epoch``): NONE; other epoch: PRODUCER_FENCED;
        not ONGOING: INVALID_TXN_STATE. On any error, and on such a retry, nothing changes
        and the object is not registered (``registered`` False). With no markers
        ``object_key`` is ignored and no file is registered.

        ``pending``: the transaction's classic partitions, whose markers the caller sends to
        their leaders next (none is written here: a classic partition's records, and so
        its markers, are in its leader's log); recorded as pending markers with the
        outcome (see ``txn_pending_markers``). While an id has pending markers, txn_init,
        txn_add and txn_complete answer CONCURRENT_TRANSACTIONS (after the producer id
        check of txn_add/txn_complete, the fencing check of txn_init) and change nothing, and
        txn_forget_idle keeps it.
        """

    @abstractmethod
    async def txn_pending_markers(self, limit: int) -> list[TransactionState]:
        """Ids with pending markers (at most ``limit``, by id): each state (COMPLETE_*, whose
        producer id and epoch are the markers') with ``partitions`` the pending ones and
        ``completions`` (the markers' number)."""

    @abstractmethod
    async def txn_markers_written(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[PartitionKey],
    ) -> None:
        """The leaders acknowledged these markers: they are no longer pending. Ignored
        when the id's producer id or epoch is not the one given."""

    @abstractmethod
    async def txn_pending_offsets(self, group_ids: Sequence[str]) -> dict[str, set[PartitionKey]]:
        """Per group (only those that have any), the partitions with offsets pending in an
        ongoing transaction: OffsetFetch with ``require_stable`` answers them
        UNSTABLE_OFFSET_COMMIT until the transaction ends (KIP-447)."""

    @abstractmethod
    async def describe_producers(
        self, logs: Sequence[PartitionKey]
    ) -> list[list[ActiveProducer] | None]:
        """Per log, in order (None: unknown log): the producers with retained idempotence
        state, by producer id, each with its newest batch and its open transaction."""

    @abstractmethod
    async def txn_forget_idle(self, idle_before_ms: int, limit: int) -> list[str]:
        """``transactional.id.expiration.ms``: delete (at most ``limit``) ids that are not
        ONGOING and whose last state change is before ``idle_before_ms``; returns them,
        sorted. A later InitProducerId of such an id starts afresh (a new producer id)."""

    @abstractmethod
    async def txn_expired(self, now_ms: int, limit: int) -> list[TransactionState]:
        """ONGOING transactions with ``started_ms + timeout_ms < now_ms``, oldest first
        (by ``started_ms``, then id), at most ``limit``, with their partitions and groups:
        the coordinator aborts them."""
