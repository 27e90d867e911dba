"""Transactions on SQLite: the TransactionStore half of SqliteCoordinator.

The functions take the cursor of a transaction already begun by the coordinator's
``_write``/``_read`` (one method, one transaction), like the rest of
storage/coordinator/sqlite.py. Besides the TransactionStore methods (through the
:class:`SqliteTransactions` mixin) this module holds what the coordinator's own
transaction bodies need: the verification of transactional batches in commit_file
(:class:`TxnVerifier`), the open-transaction bookkeeping, the last stable offset and the
aborted transactions of a fetch.

Schema (migration 4 in storage.coordinator.sqlite.MIGRATIONS): ``transactions`` and, while a
transaction is ongoing, its ``txn_partitions``, ``txn_groups`` and pending
``txn_offsets``; per partition ``open_txns`` and ``aborted_txns``.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar
from uuid import UUID

from storage.coordinator import SealedLogRefused
from storage.groups import CommittedOffset
from storage.partition_key import PartitionKey
from storage.transactions import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    CONCURRENT_TRANSACTIONS,
    EMPTY,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TXN_STATE,
    MAX_PRODUCER_EPOCH,
    NONE,
    ONGOING,
    PRODUCER_FENCED,
    AbortedTransaction,
    ActiveProducer,
    CompleteRequest,
    CompleteResult,
    InitResult,
    TransactionState,
)

T = TypeVar("T")

_COLUMNS = (
    "transactional_id, producer_id, producer_epoch, state, timeout_ms, started_ms, updated_ms"
)
_SELECT_TXN = f"SELECT {_COLUMNS} FROM transactions WHERE transactional_id = ?"
_LAST_EPOCH = "SELECT last_producer_epoch FROM transactions WHERE transactional_id = ?"
_COMPLETIONS = "SELECT completions FROM transactions WHERE transactional_id = ?"
_TXN_PARTITIONS = (
    "SELECT topic_id, partition FROM txn_partitions WHERE transactional_id = ?"
    " ORDER BY topic_id, partition"
)
_TXN_GROUPS = "SELECT group_id FROM txn_groups WHERE transactional_id = ? ORDER BY group_id"
# A new producer id from allocate_producer_ids' counter, in the caller's transaction.
_ALLOCATE_ONE = (
    "UPDATE producer_id_blocks SET next_id = next_id + 1 WHERE id = 1 RETURNING next_id - 1"
)

# commit_file
_VERIFY_PRODUCER = (
    "SELECT transactional_id, producer_epoch, state FROM transactions WHERE producer_id = ?"
)
_VERIFY_PARTITION = (
    "SELECT lowest_sequence FROM txn_partitions"
    " WHERE transactional_id = ? AND topic_id = ? AND partition = ?"
)
_OPENED = "SELECT 1 FROM open_txns WHERE topic_id = ? AND partition = ? AND producer_id = ?"
_SET_LOWEST = (
    "UPDATE txn_partitions SET lowest_sequence = ?"
    " WHERE transactional_id = ? AND topic_id = ? AND partition = ?"
)
# The first transactional batch of a producer in a partition opens its transaction there;
# later ones (and retries) leave the first offset as it is.
_OPEN_TXN = (
    "INSERT OR IGNORE INTO open_txns (topic_id, partition, producer_id, first_offset)"
    " VALUES (?, ?, ?, ?)"
)

# fetch
_MIN_OPEN = "SELECT min(first_offset) FROM open_txns WHERE topic_id = ? AND partition = ?"
_ABORTED_FROM = (
    "SELECT producer_id, first_offset, last_stable_offset FROM aborted_txns"
    " WHERE topic_id = ? AND partition = ? AND last_offset >= ? ORDER BY last_offset"
)

# txn_complete
_SELECT_LOG = "SELECT high_watermark FROM logs WHERE topic_id = ? AND partition = ?"
_SEALED = "SELECT 1 FROM sealed_logs WHERE topic_id = ? AND partition = ?"
_INSERT_FILE = (
    "INSERT INTO files (object_key, size, uploader_broker_id, committed_at, state, reason)"
    " VALUES (?, ?, ?, ?, 'uploaded', 'produce')"
)
_INSERT_MARKER = (
    "INSERT INTO batches (topic_id, partition, base_offset, last_offset, file_id,"
    " byte_offset, byte_size, timestamp_type, max_timestamp, log_append_time)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, 0, ?, -1)"
)
_APPEND_MARKER = (
    "UPDATE logs SET high_watermark = high_watermark + 1, byte_size = byte_size + ?"
    " WHERE topic_id = ? AND partition = ?"
)
_OPEN = "SELECT 1 FROM open_txns WHERE topic_id = ? AND partition = ? AND producer_id = ?"
_CLOSE_OPEN = (
    "DELETE FROM open_txns WHERE topic_id = ? AND partition = ? AND producer_id = ?"
    " RETURNING first_offset"
)
_INSERT_ABORTED = (
    "INSERT INTO aborted_txns (topic_id, partition, last_offset, producer_id, first_offset,"
    " last_stable_offset) VALUES (?, ?, ?, ?, ?, ?)"
)
_HAS_PENDING_OFFSETS = "SELECT 1 FROM txn_offsets WHERE transactional_id = ? LIMIT 1"
# group_offsets belongs to the group store (same file, its own migrations); it exists
# whenever offsets can be pending, since TxnOffsetCommit comes through a broker that
# started the group store. The WHERE before ON CONFLICT is SQLite's required
# disambiguation of an upsert from INSERT ... SELECT.
_COMMIT_OFFSETS = (
    "INSERT INTO group_offsets (group_id, topic_id, partition, committed_offset,"
    " leader_epoch, metadata, commit_timestamp)"
    " SELECT group_id, topic_id, partition, committed_offset, leader_epoch, metadata,"
    " commit_timestamp FROM txn_offsets WHERE transactional_id = ?"
    " ON CONFLICT (group_id, topic_id, partition) DO UPDATE SET"
    " committed_offset = excluded.committed_offset, leader_epoch = excluded.leader_epoch,"
    " metadata = excluded.metadata, commit_timestamp = excluded.commit_timestamp"
)


def _state(row: tuple[Any, ...]) -> TransactionState:
    return TransactionState(*row)


def _load(cur: sqlite3.Cursor, transactional_id: str) -> TransactionState | None:
    row = cur.execute(_SELECT_TXN, (transactional_id,)).fetchone()
    return None if row is None else _state(row)


def _with_sets(cur: sqlite3.Cursor, state: TransactionState) -> TransactionState:
    tid = state.transactional_id
    state.partitions = [
        PartitionKey(UUID(bytes=t), p) for t, p in cur.execute(_TXN_PARTITIONS, (tid,))
    ]
    state.groups = [g for (g,) in cur.execute(_TXN_GROUPS, (tid,))]
    return state


def _forget_sets(cur: sqlite3.Cursor, transactional_id: str) -> None:
    for table in ("txn_partitions", "txn_groups", "txn_offsets"):
        cur.execute(f"DELETE FROM {table} WHERE transactional_id = ?", (transactional_id,))


def _check_producer(state: TransactionState | None, producer_id: int, epoch: int) -> int:
    if state is None or state.producer_id != producer_id:
        return INVALID_PRODUCER_ID_MAPPING
    if state.producer_epoch != epoch:
        return PRODUCER_FENCED
    return NONE


# --------------------------------------------------------------------------- commit_file


class VerificationGuard:
    """KIP-890's VerificationStateEntry for one producer's transaction in one partition:
    until a batch of the transaction is written there, the lowest sequence its batches
    showed, and a batch with a higher one is refused (OUT_OF_ORDER_SEQUENCE_NUMBER) so the
    lower one is written first. Without it, a client that gives a new transaction the
    sequence of a record it purged from its aborted one (librdkafka does, when that
    record's request failed in transport) has the new record answered as a duplicate of
    the aborted one, and the rest of the transaction committed without it."""

    __slots__ = ("changed", "lowest", "opened")

    def __init__(self, lowest: int | None, opened: bool) -> None:
        self.lowest = lowest
        self.opened = opened  # a batch of the transaction is in the partition already
        self.changed = False

    def note(self, sequence: int) -> None:
        """A batch of the transaction comes for the partition (before its idempotence
        checks, as Kafka starts a verification before it looks for a duplicate)."""
        if not self.opened and (self.lowest is None or sequence < self.lowest):
            self.lowest = sequence
            self.changed = True

    def refuses(self, sequence: int) -> bool:
        """Whether a batch starting at ``sequence`` (not a duplicate) must wait for a lower
        one."""
        return not self.opened and self.lowest is not None and sequence > self.lowest


class TxnVerifier:
    """KIP-890's verification of the transactional batches of one commit_file call.

    Built only when the call has a transactional batch, so produce without transactions
    never reads these tables. Lookups are cached for the call: every batch of one
    producer and partition costs one index probe at most.
    """

    __slots__ = ("_cur", "_guards", "_producers")

    def __init__(self, cur: sqlite3.Cursor) -> None:
        self._cur = cur
        self._producers: dict[int, tuple[str, int, str] | None] = {}
        # (transactional id, topic id, partition) -> the partition's verification guard in
        # the producer's transaction, None when the transaction does not hold it
        self._guards: dict[tuple[str, bytes, int], VerificationGuard | None] = {}

    def check(self, tid: bytes, partition: int, producer_id: int, epoch: int) -> int:
        if producer_id not in self._producers:
            self._producers[producer_id] = self._cur.execute(
                _VERIFY_PRODUCER, (producer_id,)
            ).fetchone()
        txn = self._producers[producer_id]
        if txn is None:
            return INVALID_TXN_STATE
        transactional_id, stored_epoch, state = txn
        if stored_epoch != epoch:
            return INVALID_PRODUCER_EPOCH
        if state != ONGOING:
            return INVALID_TXN_STATE
        key = (transactional_id, tid, partition)
        if key not in self._guards:
            row = self._cur.execute(_VERIFY_PARTITION, key).fetchone()
            opened = row is not None and (
                self._cur.execute(_OPENED, (tid, partition, producer_id)).fetchone() is not None
            )
            self._guards[key] = None if row is None else VerificationGuard(row[0], opened)
        return NONE if self._guards[key] is not None else INVALID_TXN_STATE

    def guard(self, tid: bytes, partition: int, producer_id: int) -> VerificationGuard:
        """The verification guard of a batch :meth:`check` accepted."""
        txn = self._producers[producer_id]
        assert txn is not None
        guard = self._guards[(txn[0], tid, partition)]
        assert guard is not None
        return guard

    def store(self) -> None:
        """Write back the lowest sequences this call changed."""
        changed = [(g.lowest, *key) for key, g in self._guards.items() if g and g.changed]
        if changed:
            self._cur.executemany(_SET_LOWEST, changed)


def open_transactions(cur: sqlite3.Cursor, opened: list[tuple[bytes, int, int, int]]) -> None:
    """Open (topic id, partition, producer id, base offset) unless already open; given in
    offset order, so the first batch of a producer in a call is where its transaction
    begins."""
    cur.executemany(_OPEN_TXN, opened)


# --------------------------------------------------------------------------- fetch


def last_stable_offset(
    cur: sqlite3.Cursor, tid: bytes, partition: int, log_start: int, hwm: int
) -> int:
    (first,) = cur.execute(_MIN_OPEN, (tid, partition)).fetchone()
    return hwm if first is None else max(first, log_start)


def aborted_overlapping(
    cur: sqlite3.Cursor, tid: bytes, partition: int, offset: int, last: int
) -> list[AbortedTransaction]:
    """Aborted transactions with ``last_offset >= offset`` and ``first_offset <= last``.

    They are read in marker order and the scan stops after the first whose recorded
    last stable offset is past ``last``: every transaction aborted later was either
    open then (so it began at or after that LSO) or began later still, so none of them
    reaches back to ``last``. That bounds the scan by the transactions unstable around
    the fetched range rather than by all aborts after it (Kafka's transaction index
    search stops the same way).
    """
    out: list[AbortedTransaction] = []
    # A cursor of its own: the scan stops early and is closed, the caller's goes on.
    rows = cur.connection.execute(_ABORTED_FROM, (tid, partition, offset))
    try:
        for producer_id, first_offset, lso in rows:
            if first_offset <= last:
                out.append(AbortedTransaction(producer_id, first_offset))
            if lso > last:
                break
    finally:
        rows.close()
    return out


# --------------------------------------------------------------------------- methods


def txn_get(cur: sqlite3.Cursor, ids: list[str]) -> list[TransactionState | None]:
    out: list[TransactionState | None] = []
    for transactional_id in ids:
        state = _load(cur, transactional_id)
        if state is not None:
            state.markers_pending = _markers_pending(cur, transactional_id)
            state = _with_sets(cur, state)
        out.append(state)
    return out


def txn_list(
    cur: sqlite3.Cursor,
    states: list[str],
    producer_ids: list[int],
    min_duration_ms: int,
    now_ms: int,
) -> list[TransactionState]:
    sql = f"SELECT {_COLUMNS} FROM transactions WHERE 1"
    args: list[Any] = []
    if states:
        sql += f" AND state IN ({','.join('?' * len(states))})"
        args += states
    if producer_ids:
        sql += f" AND producer_id IN ({','.join('?' * len(producer_ids))})"
        args += producer_ids
    if min_duration_ms >= 0:
        sql += " AND state = ? AND started_ms <= ?"
        args += [ONGOING, now_ms - min_duration_ms]
    sql += " ORDER BY transactional_id"
    found = [_state(r) for r in cur.execute(sql, args)]
    for state in found:
        state.markers_pending = _markers_pending(cur, state.transactional_id)
    return found


def txn_init(
    cur: sqlite3.Cursor,
    transactional_id: str,
    timeout_ms: int,
    expected_producer_id: int,
    expected_epoch: int,
    now_ms: int,
) -> InitResult:
    state = _load(cur, transactional_id)
    if state is None:
        (producer_id,) = cur.execute(_ALLOCATE_ONE).fetchone()
        cur.execute(
            f"INSERT INTO transactions ({_COLUMNS}) VALUES (?, ?, 0, ?, ?, -1, ?)",
            (transactional_id, producer_id, EMPTY, timeout_ms, now_ms),
        )
        return InitResult(NONE, producer_id, 0)
    retry = False
    if expected_producer_id >= 0:
        if expected_producer_id != state.producer_id:
            return InitResult(PRODUCER_FENCED)
        # KIP-360: the epoch it has, or the one before our last bump of it (a retry of a
        # call whose answer the producer never got: answered again, not bumped again).
        retry = expected_epoch != state.producer_epoch
        if retry:
            (last_epoch,) = cur.execute(_LAST_EPOCH, (transactional_id,)).fetchone()
            if last_epoch < 0 or expected_epoch != last_epoch:
                return InitResult(PRODUCER_FENCED)
    if _markers_pending(cur, transactional_id):
        return InitResult(CONCURRENT_TRANSACTIONS)
    if retry and state.state != ONGOING:
        # Answered with the epoch it has, not bumped again; the id starts afresh (Empty, the
        # new timeout) as Kafka's retried re-initialisation does.
        cur.execute(
            "UPDATE transactions SET state = ?, timeout_ms = ?, started_ms = -1, updated_ms = ?"
            " WHERE transactional_id = ?",
            (EMPTY, timeout_ms, now_ms, transactional_id),
        )
        return InitResult(NONE, state.producer_id, state.producer_epoch)
    if state.state == ONGOING:
        _with_sets(cur, state)
        if state.partitions:
            return InitResult(CONCURRENT_TRANSACTIONS, pending=state)
        # Only offsets were added: nothing reached a partition, nothing needs a marker.
        _forget_sets(cur, transactional_id)
    producer_id, epoch = state.producer_id, state.producer_epoch + 1
    if epoch >= MAX_PRODUCER_EPOCH:
        (producer_id,) = cur.execute(_ALLOCATE_ONE).fetchone()
        epoch = 0
    # The epoch bumped from, for a retry of this call; none across a new producer id.
    last = expected_epoch if expected_producer_id >= 0 and producer_id == state.producer_id else -1
    cur.execute(
        "UPDATE transactions SET producer_id = ?, producer_epoch = ?, state = ?,"
        " timeout_ms = ?, started_ms = -1, updated_ms = ?, last_producer_epoch = ?"
        " WHERE transactional_id = ?",
        (producer_id, epoch, EMPTY, timeout_ms, now_ms, last, transactional_id),
    )
    return InitResult(NONE, producer_id, epoch)


def _begin_if_needed(cur: sqlite3.Cursor, state: TransactionState, now_ms: int) -> None:
    if state.state != ONGOING:
        cur.execute(
            "UPDATE transactions SET state = ?, started_ms = ?, updated_ms = ?"
            " WHERE transactional_id = ?",
            (ONGOING, now_ms, now_ms, state.transactional_id),
        )


def txn_add(
    cur: sqlite3.Cursor,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Sequence[PartitionKey],
    groups: Sequence[str],
    now_ms: int,
) -> int:
    state = _load(cur, transactional_id)
    error = _check_producer(state, producer_id, producer_epoch)
    if error:
        return error
    if _markers_pending(cur, transactional_id):
        return CONCURRENT_TRANSACTIONS  # the previous transaction is not fully marked yet
    if not (partitions or groups):
        return NONE
    assert state is not None
    _begin_if_needed(cur, state, now_ms)
    cur.executemany(
        "INSERT OR IGNORE INTO txn_partitions (transactional_id, topic_id, partition)"
        " VALUES (?, ?, ?)",
        [(transactional_id, k.topic_id.bytes, k.partition) for k in partitions],
    )
    cur.executemany(
        "INSERT OR IGNORE INTO txn_groups (transactional_id, group_id) VALUES (?, ?)",
        [(transactional_id, g) for g in groups],
    )
    return NONE


def txn_commit_offsets(
    cur: sqlite3.Cursor,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    group_id: str,
    offsets: Sequence[CommittedOffset],
) -> int:
    state = _load(cur, transactional_id)
    error = _check_producer(state, producer_id, producer_epoch)
    if error:
        return error
    assert state is not None
    if state.state != ONGOING:
        return INVALID_TXN_STATE
    member = cur.execute(
        "SELECT 1 FROM txn_groups WHERE transactional_id = ? AND group_id = ?",
        (transactional_id, group_id),
    ).fetchone()
    if member is None:
        return INVALID_TXN_STATE
    cur.executemany(
        "INSERT INTO txn_offsets (transactional_id, group_id, topic_id, partition,"
        " committed_offset, leader_epoch, metadata, commit_timestamp)"
        " VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (transactional_id, group_id, topic_id, partition) DO UPDATE SET"
        " committed_offset = excluded.committed_offset, leader_epoch = excluded.leader_epoch,"
        " metadata = excluded.metadata, commit_timestamp = excluded.commit_timestamp",
        [
            (
                transactional_id,
                group_id,
                o.topic_id.bytes,
                o.partition,
                o.offset,
                o.leader_epoch,
                o.metadata,
                o.commit_timestamp,
            )
            for o in offsets
        ],
    )
    return NONE


def txn_complete(cur: sqlite3.Cursor, r: CompleteRequest) -> CompleteResult:
    nothing = [-1] * len(r.markers)
    state = _load(cur, r.transactional_id)
    if state is None or state.producer_id != r.producer_id:
        return CompleteResult(INVALID_PRODUCER_ID_MAPPING, nothing)
    if _markers_pending(cur, r.transactional_id):
        # The previous transaction's classic markers are not all written yet (Kafka's
        # PrepareCommit/PrepareAbort): the client retries.
        return CompleteResult(CONCURRENT_TRANSACTIONS, nothing)
    target = COMPLETE_COMMIT if r.commit else COMPLETE_ABORT
    (completions,) = cur.execute(_COMPLETIONS, (r.transactional_id,)).fetchone()
    if state.state == target and state.producer_epoch == r.producer_epoch + r.bump_epoch:
        # A retried EndTxn (or abort) whose first attempt completed: same answer, no change.
        return CompleteResult(
            NONE,
            nothing,
            completions=completions,
            producer_id=state.producer_id,
            producer_epoch=state.producer_epoch,
        )
    if state.producer_epoch != r.producer_epoch:
        return CompleteResult(PRODUCER_FENCED, nothing)
    # KIP-890 part 2: a TV2 producer's abort with nothing ongoing ends an empty transaction.
    if state.state != ONGOING and not (r.tv2 and not r.commit):
        return CompleteResult(INVALID_TXN_STATE, nothing)
    if r.started_ms >= 0 and state.started_ms != r.started_ms:
        # The timeout sweep read a transaction that has ended since; this is a new one
        # with the same producer epoch (and maybe partitions): not the one that timed out.
        return CompleteResult(CONCURRENT_TRANSACTIONS, nothing)
    keys = [(m.topic_id.bytes, m.partition) for m in r.markers]
    classic = {(k.topic_id.bytes, k.partition) for k in r.pending}
    added = set(cur.execute(_TXN_PARTITIONS, (r.transactional_id,)).fetchall())
    if len(set(keys)) != len(keys) or set(keys) | classic != added:
        # A partition was added after the caller read the state (or it named others): it
        # must read again and write markers for exactly these.
        return CompleteResult(CONCURRENT_TRANSACTIONS, nothing)

    if any(cur.execute(_OPEN, (*k, r.producer_id)).fetchone() for k in classic):
        # A partition named classic holds the producer's open transaction in its diskless
        # log: it migrated to diskless after the caller read which partitions are classic
        # (its classic leader would refuse the marker). The caller reads again.
        return CompleteResult(CONCURRENT_TRANSACTIONS, nothing)
    # A classic partition's marker is its leader's: one given for it anyway (a broker
    # from before markers were diskless-only names every partition) is not written.
    for k in keys:
        # A sealed log takes nothing past its boundary, markers included (as PostgreSQL's
        # trigger): the caller sees the partition as diskless only until it sees the seal.
        if k not in classic and cur.execute(_SEALED, k).fetchone():
            raise SealedLogRefused(f"log {UUID(bytes=k[0])}-{k[1]} is sealed")

    offsets = nothing[:]
    hwms = [None if k in classic else cur.execute(_SELECT_LOG, k).fetchone() for k in keys]
    registered = any(h is not None for h in hwms)
    if registered:
        cur.execute(_INSERT_FILE, (r.object_key, r.object_size, r.uploader_broker_id, r.now_ms))
        file_id = cur.lastrowid
        for i, (m, k, h) in enumerate(zip(r.markers, keys, hwms, strict=True)):
            if h is None:
                continue  # the topic was deleted (or the partition is classic): no marker
            offset = offsets[i] = h[0]
            cur.execute(
                _INSERT_MARKER,
                (*k, offset, offset, file_id, m.byte_offset, m.byte_size, m.timestamp),
            )
            cur.execute(_APPEND_MARKER, (m.byte_size, *k))
            opened = cur.execute(_CLOSE_OPEN, (*k, r.producer_id)).fetchone()
            if opened is not None and not r.commit:
                (first,) = cur.execute(_MIN_OPEN, k).fetchone()
                lso = offset + 1 if first is None else first
                cur.execute(_INSERT_ABORTED, (*k, offset, r.producer_id, opened[0], lso))

    if r.commit and cur.execute(_HAS_PENDING_OFFSETS, (r.transactional_id,)).fetchone():
        cur.execute(_COMMIT_OFFSETS, (r.transactional_id,))
    _forget_sets(cur, r.transactional_id)
    cur.executemany(
        "INSERT INTO txn_pending_markers (transactional_id, topic_id, partition) VALUES (?, ?, ?)",
        [(r.transactional_id, k.topic_id.bytes, k.partition) for k in set(r.pending)],
    )
    # A coordinator abort fences the producer (epoch + 1); the fenced epoch is remembered as
    # the one bumped from, so that producer's KIP-360 re-initialisation gets the new epoch
    # back instead of PRODUCER_FENCED (Kafka 4.x: a producer whose transaction timed out
    # recovers by InitProducerId with its id and epoch).
    producer_id, epoch, last_epoch = r.producer_id, r.producer_epoch + r.bump_epoch, -2
    if r.tv2 and epoch >= MAX_PRODUCER_EPOCH:
        # KIP-890 part 2: epochs never wrap; the id goes on with a new producer id.
        (producer_id,) = cur.execute(_ALLOCATE_ONE).fetchone()
        epoch, last_epoch = 0, -1
    elif r.bump_epoch:
        last_epoch = r.producer_epoch
    cur.execute(
        "UPDATE transactions SET state = ?, producer_id = ?, producer_epoch = ?,"
        " updated_ms = ?, completions = completions + 1,"
        " last_producer_epoch = CASE WHEN ? = -2 THEN last_producer_epoch ELSE ? END"
        " WHERE transactional_id = ?",
        (target, producer_id, epoch, r.now_ms, last_epoch, last_epoch, r.transactional_id),
    )
    return CompleteResult(NONE, offsets, registered, completions + 1, producer_id, epoch)


def txn_expired(cur: sqlite3.Cursor, now_ms: int, limit: int) -> list[TransactionState]:
    rows = cur.execute(
        f"SELECT {_COLUMNS} FROM transactions WHERE state = ? AND started_ms + timeout_ms < ?"
        " ORDER BY started_ms, transactional_id LIMIT ?",
        (ONGOING, now_ms, limit),
    ).fetchall()
    return [_with_sets(cur, _state(r)) for r in rows]


_PRODUCERS = (
    "SELECT s.producer_id, s.producer_epoch, s.last_sequence,"
    " CASE WHEN b.timestamp_type = 1 THEN b.log_append_time ELSE b.max_timestamp END,"
    " o.first_offset"
    " FROM producer_state s"
    " LEFT JOIN batches b ON b.topic_id = s.topic_id AND b.partition = s.partition"
    "  AND b.last_offset = s.last_offset"
    " LEFT JOIN open_txns o ON o.topic_id = s.topic_id AND o.partition = s.partition"
    "  AND o.producer_id = s.producer_id"
    " WHERE s.topic_id = ? AND s.partition = ? AND s.base_offset = ("
    "  SELECT max(base_offset) FROM producer_state n WHERE n.topic_id = s.topic_id"
    "  AND n.partition = s.partition AND n.producer_id = s.producer_id)"
    " ORDER BY s.producer_id"
)


def describe_producers(
    cur: sqlite3.Cursor, logs: list[PartitionKey]
) -> list[list[ActiveProducer] | None]:
    out: list[list[ActiveProducer] | None] = []
    for k in logs:
        tid = k.topic_id.bytes
        if (
            cur.execute(
                "SELECT 1 FROM logs WHERE topic_id = ? AND partition = ?", (tid, k.partition)
            ).fetchone()
            is None
        ):
            out.append(None)
            continue
        out.append(
            [
                ActiveProducer(
                    pid, epoch, seq, -1 if ts is None else ts, -1 if first is None else first
                )
                for pid, epoch, seq, ts, first in cur.execute(_PRODUCERS, (tid, k.partition))
            ]
        )
    return out


def txn_forget_idle(cur: sqlite3.Cursor, idle_before_ms: int, limit: int) -> list[str]:
    ids = [
        r[0]
        for r in cur.execute(
            "SELECT transactional_id FROM transactions t WHERE state <> ? AND updated_ms < ?"
            " AND NOT EXISTS (SELECT 1 FROM txn_pending_markers m"
            "  WHERE m.transactional_id = t.transactional_id)"
            " ORDER BY transactional_id LIMIT ?",
            (ONGOING, idle_before_ms, limit),
        )
    ]
    params = [(i,) for i in ids]
    # Not ONGOING: no partitions, groups or pending offsets are left, but a row of any of
    # them must never outlive its id.
    for table in ("txn_partitions", "txn_groups", "txn_offsets", "transactions"):
        cur.executemany(f"DELETE FROM {table} WHERE transactional_id = ?", params)
    return ids


def txn_pending_offsets(cur: sqlite3.Cursor, group_ids: list[str]) -> dict[str, set[PartitionKey]]:
    out: dict[str, set[PartitionKey]] = {}
    for group_id in group_ids:
        for topic_id, partition in cur.execute(
            "SELECT topic_id, partition FROM txn_offsets WHERE group_id = ?", (group_id,)
        ):
            out.setdefault(group_id, set()).add(PartitionKey(UUID(bytes=topic_id), partition))
    return out


def _markers_pending(cur: sqlite3.Cursor, transactional_id: str) -> bool:
    return (
        cur.execute(
            "SELECT 1 FROM txn_pending_markers WHERE transactional_id = ? LIMIT 1",
            (transactional_id,),
        ).fetchone()
        is not None
    )


def txn_pending_markers(cur: sqlite3.Cursor, limit: int) -> list[TransactionState]:
    ids = [
        r[0]
        for r in cur.execute(
            "SELECT DISTINCT transactional_id FROM txn_pending_markers"
            " ORDER BY transactional_id LIMIT ?",
            (limit,),
        )
    ]
    out: list[TransactionState] = []
    for transactional_id in ids:
        state = _load(cur, transactional_id)
        if state is None:
            continue  # cannot happen: forgetting an id skips those with pending markers
        (state.completions,) = cur.execute(_COMPLETIONS, (transactional_id,)).fetchone()
        state.partitions = [
            PartitionKey(UUID(bytes=t), p)
            for t, p in cur.execute(
                "SELECT topic_id, partition FROM txn_pending_markers"
                " WHERE transactional_id = ? ORDER BY topic_id, partition",
                (transactional_id,),
            )
        ]
        out.append(state)
    return out


def txn_markers_written(
    cur: sqlite3.Cursor,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    partitions: Sequence[PartitionKey],
) -> None:
    state = _load(cur, transactional_id)
    if state is None or (state.producer_id, state.producer_epoch) != (producer_id, producer_epoch):
        return  # not the transaction whose markers these are (cannot change while pending)
    cur.executemany(
        "DELETE FROM txn_pending_markers"
        " WHERE transactional_id = ? AND topic_id = ? AND partition = ?",
        [(transactional_id, k.topic_id.bytes, k.partition) for k in partitions],
    )


# --------------------------------------------------------------------------- mixin


class SqliteTransactions:
    """TransactionStore on the coordinator's SQLite connection (mixed into
    SqliteCoordinator, which provides ``_read``/``_write``: one transaction each)."""

    if TYPE_CHECKING:

        async def _write(self, fn: Callable[..., T], *args: Any) -> T: ...
        async def _read(self, fn: Callable[..., T], *args: Any) -> T: ...

    async def txn_get(self, transactional_ids: Sequence[str]) -> list[TransactionState | None]:
        return await self._read(txn_get, list(transactional_ids))

    async def txn_list(
        self, states: Sequence[str], producer_ids: Sequence[int], min_duration_ms: int, now_ms: int
    ) -> list[TransactionState]:
        return await self._read(txn_list, list(states), list(producer_ids), min_duration_ms, now_ms)

    async def txn_init(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int,
        expected_epoch: int,
        now_ms: int,
    ) -> InitResult:
        return await self._write(
            txn_init, transactional_id, timeout_ms, expected_producer_id, expected_epoch, now_ms
        )

    async def txn_add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[PartitionKey],
        groups: Sequence[str],
        now_ms: int,
    ) -> int:
        return await self._write(
            txn_add, transactional_id, producer_id, producer_epoch, partitions, groups, now_ms
        )

    async def txn_commit_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets: Sequence[CommittedOffset],
        now_ms: int,
    ) -> int:
        return await self._write(
            txn_commit_offsets, transactional_id, producer_id, producer_epoch, group_id, offsets
        )

    async def txn_complete(self, request: CompleteRequest) -> CompleteResult:
        return await self._write(txn_complete, request)

    async def txn_pending_markers(self, limit: int) -> list[TransactionState]:
        return await self._read(txn_pending_markers, limit)

    async def txn_markers_written(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[PartitionKey],
    ) -> None:
        await self._write(
            txn_markers_written, transactional_id, producer_id, producer_epoch, list(partitions)
        )

    async def txn_expired(self, now_ms: int, limit: int) -> list[TransactionState]:
        return await self._read(txn_expired, now_ms, limit)

    async def txn_pending_offsets(self, group_ids: Sequence[str]) -> dict[str, set[PartitionKey]]:
        return await self._read(txn_pending_offsets, list(group_ids))

    async def txn_forget_idle(self, idle_before_ms: int, limit: int) -> list[str]:
        return await self._write(txn_forget_idle, idle_before_ms, limit)

    async def describe_producers(
        self, logs: Sequence[PartitionKey]
    ) -> list[list[ActiveProducer] | None]:
        return await self._read(describe_producers, list(logs))
