"""commit_file on SQLite: the produce path's one transaction (offsets assigned, the
producers' idempotence and transaction checks, the batches and their object recorded).

Part of storage.coordinator.sqlite, split out for size; its functions run on the
coordinator's SQLite thread inside one transaction (storage.sqlite.run_transaction).
"""

from __future__ import annotations

import sqlite3
from collections import deque
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode

from storage.coordinator import BatchToCommit, CommitResult
from storage.transactions.sqlite import TxnVerifier, VerificationGuard, open_transactions

NONE = int(ErrorCode.none)
UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.unknown_topic_or_partition)
NOT_LEADER_OR_FOLLOWER = int(ErrorCode.not_leader_or_follower)
INVALID_PRODUCER_EPOCH = int(ErrorCode.invalid_producer_epoch)
OUT_OF_ORDER_SEQUENCE_NUMBER = int(ErrorCode.out_of_order_sequence_number)

# Kafka keeps this many batches per producer and partition to recognise retries.
PRODUCER_BATCHES_RETAINED = 5
INT32_MAX = 2**31 - 1
LOG_APPEND_TIME = 1


# --------------------------------------------------------------------------- idempotence


def _increment_sequence(sequence: int, increment: int) -> int:
    """Kafka's DefaultRecordBatch.incrementSequence: sequences wrap at 2^31-1 to 0."""
    if sequence > INT32_MAX - increment:
        return increment - (INT32_MAX - sequence) - 1
    return sequence + increment


class _ProducerState:
    """The retained batches of one producer in one partition (oldest first)."""

    __slots__ = ("appended", "entries", "epoch")

    def __init__(self, epoch: int) -> None:
        self.epoch = epoch
        # (base_sequence, last_sequence, base_offset, last_offset, timestamp a retry is
        # answered with: the log append time, else the batch's max timestamp)
        self.entries: deque[tuple[int, int, int, int, int]] = deque(
            maxlen=PRODUCER_BATCHES_RETAINED
        )
        self.appended = 0  # entries added by the current commit (not yet stored)


# --------------------------------------------------------------------------- SQL

