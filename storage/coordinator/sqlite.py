"""Embedded batch coordinator on SQLite.

Every database call runs on the coordinator's one SQLite thread (storage.sqlite). Its
schema is storage.coordinator.sqlite_schema; commit_file's transaction (the produce path)
is storage.coordinator.sqlite_produce; the TransactionStore half is
storage.transactions.sqlite.

Each public method is one transaction, mirroring the PostgreSQL backend where each is
one round trip. Inside a transaction, per-partition point statements are fine: they
are cheap in-process calls on prepared statements from sqlite3's statement cache, not
network round trips.

UUIDs are stored as 16-byte blobs everywhere.
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Sequence
from typing import TypeVar
from uuid import UUID

from kio.schema.errors import ErrorCode

from storage.coordinator import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    INVALID_REQUEST,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    REPLACE_CONFLICT,
    BatchCoordinator,
    BatchListing,
    BatchLocation,
    BatchReplacement,
    BatchToCommit,
    BrokerRegistration,
    CommitResult,
    DeleteRecordsResult,
    FileToDelete,
    FindRequest,
    FindResult,
    ListBatchesRequest,
    ListOffsetsRequest,
    ListOffsetsResult,
    LogInfo,
    RetentionPolicy,
    SealedLog,
    SeededProducerBatch,
    StoredBatch,
)
from storage.partition_key import PartitionKey
from storage.sqlite import SqliteUser
from storage.transactions import AbortedTransaction
from storage.transactions.sqlite import (
    SqliteTransactions,
    aborted_overlapping,
    last_stable_offset,
)

from .sqlite_produce import (
    INSERT_BATCH,
    INSERT_PRODUCER,
    SELECT_LOG,
    commit_file_txn,
    commit_outcome_txn,
)
from .sqlite_schema import MIGRATIONS

T = TypeVar("T")

NONE = int(ErrorCode.none)
UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.unknown_topic_or_partition)
CONCURRENT_TRANSACTIONS = int(ErrorCode.concurrent_transactions)
OFFSET_OUT_OF_RANGE = int(ErrorCode.offset_out_of_range)


# The timestamp a batch is searched and retained by: LogAppendTime batches carry the
# broker's time, CreateTime ones the producer's max timestamp.
_TS = "CASE WHEN timestamp_type = 1 THEN log_append_time ELSE max_timestamp END"


# --------------------------------------------------------------------------- SQL

_UPDATE_LOG_START = (
    "UPDATE logs SET log_start_offset = ?, byte_size = byte_size - ?"
    " WHERE topic_id = ? AND partition = ?"
)
_FIND = (
    "SELECT f.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset"
    " FROM batches b JOIN files f ON f.file_id = b.file_id"
    " WHERE b.topic_id = ? AND b.partition = ? AND b.last_offset >= ?"
    " ORDER BY b.last_offset LIMIT ?"
)
_DELETE_BELOW = (
    "DELETE FROM batches WHERE topic_id = ? AND partition = ? AND last_offset < ?"
    " RETURNING file_id, byte_size"
)
_DELETE_ABORTED_BELOW = (
    "DELETE FROM aborted_txns WHERE topic_id = ? AND partition = ? AND last_offset < ?"
)
_MARK_IF_EMPTY = (
    "UPDATE files SET state = 'deleting', marked_at = ?"
    " WHERE file_id = ? AND state = 'uploaded'"
    " AND NOT EXISTS (SELECT 1 FROM batches WHERE batches.file_id = files.file_id)"
)
_MAX_TIMESTAMP = (
    f"SELECT last_offset, {_TS} AS ts FROM batches"
    " WHERE topic_id = ? AND partition = ? ORDER BY ts DESC, last_offset ASC LIMIT 1"
)
_BY_TIMESTAMP = (
    f"SELECT base_offset, {_TS} AS ts FROM batches"
    f" WHERE topic_id = ? AND partition = ? AND {_TS} >= ? ORDER BY last_offset LIMIT 1"
)
_RETENTION_SCAN = (
    f"SELECT base_offset, byte_size, {_TS} FROM batches"
    " WHERE topic_id = ? AND partition = ? ORDER BY last_offset"
)

_Log = tuple[int, int, int]  # log_start_offset, high_watermark, byte_size


def _mark_files_if_empty(cur: sqlite3.Cursor, file_ids: set[int], now_ms: int) -> None:
    if file_ids:
        cur.executemany(_MARK_IF_EMPTY, [(now_ms, fid) for fid in file_ids])


# --------------------------------------------------------------------------- coordinator


class SqliteCoordinator(SqliteUser, SqliteTransactions, BatchCoordinator):
    """BatchCoordinator on one SQLite file (the embedded, single-node default); its
    TransactionStore half is storage/transactions/sqlite.py."""

    def __init__(self, path: str, max_batches_per_partition: int = 5000) -> None:
        super().__init__(path, "coordinator", MIGRATIONS, "sluice-coordinator")
        self._path = path
        # A safety bound on one partition's share of a fetch answer: with tiny batches a
        # large max_bytes could otherwise list hundreds of thousands of locations. The
        # consumer simply fetches again from where the answer ended.
        self._max_batches = max_batches_per_partition

    @property
    def path(self) -> str:
        """The database file (the group store and the jobs open the same one)."""
        return self._path

    # ---------------------------------------------------------------- logs

    async def create_logs(self, logs: Sequence[PartitionKey]) -> None:
        rows = [(k.topic_id.bytes, k.partition) for k in logs]
        await self._write(_create_logs, rows)

    async def seed_log(
        self, key: PartitionKey, start: int, producers: Sequence[SeededProducerBatch]
    ) -> tuple[int, int]:
        return await self._write(_seed_log, key.topic_id.bytes, key.partition, start, producers)

    async def seal_log(self, key: PartitionKey) -> SealedLog:
        return await self._write(_seal_log, key.topic_id.bytes, key.partition)

    async def delete_logs(self, topic_ids: Sequence[UUID], now_ms: int) -> None:
        await self._write(_delete_logs, [t.bytes for t in topic_ids], now_ms)

    async def log_info(self, logs: Sequence[PartitionKey]) -> list[LogInfo]:
        return await self._read(_log_info, logs)

    # ---------------------------------------------------------------- produce / fetch

    async def commit_file(
        self,
        object_key: str,
        object_size: int,
        uploader_broker_id: int,
        batches: Sequence[BatchToCommit],
        now_ms: int,
    ) -> list[CommitResult]:
        return await self._write(
            commit_file_txn, object_key, object_size, uploader_broker_id, batches, now_ms
        )

    async def commit_outcome(
        self, object_key: str, batches: Sequence[BatchToCommit]
    ) -> list[CommitResult] | None:
        # One writer at a time (a read after every commit that started has ended).
        return await self._read(commit_outcome_txn, object_key, batches)

    async def find_batches(
        self, requests: Sequence[FindRequest], max_total_bytes: int, read_committed: bool = False
    ) -> list[FindResult]:
        return await self._read(
            _find_batches, requests, max_total_bytes, self._max_batches, read_committed
        )

    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest], read_committed: bool = False
    ) -> list[ListOffsetsResult]:
        return await self._read(_list_offsets, requests, read_committed)

    # ---------------------------------------------------------------- deletion

    async def delete_records(
        self, requests: Sequence[tuple[PartitionKey, int]], now_ms: int
    ) -> list[DeleteRecordsResult]:
        return await self._write(_delete_records, requests, now_ms)

    async def enforce_retention(
        self, policies: Sequence[RetentionPolicy], now_ms: int
    ) -> list[LogInfo]:
        return await self._write(_enforce_retention, policies, now_ms)

    async def files_to_delete(self, marked_before_ms: int, limit: int) -> list[FileToDelete]:
        return await self._read(_files_to_delete, marked_before_ms, limit)

    async def unknown_objects(self, object_keys: Sequence[str]) -> list[str]:
        return await self._read(_unknown_objects, list(object_keys))

    async def forget_files(self, object_keys: Sequence[str]) -> None:
        await self._write(_forget_files, [(k,) for k in object_keys])

    async def allocate_producer_ids(self, count: int) -> int:
        return await self._write(_allocate_producer_ids, count)

    # ---------------------------------------------------------------- cluster

    async def cluster_id(self, proposed: str) -> str:
        return await self._write(_cluster_id, proposed)

    async def broker_heartbeat(
        self, me: BrokerRegistration, session_timeout_ms: int, starting: bool
    ) -> list[BrokerRegistration]:
        now = int(time.time() * 1000)
        return await self._write(_broker_heartbeat, me, now, now - session_timeout_ms, starting)

    async def broker_leave(self, me: BrokerRegistration) -> None:
        await self._write(_broker_leave, me.node_id, me.incarnation.bytes)

    # ---------------------------------------------------------------- background jobs

    async def list_batches(self, requests: Sequence[ListBatchesRequest]) -> list[BatchListing]:
        return await self._read(_list_batches, requests)

    async def replace_batches(
        self,
        object_key: str,
        object_size: int,
        replacements: Sequence[BatchReplacement],
        now_ms: int,
    ) -> list[int]:
        return await self._write(_replace_batches, object_key, object_size, replacements, now_ms)


# The transaction bodies below run on the worker thread, inside run_transaction.


def _create_logs(cur: sqlite3.Cursor, rows: list[tuple[bytes, int]]) -> None:
    cur.executemany("INSERT OR IGNORE INTO logs (topic_id, partition) VALUES (?, ?)", rows)


def _seed_log(
    cur: sqlite3.Cursor,
    tid: bytes,
    partition: int,
    start: int,
    producers: Sequence[SeededProducerBatch],
) -> tuple[int, int]:
    cur.execute("INSERT OR IGNORE INTO logs (topic_id, partition) VALUES (?, ?)", (tid, partition))
    row = cur.execute(SELECT_LOG, (tid, partition)).fetchone()
    if row[0] < row[1] <= start:
        # Transaction markers of the classic partition, written before sqlite schema 8
        # (a transaction's outcome was recorded for each of its partitions here too):
        # none of its records, dropped.
        key = PartitionKey(UUID(bytes=tid), partition)
        _delete_records(cur, [(key, row[1])], int(time.time() * 1000))
        row = cur.execute(SELECT_LOG, (tid, partition)).fetchone()
    has_batches = cur.execute(
        "SELECT 1 FROM batches WHERE topic_id = ? AND partition = ? LIMIT 1", (tid, partition)
    ).fetchone()
    if row[0] != row[1] or has_batches:
        return row[0], row[1]
    cur.execute(
        "UPDATE logs SET log_start_offset = ?, high_watermark = ? WHERE topic_id = ?"
        " AND partition = ?",
        (start, start, tid, partition),
    )
    cur.execute("DELETE FROM producer_state WHERE topic_id = ? AND partition = ?", (tid, partition))
    cur.executemany(
        INSERT_PRODUCER,
        [
            (
                tid,
                partition,
                b.producer_id,
                b.base_offset,
                b.producer_epoch,
                b.base_sequence,
                b.last_sequence,
                b.last_offset,
                -1,
            )
            for b in producers
        ],
    )
    return start, start


def _seal_log(cur: sqlite3.Cursor, tid: bytes, partition: int) -> SealedLog:
    row = cur.execute(SELECT_LOG, (tid, partition)).fetchone()
    if row is None:
        return SealedLog(UNKNOWN_TOPIC_OR_PARTITION)
    sealed = cur.execute(
        "SELECT boundary FROM sealed_logs WHERE topic_id = ? AND partition = ?", (tid, partition)
    ).fetchone()
    if sealed is None:
        if cur.execute(
            "SELECT 1 FROM open_txns WHERE topic_id = ? AND partition = ? LIMIT 1", (tid, partition)
        ).fetchone():
            return SealedLog(CONCURRENT_TRANSACTIONS)
        cur.execute(
            "INSERT INTO sealed_logs (topic_id, partition, boundary) VALUES (?, ?, ?)",
            (tid, partition, row[1]),
        )
    producers = [
        SeededProducerBatch(r[0], r[1], r[2], r[3], r[4], r[5])
        for r in cur.execute(
            "SELECT producer_id, producer_epoch, base_sequence, last_sequence, base_offset,"
            " last_offset FROM producer_state WHERE topic_id = ? AND partition = ?"
            " ORDER BY producer_id, base_offset",
            (tid, partition),
        )
    ]
    boundary = row[1] if sealed is None else sealed[0]
    return SealedLog(NONE, row[0], boundary, row[2], producers)


def _delete_logs(cur: sqlite3.Cursor, topic_ids: list[bytes], now_ms: int) -> None:
    file_ids: set[int] = set()
    for tid in topic_ids:
        rows = cur.execute("DELETE FROM batches WHERE topic_id = ? RETURNING file_id", (tid,))
        file_ids.update(r[0] for r in rows)
    params = [(tid,) for tid in topic_ids]
    cur.executemany("DELETE FROM logs WHERE topic_id = ?", params)
    cur.executemany("DELETE FROM producer_state WHERE topic_id = ?", params)
    cur.executemany("DELETE FROM open_txns WHERE topic_id = ?", params)
    cur.executemany("DELETE FROM aborted_txns WHERE topic_id = ?", params)
    cur.executemany("DELETE FROM sealed_logs WHERE topic_id = ?", params)
    _mark_files_if_empty(cur, file_ids, now_ms)


def _log_info(cur: sqlite3.Cursor, logs: Sequence[PartitionKey]) -> list[LogInfo]:
    out = []
    for k in logs:
        row = cur.execute(SELECT_LOG, (k.topic_id.bytes, k.partition)).fetchone()
        if row is None:
            out.append(LogInfo(UNKNOWN_TOPIC_OR_PARTITION))
        else:
            out.append(LogInfo(NONE, row[0], row[1], row[2]))
    return out


# A fetch's logs, a topic at a time: start, high watermark and the open transactions'
# first offset (last_stable_offset's) of the partitions in a range, in one statement.
# A consumer's fetch names up to thousands of partitions, nearly all with nothing new:
# two point queries for each cost more than everything else the answer takes.
_LOGS_IN_RANGE = (
    "SELECT l.partition, l.log_start_offset, l.high_watermark,"
    " (SELECT min(o.first_offset) FROM open_txns o"
    "  WHERE o.topic_id = l.topic_id AND o.partition = l.partition)"
    " FROM logs l WHERE l.topic_id = ? AND l.partition BETWEEN ? AND ?"
)
# A topic's partitions read by range from this many asked, when the range holds at most
# _RANGE_SPREAD times as many partitions (else point queries: a few partitions of a
# large topic).
_RANGE_MIN = 8
_RANGE_SPREAD = 4

_FoundLog = tuple[int, int, int]  # log_start_offset, high_watermark, last_stable_offset


def _logs_of(
    cur: sqlite3.Cursor, requests: Sequence[FindRequest]
) -> dict[UUID, tuple[bytes, dict[int, _FoundLog]]]:
    """Per asked topic: its id as stored, and each existing asked log (absent: unknown)."""
    asked: dict[UUID, set[int]] = {}
    for req in requests:
        parts = asked.get(req.topic_id)
        if parts is None:
            parts = asked[req.topic_id] = set()
        parts.add(req.partition)
    out: dict[UUID, tuple[bytes, dict[int, _FoundLog]]] = {}
    for topic_id, parts in asked.items():
        tid = topic_id.bytes
        logs: dict[int, _FoundLog] = {}
        out[topic_id] = (tid, logs)
        low, high = min(parts), max(parts)
        if len(parts) >= _RANGE_MIN and high - low < _RANGE_SPREAD * len(parts):
            for p, start, hwm, first in cur.execute(_LOGS_IN_RANGE, (tid, low, high)):
                # As last_stable_offset: the first open transaction's offset, else the HWM.
                logs[p] = (start, hwm, hwm if first is None else max(first, start))
            continue
        for p in parts:
            row = cur.execute(SELECT_LOG, (tid, p)).fetchone()
            if row is not None:
                start, hwm = row[0], row[1]
                logs[p] = (start, hwm, last_stable_offset(cur, tid, p, start, hwm))
    return out


def _find_batches(
    cur: sqlite3.Cursor,
    requests: Sequence[FindRequest],
    max_total_bytes: int,
    max_batches: int,
    read_committed: bool,
) -> list[FindResult]:
    out: list[FindResult] = []
    total = 0
    answer_empty = True  # Kafka's minOneMessage: the answer's first batch always goes
    topics = _logs_of(cur, requests)
    topic_id: UUID | None = None
    tid, logs = b"", {}
    for req in requests:
        if req.topic_id is not topic_id:
            # (A request's partitions come a topic at a time: one lookup per topic.)
            topic_id = req.topic_id
            tid, logs = topics[topic_id]
        log = logs.get(req.partition)
        aborted: list[AbortedTransaction] | None = [] if read_committed else None
        if log is None:
            out.append(FindResult(UNKNOWN_TOPIC_OR_PARTITION, aborted=aborted))
            continue
        start, hwm, lso = log
        if req.offset < start or req.offset > hwm:
            out.append(FindResult(OFFSET_OUT_OF_RANGE, start, hwm, [], lso, aborted))
            continue
        # read_committed consumers see only what is below the last stable offset.
        end = lso if read_committed else hwm
        if req.offset >= end or (total >= max_total_bytes and not answer_empty):
            out.append(FindResult(NONE, start, hwm, [], lso, aborted))
            continue
        found: list[BatchLocation] = []
        part = 0
        # Like Kafka's ReplicaManager, each partition may use what is left of the total
        # budget, so a later partition can still take batches smaller than the one
        # that did not fit.
        for key, byte_offset, size, base, last in cur.execute(
            _FIND, (tid, req.partition, req.offset, max_batches)
        ):
            if last >= end or (
                not answer_empty and (part + size > req.max_bytes or total + size > max_total_bytes)
            ):
                break
            found.append(BatchLocation(key, byte_offset, size, base, last))
            part += size
            total += size
            answer_empty = False
        if read_committed and found:
            last = found[-1].last_offset
            aborted = aborted_overlapping(cur, tid, req.partition, req.offset, last)
        out.append(FindResult(NONE, start, hwm, found, lso, aborted))
    return out


def _list_offsets(
    cur: sqlite3.Cursor, requests: Sequence[ListOffsetsRequest], read_committed: bool
) -> list[ListOffsetsResult]:
    out: list[ListOffsetsResult] = []
    for req in requests:
        tid = req.topic_id.bytes
        log = cur.execute(SELECT_LOG, (tid, req.partition)).fetchone()
        if log is None:
            out.append(ListOffsetsResult(UNKNOWN_TOPIC_OR_PARTITION))
            continue
        ts = req.timestamp
        if ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
            out.append(ListOffsetsResult(NONE, log[0], -1))
            continue
        # Kafka's "last fetchable offset": what the isolation level lets a consumer read.
        end = log[1]
        if read_committed:
            end = last_stable_offset(cur, tid, req.partition, log[0], log[1])
        if ts == LATEST_TIMESTAMP:
            out.append(ListOffsetsResult(NONE, end, -1))
            continue
        if ts == MAX_TIMESTAMP:
            row = cur.execute(_MAX_TIMESTAMP, (tid, req.partition)).fetchone()
            found = None if row is None else (row[0], row[1])
        else:
            # Other negative values search like a time, as Kafka does for codes it does
            # not know: every batch qualifies, so the first live one is found.
            row = cur.execute(_BY_TIMESTAMP, (tid, req.partition, ts)).fetchone()
            found = None if row is None else (max(row[0], log[0]), row[1])
        # As Kafka, an offset a read_committed consumer could not fetch yet is not found.
        if found is None or found[0] >= end:
            out.append(ListOffsetsResult(NONE))
        else:
            out.append(ListOffsetsResult(NONE, *found))
    return out


def _move_log_start(
    cur: sqlite3.Cursor, tid: bytes, partition: int, new_start: int, file_ids: set[int]
) -> int:
    """Set the log start and drop batches wholly below it; returns bytes freed."""
    freed = 0
    for file_id, size in cur.execute(_DELETE_BELOW, (tid, partition, new_start)).fetchall():
        file_ids.add(file_id)
        freed += size
    cur.execute(_UPDATE_LOG_START, (new_start, freed, tid, partition))
    # Aborted transactions wholly below the log start can no longer overlap a fetch.
    cur.execute(_DELETE_ABORTED_BELOW, (tid, partition, new_start))
    return freed


def _delete_records(
    cur: sqlite3.Cursor, requests: Sequence[tuple[PartitionKey, int]], now_ms: int
) -> list[DeleteRecordsResult]:
    out: list[DeleteRecordsResult] = []
    file_ids: set[int] = set()
    for key, offset in requests:
        tid = key.topic_id.bytes
        log = cur.execute(SELECT_LOG, (tid, key.partition)).fetchone()
        if log is None:
            out.append(DeleteRecordsResult(UNKNOWN_TOPIC_OR_PARTITION))
            continue
        start, hwm, _size = log
        target = hwm if offset == -1 else offset
        if target < 0 or target > hwm:
            out.append(DeleteRecordsResult(OFFSET_OUT_OF_RANGE))  # Kafka: low watermark -1
            continue
        if target <= start:
            out.append(DeleteRecordsResult(NONE, start))
            continue
        _move_log_start(cur, tid, key.partition, target, file_ids)
        out.append(DeleteRecordsResult(NONE, target))
    _mark_files_if_empty(cur, file_ids, now_ms)
    return out


def _enforce_retention(
    cur: sqlite3.Cursor, policies: Sequence[RetentionPolicy], now_ms: int
) -> list[LogInfo]:
    out: list[LogInfo] = []
    file_ids: set[int] = set()
    for policy in policies:
        tid = policy.topic_id.bytes
        log = cur.execute(SELECT_LOG, (tid, policy.partition)).fetchone()
        if log is None:
            out.append(LogInfo(UNKNOWN_TOPIC_OR_PARTITION))
            continue
        start, hwm, size = log
        new_start = _retention_start(cur, tid, policy, hwm, size, now_ms)
        if new_start is not None and new_start > start:
            size -= _move_log_start(cur, tid, policy.partition, new_start, file_ids)
            start = new_start
        out.append(LogInfo(NONE, start, hwm, size))
    _mark_files_if_empty(cur, file_ids, now_ms)
    return out


def _retention_start(
    cur: sqlite3.Cursor, tid: bytes, policy: RetentionPolicy, hwm: int, size: int, now_ms: int
) -> int | None:
    """The log start offset after retention, or None when nothing is to be dropped.

    Both rules drop a prefix of whole batches, so the result is the longer prefix:
    walk from the oldest batch while either rule says drop; the first batch both keep
    becomes the new start (the high watermark when every batch went).
    """
    by_bytes = policy.retention_bytes >= 0 and size > policy.retention_bytes
    by_time = policy.retention_ms >= 0
    if not (by_time or by_bytes):
        return None
    cutoff = now_ms - policy.retention_ms
    remaining = size
    dropped = False
    # A cursor of its own: the scan stops early and is closed, the caller's goes on.
    rows = cur.connection.execute(_RETENTION_SCAN, (tid, policy.partition))
    try:
        for base_offset, batch_size, ts in rows:
            # retention.ms only ever drops a prefix: it stops at the first recent batch.
            by_time = by_time and ts < cutoff
            # Kafka: drop the oldest while size - segment size >= retention.bytes.
            by_bytes = by_bytes and remaining - batch_size >= policy.retention_bytes
            if not (by_time or by_bytes):
                return base_offset if dropped else None
            remaining -= batch_size
            dropped = True
    finally:
        rows.close()
    return hwm if dropped else None


def _files_to_delete(cur: sqlite3.Cursor, marked_before_ms: int, limit: int) -> list[FileToDelete]:
    rows = cur.execute(
        "SELECT object_key, marked_at FROM files WHERE state = 'deleting' AND marked_at < ?"
        " ORDER BY marked_at, file_id LIMIT ?",
        (marked_before_ms, limit),
    )
    return [FileToDelete(key, marked) for key, marked in rows]


def _forget_files(cur: sqlite3.Cursor, keys: list[tuple[str]]) -> None:
    # Only deleting files: forgetting a file that still holds live batches would leave
    # batches pointing nowhere.
    cur.executemany("DELETE FROM files WHERE object_key = ? AND state = 'deleting'", keys)


def _allocate_producer_ids(cur: sqlite3.Cursor, count: int) -> int:
    (first,) = cur.execute(
        "UPDATE producer_id_blocks SET next_id = next_id + ? WHERE id = 1 RETURNING next_id - ?",
        (count, count),
    ).fetchone()
    return int(first)


def _cluster_id(cur: sqlite3.Cursor, proposed: str) -> str:
    cur.execute(
        "INSERT OR IGNORE INTO cluster_meta (key, value) VALUES ('cluster.id', ?)", (proposed,)
    )
    (value,) = cur.execute("SELECT value FROM cluster_meta WHERE key = 'cluster.id'").fetchone()
    return str(value)


def _broker_heartbeat(
    cur: sqlite3.Cursor, me: BrokerRegistration, now: int, live_after: int, starting: bool
) -> list[BrokerRegistration]:
    cur.execute(
        "INSERT INTO broker_heartbeats (node_id, host, port, rack, incarnation, last_seen)"
        " VALUES (?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (node_id) DO UPDATE SET host = excluded.host, port = excluded.port,"
        " rack = excluded.rack, incarnation = excluded.incarnation, last_seen = excluded.last_seen"
        " WHERE NOT ? OR incarnation = excluded.incarnation OR last_seen <= ?",
        (me.node_id, me.host, me.port, me.rack, me.incarnation.bytes, now, starting, live_after),
    )
    rows = cur.execute(
        "SELECT node_id, host, port, rack, incarnation FROM broker_heartbeats"
        " WHERE last_seen > ? ORDER BY node_id",
        (live_after,),
    )
    return [BrokerRegistration(n, h, p, r, UUID(bytes=i)) for n, h, p, r, i in rows]


def _broker_leave(cur: sqlite3.Cursor, node_id: int, incarnation: bytes) -> None:
    cur.execute(
        "DELETE FROM broker_heartbeats WHERE node_id = ? AND incarnation = ?",
        (node_id, incarnation),
    )


def _unknown_objects(cur: sqlite3.Cursor, keys: list[str]) -> list[str]:
    known = set()
    for start in range(0, len(keys), 500):  # SQLite's bound-parameter limit
        chunk = keys[start : start + 500]
        marks = ",".join("?" * len(chunk))
        rows = cur.execute(f"SELECT object_key FROM files WHERE object_key IN ({marks})", chunk)
        known.update(r[0] for r in rows)
    return [k for k in keys if k not in known]


# --------------------------------------------------------------------------- jobs

_LIST_BATCHES = (
    "SELECT f.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset,"
    " b.timestamp_type, b.max_timestamp, b.log_append_time, f.size, f.reason, f.committed_at"
    " FROM batches b JOIN files f ON f.file_id = b.file_id"
    " WHERE b.topic_id = ? AND b.partition = ? AND b.last_offset >= ?"
    " AND (? < 0 OR b.base_offset < ?) ORDER BY b.last_offset"
)
# The batches whose last offset falls in a range (a PRIMARY KEY range scan), and the one
# batch after it, which must not reach back into the range.
_IN_RANGE = (
    "SELECT b.base_offset, b.last_offset, f.object_key, b.file_id, b.byte_size"
    " FROM batches b JOIN files f ON f.file_id = b.file_id"
    " WHERE b.topic_id = ? AND b.partition = ? AND b.last_offset BETWEEN ? AND ?"
    " ORDER BY b.last_offset"
)
_NEXT_BASE = (
    "SELECT base_offset FROM batches WHERE topic_id = ? AND partition = ? AND last_offset > ?"
    " ORDER BY last_offset LIMIT 1"
)
_DELETE_BATCH = "DELETE FROM batches WHERE topic_id = ? AND partition = ? AND last_offset = ?"
_UPDATE_LOG_SIZE = "UPDATE logs SET byte_size = byte_size + ? WHERE topic_id = ? AND partition = ?"


def _list_batches(
    cur: sqlite3.Cursor, requests: Sequence[ListBatchesRequest]
) -> list[BatchListing]:
    # One deferred read transaction: every request sees the same snapshot.
    out: list[BatchListing] = []
    for req in requests:
        tid = req.topic_id.bytes
        log = cur.execute(SELECT_LOG, (tid, req.partition)).fetchone()
        if log is None:
            out.append(BatchListing(UNKNOWN_TOPIC_OR_PARTITION))
            continue
        rows = cur.execute(
            _LIST_BATCHES, (tid, req.partition, req.start_offset, req.end_offset, req.end_offset)
        )
        out.append(BatchListing(NONE, log[0], log[1], [StoredBatch(*r) for r in rows]))
    return out


def _replace_batches(
    cur: sqlite3.Cursor,
    object_key: str,
    object_size: int,
    replacements: Sequence[BatchReplacement],
    now_ms: int,
) -> list[int]:
    if cur.execute("SELECT 1 FROM files WHERE object_key = ?", (object_key,)).fetchone():
        # A retry of a call that may have committed: never register the key twice.
        return [REPLACE_CONFLICT] * len(replacements)
    cur.execute(
        "INSERT INTO files (object_key, size, uploader_broker_id, committed_at, state, reason)"
        " VALUES (?, ?, -1, ?, 'uploaded', 'merge')",
        (object_key, object_size, now_ms),
    )
    file_id = cur.lastrowid
    emptied: set[int] = set()
    results: list[int] = []
    holds_batches = False
    for r in replacements:
        if not r.is_valid():
            results.append(INVALID_REQUEST)
            continue
        tid = r.topic_id.bytes
        if cur.execute(SELECT_LOG, (tid, r.partition)).fetchone() is None:
            results.append(UNKNOWN_TOPIC_OR_PARTITION)
            continue
        first, last = r.old[0].base_offset, r.old[-1].last_offset
        found = cur.execute(_IN_RANGE, (tid, r.partition, first, last)).fetchall()
        after = cur.execute(_NEXT_BASE, (tid, r.partition, last)).fetchone()
        expected = [(b.base_offset, b.last_offset, b.object_key) for b in r.old]
        if [f[:3] for f in found] != expected or (after is not None and after[0] <= last):
            results.append(REPLACE_CONFLICT)
            continue
        cur.executemany(_DELETE_BATCH, [(tid, r.partition, f[1]) for f in found])
        emptied.update(f[3] for f in found)
        cur.executemany(
            INSERT_BATCH,
            [
                (
                    tid,
                    r.partition,
                    n.base_offset,
                    n.last_offset,
                    file_id,
                    n.byte_offset,
                    n.byte_size,
                    n.timestamp_type,
                    n.max_timestamp,
                    n.log_append_time,
                )
                for n in r.new
            ],
        )
        delta = sum(n.byte_size for n in r.new) - sum(f[4] for f in found)
        if delta:
            cur.execute(_UPDATE_LOG_SIZE, (delta, tid, r.partition))
        holds_batches = holds_batches or bool(r.new)
        results.append(NONE)
    _mark_files_if_empty(cur, emptied, now_ms)
    if not holds_batches:
        # Nothing points into the object: the cleaner may delete it after the grace period.
        cur.execute(
            "UPDATE files SET state = 'deleting', marked_at = ? WHERE file_id = ?",
            (now_ms, file_id),
        )
    return results
