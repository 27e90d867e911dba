"""Batch coordinator on PostgreSQL (production; the reference backend).

Every method is ONE round trip: one statement, or one call of a PL/pgSQL function of
storage/postgres/functions/ that takes the whole request as arrays and
loops next to the data. Several brokers share one database; the functions lock
partition rows in one global order so their concurrent commits never deadlock.
Semantics are the SQLite backend's, held to by the shared contract suite.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode

from storage.coordinator import (
    EARLIEST_LOCAL_TIMESTAMP,
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    BatchCoordinator,
    BatchListing,
    BatchLocation,
    BatchReplacement,
    BatchToCommit,
    BrokerRegistration,
    CommitResult,
    CoordinatorUnavailable,
    DeleteRecordsResult,
    FileToDelete,
    FindRequest,
    FindResult,
    ListBatchesRequest,
    ListOffsetsRequest,
    ListOffsetsResult,
    LogInfo,
    LogsChanged,
    RetentionPolicy,
    SealedLog,
    SeededProducerBatch,
    StoredBatch,
)
from storage.partition_key import PartitionKey
from storage.postgres.notify import LOGS_CHANNEL, LogsNotifier, decode_payload
from storage.postgres.pool import PoolUser, PostgresPool
from storage.transactions import AbortedTransaction
from storage.transactions.postgres import PostgresTransactions

NONE = int(ErrorCode.none)
UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.unknown_topic_or_partition)
CONCURRENT_TRANSACTIONS = int(ErrorCode.concurrent_transactions)

_COMMIT = (
    "SELECT * FROM sluice_commit_file("
    "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
)
_FIND = "SELECT * FROM sluice_find_batches($1, $2, $3, $4, $5, $6, $7)"
_COMMIT_OUTCOME = "SELECT * FROM sluice_commit_outcome($1, $2, $3, $4, $5, $6, $7, $8)"
_CREATE_LOGS = (
    "INSERT INTO logs (topic_id, partition)"
    " SELECT DISTINCT k.topic_id, k.part"
    " FROM unnest($1::uuid[], $2::integer[]) AS k(topic_id, part)"
    # Sorted: two brokers creating overlapping logs wait on each other in one order.
    " ORDER BY 1, 2"
    " ON CONFLICT DO NOTHING"
)
# With the seals of migrations to classic (0010), in the same statement.
_DELETE_LOGS = (
    "WITH seals AS (DELETE FROM sealed_logs WHERE topic_id = ANY($1::uuid[]))"
    " SELECT sluice_delete_logs($1, $2)"
)


def _now_ms() -> int:
    return int(time.time() * 1000)


# One statement: the log row is locked (a concurrent commit waits), moved only while empty;
# the producer rows of an earlier seed that this one does not repeat go, the new ones are
# added (a row of the same batch is the same row: kept).
_SEED_LOG = (
    "WITH target AS ("
    "  SELECT l.topic_id, l.partition FROM logs l"
    "  WHERE l.topic_id = $1 AND l.partition = $2 AND l.high_watermark = l.log_start_offset"
    "    AND NOT EXISTS (SELECT 1 FROM batches b WHERE b.topic_id = $1 AND b.partition = $2)"
    "  FOR UPDATE),"
    " seed AS ("
    "  SELECT * FROM unnest($4::bigint[], $5::bigint[], $6::integer[], $7::bigint[],"
    "    $8::bigint[], $9::bigint[]) AS s(pid, base, epoch, fseq, lseq, last)),"
    " moved AS ("
    "  UPDATE logs l SET log_start_offset = $3, high_watermark = $3 FROM target t"
    "  WHERE l.topic_id = t.topic_id AND l.partition = t.partition"
    "  RETURNING l.log_start_offset, l.high_watermark),"
    " cleared AS ("
    "  DELETE FROM producer_state p USING target t"
    "  WHERE p.topic_id = t.topic_id AND p.partition = t.partition"
    "    AND (p.producer_id, p.base_offset) NOT IN (SELECT pid, base FROM seed)),"
    " added AS ("
    "  INSERT INTO producer_state (topic_id, partition, producer_id, base_offset,"
    "    producer_epoch, base_sequence, last_sequence, last_offset, log_append_time)"
    "  SELECT $1, $2, pid, base, epoch, fseq, lseq, last, -1 FROM seed"
    "  WHERE EXISTS (SELECT 1 FROM target) ON CONFLICT DO NOTHING)"
    " SELECT log_start_offset, high_watermark FROM moved"
    " UNION ALL"
    " SELECT log_start_offset, high_watermark FROM logs"
    " WHERE topic_id = $1 AND partition = $2 AND NOT EXISTS (SELECT 1 FROM target)"
)
# One statement: the log row is locked (commits of the partition wait for it), the seal
# recorded at the high watermark unless a transaction is open (boundary NULL then) or it
# already is; the producer rows come along (one output row each, or one without).
_SEAL_LOG = (
    "WITH log AS ("
    "  SELECT log_start_offset, high_watermark, byte_size FROM logs"
    "  WHERE topic_id = $1 AND partition = $2 FOR UPDATE),"
    " old AS (SELECT boundary FROM sealed_logs WHERE topic_id = $1 AND partition = $2),"
    " busy AS (SELECT 1 FROM open_txns WHERE topic_id = $1 AND partition = $2 LIMIT 1),"
    " new AS ("
    "  INSERT INTO sealed_logs (topic_id, partition, boundary)"
    "  SELECT $1, $2, high_watermark FROM log"
    "  WHERE NOT EXISTS (SELECT 1 FROM old) AND NOT EXISTS (SELECT 1 FROM busy)"
    "  RETURNING boundary)"
    " SELECT l.log_start_offset, l.byte_size,"
    "  COALESCE((SELECT boundary FROM old), (SELECT boundary FROM new)) AS boundary,"
    "  p.producer_id, p.producer_epoch, p.base_sequence, p.last_sequence, p.base_offset,"
    "  p.last_offset"
    " FROM log l LEFT JOIN producer_state p ON p.topic_id = $1 AND p.partition = $2"
    " ORDER BY p.producer_id, p.base_offset"
)
_PRODUCER_COLUMNS = (
    "producer_id",
    "producer_epoch",
    "base_sequence",
    "last_sequence",
    "base_offset",
    "last_offset",
)
_LOG_INFO = (
    "SELECT l.log_start_offset, l.high_watermark, l.byte_size"
    " FROM unnest($1::uuid[], $2::integer[]) WITH ORDINALITY AS k(topic_id, part, i)"
    " LEFT JOIN logs l ON l.topic_id = k.topic_id AND l.partition = k.part"
    " ORDER BY k.i"
)
_TS = "CASE WHEN b.timestamp_type = 1 THEN b.log_append_time ELSE b.max_timestamp END"
# The lateral lookups are gated by the request's kind (and the open transactions by
# read_committed), so each request costs only the index scans it needs. One statement:
# one snapshot for all partitions.
_LIST_OFFSETS = (
    "SELECT l.log_start_offset, l.high_watermark, m.last_offset, m.ts, t.base_offset, t.ts,"
    " o.first_open"
    " FROM unnest($1::uuid[], $2::integer[], $3::bigint[])"
    "  WITH ORDINALITY AS k(topic_id, part, ts, i)"
    " LEFT JOIN logs l ON l.topic_id = k.topic_id AND l.partition = k.part"
    " LEFT JOIN LATERAL ("
    f"  SELECT b.last_offset, {_TS} AS ts FROM batches b"
    f"  WHERE k.ts = {MAX_TIMESTAMP} AND b.topic_id = k.topic_id AND b.partition = k.part"
    "   ORDER BY ts DESC, b.last_offset LIMIT 1) m ON true"
    " LEFT JOIN LATERAL ("
    f"  SELECT b.base_offset, {_TS} AS ts FROM batches b"
    f"  WHERE k.ts NOT IN ({LATEST_TIMESTAMP}, {EARLIEST_TIMESTAMP}, {MAX_TIMESTAMP},"
    f"   {EARLIEST_LOCAL_TIMESTAMP})"
    f"   AND b.topic_id = k.topic_id AND b.partition = k.part AND {_TS} >= k.ts"
    "   ORDER BY b.last_offset LIMIT 1) t ON true"
    " LEFT JOIN LATERAL ("
    "  SELECT min(x.first_offset) AS first_open FROM open_txns x"
    f"  WHERE $4::boolean AND k.ts NOT IN ({EARLIEST_TIMESTAMP}, {EARLIEST_LOCAL_TIMESTAMP})"
    "   AND x.topic_id = k.topic_id AND x.partition = k.part) o ON true"
    " ORDER BY k.i"
)
_DELETE_RECORDS = "SELECT * FROM sluice_delete_records($1, $2, $3, $4)"
_ENFORCE_RETENTION = "SELECT * FROM sluice_enforce_retention($1, $2, $3, $4, $5)"
_FILES_TO_DELETE = (
    "SELECT object_key, marked_at FROM files WHERE state = 'deleting' AND marked_at < $1"
    " ORDER BY marked_at, file_id LIMIT $2"
)
# Only deleting files: forgetting a file that still holds live batches would leave
# batches pointing nowhere. Rows are locked in file_id order, like everywhere else.
_FORGET_FILES = (
    "DELETE FROM files WHERE file_id IN ("
    " SELECT file_id FROM files WHERE object_key = ANY($1::text[]) AND state = 'deleting'"
    " ORDER BY file_id FOR UPDATE)"
)
_ALLOCATE_PRODUCER_IDS = (
    "UPDATE producer_id_blocks SET next_id = next_id + $1 WHERE id = 1 RETURNING next_id - $1"
)


_UNKNOWN_OBJECTS = (
    "SELECT k FROM unnest($1::text[]) AS k"
    " WHERE NOT EXISTS (SELECT 1 FROM files f WHERE f.object_key = k)"
)
_CLUSTER_ID = "SELECT sluice_cluster_id($1)"
_HEARTBEAT = "SELECT * FROM sluice_broker_heartbeat($1, $2, $3, $4, $5, $6, $7)"
_LEAVE = "DELETE FROM broker_heartbeats WHERE node_id = $1 AND incarnation = $2"
# One statement, so one snapshot for every log asked about. The lateral join gives a log
# without batches one row of NULLs, so its high watermark still comes back.
_LIST_BATCHES = (
    "SELECT k.i, l.log_start_offset, l.high_watermark, x.object_key, x.byte_offset,"
    " x.byte_size, x.base_offset, x.last_offset, x.timestamp_type, x.max_timestamp,"
    " x.log_append_time, x.size, x.reason, x.committed_at"
    " FROM unnest($1::uuid[], $2::integer[], $3::bigint[], $4::bigint[])"
    "  WITH ORDINALITY AS k(topic_id, part, start_offset, end_offset, i)"
    " LEFT JOIN logs l ON l.topic_id = k.topic_id AND l.partition = k.part"
    " LEFT JOIN LATERAL ("
    "  SELECT f.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset,"
    "   b.timestamp_type, b.max_timestamp, b.log_append_time, f.size, f.reason, f.committed_at"
    "  FROM batches b JOIN files f ON f.file_id = b.file_id"
    "  WHERE l.high_watermark IS NOT NULL"
    "   AND b.topic_id = k.topic_id AND b.partition = k.part AND b.last_offset >= k.start_offset"
    "   AND (k.end_offset < 0 OR b.base_offset < k.end_offset)) x ON true"
    " ORDER BY k.i, x.last_offset"
)
_REPLACE = (
    "SELECT * FROM sluice_replace_batches("
    "$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16, $17, $18)"
)


def _keys(logs: Sequence[PartitionKey]) -> tuple[list[UUID], list[int]]:
    return [k.topic_id for k in logs], [k.partition for k in logs]


class PostgresCoordinator(PoolUser, PostgresTransactions, BatchCoordinator):
    """BatchCoordinator on PostgreSQL via asyncpg; its TransactionStore half is
    storage/transactions/postgres.py.

    ``dsn`` is a postgresql:// URL (the coordinator makes its own pool; the pool
    options apply) or a :class:`PostgresPool` shared with e.g. the catalog (its own
    options apply). ``start()`` applies pending schema migrations.

    Every call that moves a log's high watermark or start (commit_file, txn_complete,
    delete_records, enforce_retention, seed_log) hands the logs it changed to this
    process's :class:`~storage.postgres.notify.LogsNotifier` once its transaction has
    committed, which wakes the other brokers' long polls (``watch_logs``);
    ``notify_interval_ms`` is its coalescing interval, None for no notifications at all.
    """

    def __init__(
        self,
        dsn: str | PostgresPool,
        *,
        min_pool: int = 1,
        max_pool: int = 10,
        command_timeout: float = 15.0,
        connect_timeout: float = 5.0,
        max_batches_per_partition: int = 5000,
        notify_interval_ms: float | None = 5.0,
    ) -> None:
        super().__init__(
            dsn,
            min_size=min_pool,
            max_size=max_pool,
            command_timeout=command_timeout,
            connect_timeout=connect_timeout,
        )
        # A safety bound on one partition's share of a fetch answer, as in SQLite.
        self._max_batches = max_batches_per_partition
        self.notifier: LogsNotifier | None = None
        if notify_interval_ms is not None:
            self.notifier = LogsNotifier(
                self._pool.dsn,
                interval_s=notify_interval_ms / 1000,
                connect_timeout=self._pool.connect_timeout,
                command_timeout=self._pool.command_timeout,
            )

    async def close(self) -> None:
        if self.notifier is not None:
            await self.notifier.close()
        await super().close()

    def _logs_changed(self, keys: Iterable[PartitionKey]) -> None:
        if self.notifier is not None:
            self.notifier.changed(keys)

    async def _write_logs(
        self, maybe_changed: Sequence[PartitionKey], sql: str, *args: Any
    ) -> list[Any]:
        """One write that may move these logs. If its outcome is unknown (the connection
        died after it was sent) it may have committed, and the trigger before 0018 notified
        such a commit: so notify them all; a wake-up for nothing only costs a look."""
        try:
            return await self._pool.fetch(sql, *args, write=True)
        except CoordinatorUnavailable as exc:
            if exc.outcome_unknown:
                self._logs_changed(maybe_changed)
            raise

    @property
    def pool(self) -> PostgresPool:
        return self._pool

    # ---------------------------------------------------------------- logs

    async def create_logs(self, logs: Sequence[PartitionKey]) -> None:
        await self._pool.fetch(_CREATE_LOGS, *_keys(logs), write=True)

    async def seed_log(
        self, key: PartitionKey, start: int, producers: Sequence[SeededProducerBatch]
    ) -> tuple[int, int]:
        await self._pool.fetch(_CREATE_LOGS, [key.topic_id], [key.partition], write=True)
        (info,) = await self.log_info([key])
        if info.error == NONE and info.log_start_offset < info.high_watermark <= start:
            # Transaction markers of the classic partition, written before migration 0011
            # (a transaction's outcome was recorded for each of its partitions here too):
            # none of its records, dropped.
            # Up to that high watermark only: never past what it was.
            await self.delete_records([(key, info.high_watermark)], _now_ms())
        rows = await self._write_logs(
            [key],
            _SEED_LOG,
            key.topic_id,
            key.partition,
            start,
            [b.producer_id for b in producers],
            [b.base_offset for b in producers],
            [b.producer_epoch for b in producers],
            [b.base_sequence for b in producers],
            [b.last_sequence for b in producers],
            [b.last_offset for b in producers],
        )
        assert rows, "the seed answers the log's offsets"
        self._logs_changed([key])
        return int(rows[0][0]), int(rows[0][1])

    async def seal_log(self, key: PartitionKey) -> SealedLog:
        rows = await self._pool.fetch(_SEAL_LOG, key.topic_id, key.partition, write=True)
        if not rows:
            return SealedLog(UNKNOWN_TOPIC_OR_PARTITION)
        first = rows[0]
        if first["boundary"] is None:
            return SealedLog(CONCURRENT_TRANSACTIONS)
        producers = [
            SeededProducerBatch(*(int(r[k]) for k in _PRODUCER_COLUMNS))
            for r in rows
            if r["producer_id"] is not None
        ]
        return SealedLog(
            NONE,
            int(first["log_start_offset"]),
            int(first["boundary"]),
            int(first["byte_size"]),
            producers,
        )

    async def delete_logs(self, topic_ids: Sequence[UUID], now_ms: int) -> None:
        await self._pool.fetch(_DELETE_LOGS, list(topic_ids), now_ms, write=True)

    async def log_info(self, logs: Sequence[PartitionKey]) -> list[LogInfo]:
        rows = await self._pool.fetch(_LOG_INFO, *_keys(logs), write=False)
        return [
            LogInfo(UNKNOWN_TOPIC_OR_PARTITION) if r[1] is None else LogInfo(NONE, r[0], r[1], r[2])
            for r in rows
        ]

    # ---------------------------------------------------------------- produce / fetch

    async def commit_file(
        self,
        object_key: str,
        object_size: int,
        uploader_broker_id: int,
        batches: Sequence[BatchToCommit],
        now_ms: int,
    ) -> list[CommitResult]:
        rows = await self._write_logs(
            [PartitionKey(b.topic_id, b.partition) for b in batches],
            _COMMIT,
            object_key,
            object_size,
            uploader_broker_id,
            now_ms,
            [b.topic_id for b in batches],
            [b.partition for b in batches],
            [b.byte_offset for b in batches],
            [b.byte_size for b in batches],
            [b.record_count for b in batches],
            [b.max_timestamp for b in batches],
            [b.timestamp_type for b in batches],
            [b.producer_id for b in batches],
            [b.producer_epoch for b in batches],
            [b.base_sequence for b in batches],
            [b.transactional for b in batches],
        )
        # A set-returning function's rows come in the order it returned them: input order.
        if len(rows) != len(batches):
            raise RuntimeError(f"sluice_commit_file answered {len(rows)} of {len(batches)}")
        results = [CommitResult(r[1], r[2], r[3], r[4]) for r in rows]
        # Refused batches changed nothing; a duplicate's log did not move either, but telling
        # them apart is not worth it (a retry is rare, the wake-up for nothing cheap).
        self._logs_changed(
            PartitionKey(b.topic_id, b.partition)
            for b, r in zip(batches, results, strict=True)
            if r.error == NONE
        )
        return results

    async def commit_outcome(
        self, object_key: str, batches: Sequence[BatchToCommit]
    ) -> list[CommitResult] | None:
        rows = await self._pool.fetch(
            _COMMIT_OUTCOME,
            object_key,
            [b.topic_id for b in batches],
            [b.partition for b in batches],
            [b.byte_offset for b in batches],
            [b.record_count for b in batches],
            [b.producer_id for b in batches],
            [b.producer_epoch for b in batches],
            [b.base_sequence for b in batches],
            write=False,  # row locks only: nothing is changed
        )
        if not rows:
            return None
        if len(rows) != len(batches):
            raise RuntimeError(f"sluice_commit_outcome answered {len(rows)} of {len(batches)}")
        return [CommitResult(r[1], r[2], r[3], r[4]) for r in rows]

    async def find_batches(
        self, requests: Sequence[FindRequest], max_total_bytes: int, read_committed: bool = False
    ) -> list[FindResult]:
        rows = await self._pool.fetch(
            _FIND,
            [r.topic_id for r in requests],
            [r.partition for r in requests],
            [r.offset for r in requests],
            [r.max_bytes for r in requests],
            max_total_bytes,
            self._max_batches,
            read_committed,
            write=False,
        )
        results: list[FindResult] = []
        # Rows come grouped by request, in request order: a result opens at its
        # request's first row; further rows of the same request add batches, then
        # (read_committed) aborted transactions.
        for i, error, start, hwm, lso, key, byte_offset, size, base, last, apid, afirst in rows:
            if len(results) < i:
                results.append(
                    FindResult(error, start, hwm, [], lso, [] if read_committed else None)
                )
            if key is not None:
                results[-1].batches.append(BatchLocation(key, byte_offset, size, base, last))
            elif apid is not None:
                aborted = results[-1].aborted
                assert aborted is not None
                aborted.append(AbortedTransaction(apid, afirst))
        if len(results) != len(requests):
            raise RuntimeError(f"sluice_find_batches answered {len(results)} of {len(requests)}")
        return results

    async def list_offsets(
        self, requests: Sequence[ListOffsetsRequest], read_committed: bool = False
    ) -> list[ListOffsetsResult]:
        rows = await self._pool.fetch(
            _LIST_OFFSETS,
            [r.topic_id for r in requests],
            [r.partition for r in requests],
            [r.timestamp for r in requests],
            read_committed,
            write=False,
        )
        out: list[ListOffsetsResult] = []
        for req, (start, hwm, max_offset, max_ts, ts_offset, ts_ts, first_open) in zip(
            requests, rows, strict=True
        ):
            ts = req.timestamp
            if hwm is None:
                out.append(ListOffsetsResult(UNKNOWN_TOPIC_OR_PARTITION))
                continue
            if ts in (EARLIEST_TIMESTAMP, EARLIEST_LOCAL_TIMESTAMP):
                out.append(ListOffsetsResult(NONE, start, -1))
                continue
            # Kafka's "last fetchable offset": what the isolation level lets a consumer read.
            end = hwm if first_open is None else max(first_open, start)
            if ts == LATEST_TIMESTAMP:
                out.append(ListOffsetsResult(NONE, end, -1))
                continue
            if ts == MAX_TIMESTAMP:
                found = None if max_offset is None else (max_offset, max_ts)
            else:
                # Other negative values search like a time, as Kafka does for codes it
                # does not know: every batch qualifies, so the first live one is found.
                found = None if ts_offset is None else (max(ts_offset, start), ts_ts)
            # As Kafka, an offset a read_committed consumer could not fetch yet is not found.
            if found is None or found[0] >= end:
                out.append(ListOffsetsResult(NONE))
            else:
                out.append(ListOffsetsResult(NONE, *found))
        return out

    # ---------------------------------------------------------------- deletion

    async def delete_records(
        self, requests: Sequence[tuple[PartitionKey, int]], now_ms: int
    ) -> list[DeleteRecordsResult]:
        rows = await self._write_logs(
            [k for k, _ in requests],
            _DELETE_RECORDS,
            [k.topic_id for k, _ in requests],
            [k.partition for k, _ in requests],
            [offset for _, offset in requests],
            now_ms,
        )
        results = [DeleteRecordsResult(r[1], r[2]) for r in rows]
        # Those already at or past the offset did not move: rare, and a look is cheap.
        self._logs_changed(
            k for (k, _), r in zip(requests, results, strict=True) if r.error == NONE
        )
        return results

    async def enforce_retention(
        self, policies: Sequence[RetentionPolicy], now_ms: int
    ) -> list[LogInfo]:
        # Every diskless log, every round, on every broker: an unknown outcome notifies none
        # of them (all would wake every waiter of the cluster), since a start move gives a
        # waiting fetch nothing to read anyway: it waits at the high watermark, which
        # retention never passes.
        rows = await self._pool.fetch(
            _ENFORCE_RETENTION,
            [p.topic_id for p in policies],
            [p.partition for p in policies],
            [p.retention_ms for p in policies],
            [p.retention_bytes for p in policies],
            now_ms,
            write=True,
        )
        # The logs whose start moved (r_moved), as the trigger notified them before 0018.
        self._logs_changed(
            PartitionKey(p.topic_id, p.partition)
            for p, r in zip(policies, rows, strict=True)
            if r[5]
        )
        return [LogInfo(r[1], r[2], r[3], r[4]) for r in rows]

    async def files_to_delete(self, marked_before_ms: int, limit: int) -> list[FileToDelete]:
        rows = await self._pool.fetch(_FILES_TO_DELETE, marked_before_ms, limit, write=False)
        return [FileToDelete(key, marked) for key, marked in rows]

    async def unknown_objects(self, object_keys: Sequence[str]) -> list[str]:
        rows = await self._pool.fetch(_UNKNOWN_OBJECTS, list(object_keys), write=False)
        return [r[0] for r in rows]

    async def forget_files(self, object_keys: Sequence[str]) -> None:
        await self._pool.fetch(_FORGET_FILES, list(object_keys), write=True)

    async def allocate_producer_ids(self, count: int) -> int:
        row = await self._pool.fetchrow(_ALLOCATE_PRODUCER_IDS, count, write=True)
        assert row is not None, "producer_id_blocks has its row from the first migration"
        return int(row[0])

    # ---------------------------------------------------------------- cluster

    async def cluster_id(self, proposed: str) -> str:
        row = await self._pool.fetchrow(_CLUSTER_ID, proposed, write=True)
        assert row is not None
        return str(row[0])

    async def broker_heartbeat(
        self, me: BrokerRegistration, session_timeout_ms: int, starting: bool
    ) -> list[BrokerRegistration]:
        rows = await self._pool.fetch(
            _HEARTBEAT,
            me.node_id,
            me.host,
            me.port,
            me.rack,
            me.incarnation,
            session_timeout_ms,
            starting,
            write=True,
        )
        return [BrokerRegistration(*row) for row in rows]

    async def broker_leave(self, me: BrokerRegistration) -> None:
        await self._pool.fetch(_LEAVE, me.node_id, me.incarnation, write=True)

    async def watch_logs(self, on_change: LogsChanged) -> None:
        # Sent by every process's LogsNotifier (this one's too: its own long polls were
        # woken at the commit already, so they only look once more).
        await self._pool.listen(
            LOGS_CHANNEL,
            lambda payload: on_change(decode_payload(payload)),
            lambda: on_change(None),
        )

    # ---------------------------------------------------------------- background jobs

    async def list_batches(self, requests: Sequence[ListBatchesRequest]) -> list[BatchListing]:
        rows = await self._pool.fetch(
            _LIST_BATCHES,
            [r.topic_id for r in requests],
            [r.partition for r in requests],
            [r.start_offset for r in requests],
            [r.end_offset for r in requests],
            write=False,
        )
        out: list[BatchListing] = []
        for row in rows:
            i, start, hwm, key = row[0], row[1], row[2], row[3]
            if len(out) < i:
                out.append(
                    BatchListing(UNKNOWN_TOPIC_OR_PARTITION)
                    if hwm is None
                    else BatchListing(NONE, start, hwm)
                )
            if key is not None:
                out[-1].batches.append(StoredBatch(*row[3:]))
        if len(out) != len(requests):
            raise RuntimeError(f"list_batches answered {len(out)} of {len(requests)}")
        return out

    async def replace_batches(
        self,
        object_key: str,
        object_size: int,
        replacements: Sequence[BatchReplacement],
        now_ms: int,
    ) -> list[int]:
        old = [(i, b) for i, r in enumerate(replacements, 1) for b in r.old]
        new = [(i, b) for i, r in enumerate(replacements, 1) for b in r.new]
        rows = await self._pool.fetch(
            _REPLACE,
            object_key,
            object_size,
            now_ms,
            [r.topic_id for r in replacements],
            [r.partition for r in replacements],
            [r.is_valid() for r in replacements],
            [i for i, _ in old],
            [b.base_offset for _, b in old],
            [b.last_offset for _, b in old],
            [b.object_key for _, b in old],
            [i for i, _ in new],
            [b.byte_offset for _, b in new],
            [b.byte_size for _, b in new],
            [b.base_offset for _, b in new],
            [b.last_offset for _, b in new],
            [b.timestamp_type for _, b in new],
            [b.max_timestamp for _, b in new],
            [b.log_append_time for _, b in new],
            write=True,
        )
        if len(rows) != len(replacements):
            raise RuntimeError(
                f"sluice_replace_batches answered {len(rows)} of {len(replacements)}"
            )
        return [r[1] for r in rows]