SELECT_LOG = (
    "SELECT log_start_offset, high_watermark, byte_size FROM logs"
    " WHERE topic_id = ? AND partition = ?"
)
_UPDATE_LOG_APPEND = (
    "UPDATE logs SET high_watermark = ?, byte_size = ? WHERE topic_id = ? AND partition = ?"
)
_INSERT_FILE = (
    "INSERT INTO files (object_key, size, uploader_broker_id, committed_at, state, reason)"
    " VALUES (?, ?, ?, ?, 'uploaded', 'produce')"
)
INSERT_BATCH = (
    "INSERT INTO batches (topic_id, partition, base_offset, last_offset, file_id,"
    " byte_offset, byte_size, timestamp_type, max_timestamp, log_append_time)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SELECT_PRODUCER = (
    "SELECT producer_epoch, base_sequence, last_sequence, base_offset, last_offset,"
    " log_append_time FROM producer_state"
    " WHERE topic_id = ? AND partition = ? AND producer_id = ? ORDER BY base_offset"
)
_TRIM_PRODUCER = (
    "DELETE FROM producer_state"
    " WHERE topic_id = ? AND partition = ? AND producer_id = ? AND base_offset < ?"
)
INSERT_PRODUCER = (
    "INSERT INTO producer_state (topic_id, partition, producer_id, base_offset,"
    " producer_epoch, base_sequence, last_sequence, last_offset, log_append_time)"
    " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def commit_file_txn(
    cur: sqlite3.Cursor,
    object_key: str,
    object_size: int,
    uploader_broker_id: int,
    batches: Sequence[BatchToCommit],
    now_ms: int,
) -> list[CommitResult]:
    sealed = _sealed_logs(cur, batches)
    cur.execute(_INSERT_FILE, (object_key, object_size, uploader_broker_id, now_ms))
    file_id = cur.lastrowid

    tids: dict[UUID, bytes] = {}
    # Logs and producer states are read once, updated in memory as batches are taken
    # (so duplicates within this very call are recognised), and written back at the end.
    logs: dict[tuple[bytes, int], list[int] | None] = {}
    producers: dict[tuple[bytes, int, int], _ProducerState | None] = {}
    results: list[CommitResult] = []
    batch_rows: list[tuple[Any, ...]] = []
    # Only a call with a transactional batch reads the transaction tables.
    verifier: TxnVerifier | None = None
    opened: list[tuple[bytes, int, int, int]] = []

    for b in batches:
        tid = tids.get(b.topic_id)
        if tid is None:
            tid = tids[b.topic_id] = b.topic_id.bytes
        log_key = (tid, b.partition)
        if log_key in logs:
            log = logs[log_key]
        else:
            row = cur.execute(SELECT_LOG, log_key).fetchone()
            log = logs[log_key] = list(row) if row is not None else None
        if log is None:
            results.append(CommitResult(UNKNOWN_TOPIC_OR_PARTITION))
            continue
        if log_key in sealed:
            results.append(CommitResult(NOT_LEADER_OR_FOLLOWER))
            continue
        guard: VerificationGuard | None = None
        if b.transactional:
            # Before the idempotence checks: a retry of a batch whose transaction has
            # ended is refused like any late batch, never answered as a duplicate.
            if verifier is None:
                verifier = TxnVerifier(cur)
            error = verifier.check(tid, b.partition, b.producer_id, b.producer_epoch)
            if error:
                results.append(CommitResult(error))
                continue
            guard = verifier.guard(tid, b.partition, b.producer_id)
            guard.note(b.base_sequence)

        state: _ProducerState | None = None
        last_sequence = -1
        if b.producer_id >= 0:
            pkey = (tid, b.partition, b.producer_id)
            if pkey in producers:
                state = producers[pkey]
            else:
                state = producers[pkey] = _load_producer(cur, pkey)
            last_sequence = _increment_sequence(b.base_sequence, b.record_count - 1)
            verdict = _check_sequence(state, b, last_sequence, guard)
            if verdict is not None:
                # Refusals carry the log start offset too, as Kafka's do.
                results.append(_with_start(verdict, log[0]))
                continue
            if state is None or b.producer_epoch != state.epoch:
                # First batch seen from this producer, or an accepted epoch bump.
                state = producers[pkey] = _ProducerState(b.producer_epoch)

        base_offset = log[1]
        last_offset = base_offset + b.record_count - 1
        append_time = now_ms if b.timestamp_type == LOG_APPEND_TIME else -1
        log[1] = last_offset + 1
        log[2] += b.byte_size
        batch_rows.append(
            (
                tid,
                b.partition,
                base_offset,
                last_offset,
                file_id,
                b.byte_offset,
                b.byte_size,
                b.timestamp_type,
                b.max_timestamp,
                append_time,
            )
        )
        if state is not None:
            # A retry of this batch is answered with its timestamp (Kafka's BatchMetadata:
            # the log append time, else the batch's max timestamp), in log_append_time.
            stamp = append_time if append_time >= 0 else b.max_timestamp
            state.entries.append((b.base_sequence, last_sequence, base_offset, last_offset, stamp))
            state.appended += 1
        if b.transactional:
            opened.append((tid, b.partition, b.producer_id, base_offset))
            if guard is not None:
                guard.opened = True
        results.append(CommitResult(NONE, base_offset, append_time, log[0]))

    if verifier is not None:
        verifier.store()
    if batch_rows:
        cur.executemany(INSERT_BATCH, batch_rows)
        # Only logs that took batches changed (unknown logs are None in ``logs``).
        updates = []
        for k in {(r[0], r[1]) for r in batch_rows}:
            log = logs[k]
            assert log is not None
            updates.append((log[1], log[2], k[0], k[1]))
        cur.executemany(_UPDATE_LOG_APPEND, updates)
        _store_producers(cur, producers)
        if opened:
            open_transactions(cur, opened)
    else:
        cur.execute(
            "UPDATE files SET state = 'deleting', marked_at = ? WHERE file_id = ?",
            (now_ms, file_id),
        )
    return results


def _sealed_logs(cur: sqlite3.Cursor, batches: Sequence[BatchToCommit]) -> set[tuple[bytes, int]]:
    """The logs among ``batches``' that a migration to classic sealed. A broker that had not
    yet seen the migration must not store a batch past the seal: each such batch is
    refused NOT_LEADER_OR_FOLLOWER (its producer looks the partition up again and finds
    the classic leader), the call's other batches are committed, as PostgreSQL's
    sluice_commit_file does. One cheap query while no log is sealed."""
    if not cur.execute("SELECT EXISTS (SELECT 1 FROM sealed_logs)").fetchone()[0]:
        return set()
    return {
        key
        for key in {(b.topic_id.bytes, b.partition) for b in batches}
        if cur.execute(
            "SELECT 1 FROM sealed_logs WHERE topic_id = ? AND partition = ?", key
        ).fetchone()
    }


def _with_start(result: CommitResult, log_start_offset: int) -> CommitResult:
    return CommitResult(result.error, result.base_offset, result.log_append_time, log_start_offset)


def _load_producer(cur: sqlite3.Cursor, pkey: tuple[bytes, int, int]) -> _ProducerState | None:
    rows = cur.execute(_SELECT_PRODUCER, pkey).fetchall()
    if not rows:
        return None
    state = _ProducerState(rows[-1][0])
    state.entries.extend(r[1:] for r in rows)
    return state


def _check_sequence(
    state: _ProducerState | None,
    b: BatchToCommit,
    last_sequence: int,
    guard: VerificationGuard | None,
) -> CommitResult | None:
    """Kafka's ProducerStateManager checks (``state``: None for a producer new to the
    partition), in its order: the epoch, a duplicate, a transaction's verification (the
    guard), the sequence. None means "append it".

    A duplicate is answered as success (error NONE) with the original offset; the
    caller fills in the log start offset (of refusals too).
    """
    if state is not None:
        if b.producer_epoch < state.epoch:
            return CommitResult(INVALID_PRODUCER_EPOCH)
        if b.producer_epoch == state.epoch:
            for base_seq, last_seq, base_offset, _last_offset, append_time in state.entries:
                if base_seq == b.base_sequence and last_seq == last_sequence:
                    return CommitResult(NONE, base_offset, append_time)
    if guard is not None and guard.refuses(b.base_sequence):
        return CommitResult(OUT_OF_ORDER_SEQUENCE_NUMBER)
    if state is None:
        return None
    if b.producer_epoch > state.epoch:
        # A bumped epoch restarts sequences at 0.
        return None if b.base_sequence == 0 else CommitResult(OUT_OF_ORDER_SEQUENCE_NUMBER)
    if state.entries and b.base_sequence != _increment_sequence(state.entries[-1][1], 1):
        return CommitResult(OUT_OF_ORDER_SEQUENCE_NUMBER)
    return None


def _store_producers(
    cur: sqlite3.Cursor, producers: dict[tuple[bytes, int, int], _ProducerState | None]
) -> None:
    inserts = []
    trims = []
    for k, s in producers.items():
        if s is None or not s.appended:
            continue
        # Store only the new entries still retained, then drop every older row: those
        # that fell out of the five, and all rows of a previous epoch (their offsets
        # are lower than any batch of the new epoch).
        for e in list(s.entries)[-s.appended :]:
            inserts.append((*k, e[2], s.epoch, e[0], e[1], e[3], e[4]))
        trims.append((*k, s.entries[0][2]))
    cur.executemany(INSERT_PRODUCER, inserts)
    cur.executemany(_TRIM_PRODUCER, trims)


def commit_outcome_txn(
    cur: sqlite3.Cursor, object_key: str, batches: Sequence[BatchToCommit]
) -> list[CommitResult] | None:
    """BatchCoordinator.commit_outcome: None if the object was never committed, else each
    batch's answer (appended: its row under the file; a duplicate: its original in
    producer_state; refused then: REQUEST_TIMED_OUT, the error not being kept)."""
    row = cur.execute("SELECT file_id FROM files WHERE object_key = ?", (object_key,)).fetchone()
    if row is None:
        return None
    file_id = row[0]
    out = []
    for b in batches:
        tid = b.topic_id.bytes
        log = cur.execute(
            "SELECT log_start_offset FROM logs WHERE topic_id = ? AND partition = ?",
            (tid, b.partition),
        ).fetchone()
        start = log[0] if log is not None else -1
        found = cur.execute(
            "SELECT base_offset, log_append_time FROM batches"
            " WHERE file_id = ? AND topic_id = ? AND partition = ? AND byte_offset = ?",
            (file_id, tid, b.partition, b.byte_offset),
        ).fetchone()
        if found is None and b.producer_id >= 0:
            found = cur.execute(
                "SELECT base_offset, log_append_time FROM producer_state"
                " WHERE topic_id = ? AND partition = ? AND producer_id = ?"
                " AND producer_epoch = ? AND base_sequence = ? AND last_sequence = ?",
                (
                    tid,
                    b.partition,
                    b.producer_id,
                    b.producer_epoch,
                    b.base_sequence,
                    _increment_sequence(b.base_sequence, b.record_count - 1),
                ),
            ).fetchone()
        if found is None:
            out.append(CommitResult(int(ErrorCode.request_timed_out), -1, -1, start))
        else:
            out.append(CommitResult(NONE, found[0], found[1], start))
    return out
