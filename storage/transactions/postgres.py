"""Transactions on PostgreSQL: the TransactionStore half of PostgresCoordinator.

Every method is ONE round trip: a statement, or a call of a PL/pgSQL function of
storage/postgres/functions/ (sluice_txn_*); storage/postgres/migrations/0005_transactions.sql
documents the locking order that keeps concurrent brokers from deadlocking. Semantics are the SQLite
backend's (storage/transactions/sqlite.py), held to by the shared contract suite.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

import asyncpg

from storage.coordinator import CoordinatorUnavailable, SealedLogRefused
from storage.groups import CommittedOffset
from storage.partition_key import PartitionKey
from storage.transactions import (
    ONGOING,
    ActiveProducer,
    CompleteRequest,
    CompleteResult,
    InitResult,
    TransactionState,
)

if TYPE_CHECKING:
    from storage.postgres.pool import PostgresPool

_COLUMNS = (
    "t.transactional_id, t.producer_id, t.producer_epoch, t.state, t.timeout_ms,"
    " t.started_ms, t.updated_ms"
)
_SETS = (
    "sluice_txn_partition_topics(t.transactional_id),"
    " sluice_txn_partition_numbers(t.transactional_id), sluice_txn_group_ids(t.transactional_id)"
)
# One statement for all ids; unknown ones come back as a row of NULLs, in request order.
_PENDING = "sluice_txn_markers_pending(t.transactional_id)"
_GET = (
    f"SELECT {_COLUMNS}, {_SETS}, {_PENDING}"
    " FROM unnest($1::text[]) WITH ORDINALITY AS k(id, i)"
    " LEFT JOIN transactions t ON t.transactional_id = k.id"
    " ORDER BY k.i"
)
_LIST = (
    f"SELECT {_COLUMNS}, {_PENDING} FROM transactions t"
    " WHERE (cardinality($1::text[]) = 0 OR t.state = ANY($1::text[]))"
    " AND (cardinality($2::bigint[]) = 0 OR t.producer_id = ANY($2::bigint[]))"
    f" AND ($3::bigint < 0 OR (t.state = '{ONGOING}' AND t.started_ms <= $4::bigint - $3::bigint))"
    " ORDER BY t.transactional_id"
)
_EXPIRED = (
    f"SELECT {_COLUMNS}, {_SETS} FROM transactions t"
    f" WHERE t.state = '{ONGOING}' AND t.started_ms + t.timeout_ms < $1"
    " ORDER BY t.started_ms, t.transactional_id LIMIT $2"
)
# One statement: the CTEs delete an id's rows of every table together (for an id that is
# not ONGOING the set tables hold nothing, but nothing may outlive its id). A concurrent
# InitProducerId that changed the row first makes PostgreSQL re-check it: then it stays.
_FORGET_IDLE = (
    "WITH gone AS ("
    f" DELETE FROM transactions WHERE transactional_id IN ("
    f"  SELECT transactional_id FROM transactions WHERE state <> '{ONGOING}' AND updated_ms < $1"
    "   AND NOT sluice_txn_markers_pending(transactional_id)"
    "   ORDER BY transactional_id LIMIT $2 FOR UPDATE SKIP LOCKED)"
    f" AND state <> '{ONGOING}' AND updated_ms < $1"
    " RETURNING transactional_id),"
    " p AS (DELETE FROM txn_partitions WHERE transactional_id IN (SELECT * FROM gone)),"
    " g AS (DELETE FROM txn_groups WHERE transactional_id IN (SELECT * FROM gone)),"
    " o AS (DELETE FROM txn_offsets WHERE transactional_id IN (SELECT * FROM gone))"
    " SELECT transactional_id FROM gone ORDER BY 1"
)
# One statement for every log asked about; a log without producers gives one row of NULLs
# (so it is told apart from an unknown log, which has no logs row).
_PRODUCERS = (
    "SELECT k.i, l.high_watermark, x.producer_id, x.producer_epoch, x.last_sequence, x.ts,"
    " x.first_offset"
    " FROM unnest($1::uuid[], $2::integer[]) WITH ORDINALITY AS k(topic_id, part, i)"
    " LEFT JOIN logs l ON l.topic_id = k.topic_id AND l.partition = k.part"
    " LEFT JOIN LATERAL ("
    "  SELECT DISTINCT ON (s.producer_id) s.producer_id, s.producer_epoch, s.last_sequence,"
    "   CASE WHEN b.timestamp_type = 1 THEN b.log_append_time ELSE b.max_timestamp END AS ts,"
    "   o.first_offset"
    "  FROM producer_state s"
    "  LEFT JOIN batches b ON b.topic_id = s.topic_id AND b.partition = s.partition"
    "   AND b.last_offset = s.last_offset"
    "  LEFT JOIN open_txns o ON o.topic_id = s.topic_id AND o.partition = s.partition"
    "   AND o.producer_id = s.producer_id"
    "  WHERE l.high_watermark IS NOT NULL AND s.topic_id = k.topic_id AND s.partition = k.part"
    "  ORDER BY s.producer_id, s.base_offset DESC) x ON true"
    " ORDER BY k.i, x.producer_id"
)
_PENDING_OFFSETS = (
    "SELECT group_id, topic_id, partition FROM txn_offsets WHERE group_id = ANY($1::text[])"
)
_INIT = "SELECT * FROM sluice_txn_init($1, $2, $3, $4, $5)"
_ADD = "SELECT sluice_txn_add($1, $2, $3, $4, $5, $6, $7)"
_COMMIT_OFFSETS = "SELECT sluice_txn_commit_offsets($1, $2, $3, $4, $5, $6, $7, $8, $9, $10)"
_COMPLETE = (
    "SELECT * FROM sluice_txn_complete($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13,"
    " $14, $15, $16, $17, $18)"
)
# sluice_refuse_sealed_batch (0011): a batch, here a marker, for a log sealed for classic.
SEALED_LOG_SQLSTATE = "SL001"
# Ids with classic markers still to send, each with those partitions (0008).
_PENDING_MARKERS = (
    f"SELECT {_COLUMNS}, array_agg(m.topic_id ORDER BY m.topic_id, m.partition),"
    " array_agg(m.partition ORDER BY m.topic_id, m.partition), t.completions"
    " FROM txn_pending_markers m JOIN transactions t USING (transactional_id)"
    " GROUP BY t.transactional_id ORDER BY t.transactional_id LIMIT $1"
)
# Under the transaction row's lock, as every write of the id's pending markers.
_MARKERS_WRITTEN = (
    "WITH t AS (SELECT 1 FROM transactions WHERE transactional_id = $1 AND producer_id = $2"
    "  AND producer_epoch = $3 FOR UPDATE)"
    " DELETE FROM txn_pending_markers m WHERE EXISTS (SELECT 1 FROM t)"
    " AND m.transactional_id = $1"
    " AND (m.topic_id, m.partition) IN (SELECT * FROM unnest($4::uuid[], $5::integer[]))"
)


def _partitions(topic_ids: Sequence[Any], partitions: Sequence[int]) -> list[PartitionKey]:
    # asyncpg hands back its own UUID subclass; keep the plain one callers compare with.
    pairs = zip(topic_ids, partitions, strict=True)
    return [PartitionKey(UUID(bytes=t.bytes), p) for t, p in pairs]


def _state(row: Any, with_sets: bool) -> TransactionState:
    state = TransactionState(row[0], row[1], row[2], row[3], row[4], row[5], row[6])
    if with_sets:
        state.partitions = _partitions(row[7], row[8])
        state.groups = list(row[9])
    return state


class PostgresTransactions:
    """TransactionStore on the coordinator's pool (mixed into PostgresCoordinator)."""

    _pool: PostgresPool
    # PostgresCoordinator's: the logs a committed transaction moved, for other brokers'
    # long polls (storage/postgres/notify.py).
    _logs_changed: Callable[[Iterable[PartitionKey]], None]

    async def txn_get(self, transactional_ids: Sequence[str]) -> list[TransactionState | None]:
        rows = await self._pool.fetch(_GET, list(transactional_ids), write=False)
        out: list[TransactionState | None] = []
        for r in rows:
            state = None if r[0] is None else _state(r, True)
            if state is not None:
                state.markers_pending = bool(r[10])
            out.append(state)
        return out

    async def txn_list(
        self, states: Sequence[str], producer_ids: Sequence[int], min_duration_ms: int, now_ms: int
    ) -> list[TransactionState]:
        rows = await self._pool.fetch(
            _LIST, list(states), list(producer_ids), min_duration_ms, now_ms, write=False
        )
        found = [_state(r, False) for r in rows]
        for state, r in zip(found, rows, strict=True):
            state.markers_pending = bool(r[7])
        return found

    async def txn_init(
        self,
        transactional_id: str,
        timeout_ms: int,
        expected_producer_id: int,
        expected_epoch: int,
        now_ms: int,
    ) -> InitResult:
        row = await self._pool.fetchrow(
            _INIT,
            transactional_id,
            timeout_ms,
            expected_producer_id,
            expected_epoch,
            now_ms,
            write=True,
        )
        assert row is not None, "sluice_txn_init answers one row"
        pending = None
        if row[3] is not None:
            pending = TransactionState(
                transactional_id, row[3], row[4], row[5], row[6], row[7], row[8]
            )
            pending.partitions = _partitions(row[9], row[10])
            pending.groups = list(row[11])
        return InitResult(row[0], row[1], row[2], pending)

    async def txn_add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[PartitionKey],
        groups: Sequence[str],
        now_ms: int,
    ) -> int:
        row = await self._pool.fetchrow(
            _ADD,
            transactional_id,
            producer_id,
            producer_epoch,
            [k.topic_id for k in partitions],
            [k.partition for k in partitions],
            list(groups),
            now_ms,
            write=True,
        )
        assert row is not None
        return int(row[0])

    async def txn_commit_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets: Sequence[CommittedOffset],
        now_ms: int,
    ) -> int:
        # One row per partition (the last given wins): ON CONFLICT cannot update a row twice.
        rows = list({o.key: o for o in offsets}.values())
        row = await self._pool.fetchrow(
            _COMMIT_OFFSETS,
            transactional_id,
            producer_id,
            producer_epoch,
            group_id,
            [o.topic_id for o in rows],
            [o.partition for o in rows],
            [o.offset for o in rows],
            [o.leader_epoch for o in rows],
            [o.metadata for o in rows],
            [o.commit_timestamp for o in rows],
            write=True,
        )
        assert row is not None
        return int(row[0])

    async def txn_complete(self, r: CompleteRequest) -> CompleteResult:
        try:
            row = await self._pool.fetchrow(
                _COMPLETE,
                r.transactional_id,
                r.producer_id,
                r.producer_epoch,
                r.commit,
                r.bump_epoch,
                r.object_key,
                r.object_size,
                r.uploader_broker_id,
                [m.topic_id for m in r.markers],
                [m.partition for m in r.markers],
                [m.byte_offset for m in r.markers],
                [m.byte_size for m in r.markers],
                [m.timestamp for m in r.markers],
                r.now_ms,
                [k.topic_id for k in r.pending],
                [k.partition for k in r.pending],
                r.started_ms,
                r.tv2,
                write=True,
            )
        except asyncpg.PostgresError as exc:
            if exc.sqlstate == SEALED_LOG_SQLSTATE:
                # The statement failed whole: nothing was written.
                raise SealedLogRefused(str(exc)) from exc
            raise
        except CoordinatorUnavailable as exc:
            if exc.outcome_unknown:
                # The markers may have been appended: a wake-up for nothing only costs a look.
                self._logs_changed(PartitionKey(m.topic_id, m.partition) for m in r.markers)
            raise
        assert row is not None, "sluice_txn_complete answers one row"
        result = CompleteResult(row[0], list(row[2]), bool(row[1]), row[3], row[4], row[5])
        # The markers appended (offset -1: none, or its log is gone) moved their logs.
        self._logs_changed(
            PartitionKey(m.topic_id, m.partition)
            for m, offset in zip(r.markers, result.offsets, strict=False)
            if offset >= 0
        )
        return result

    async def txn_pending_markers(self, limit: int) -> list[TransactionState]:
        rows = await self._pool.fetch(_PENDING_MARKERS, limit, write=False)
        out: list[TransactionState] = []
        for r in rows:
            state = _state(r, False)
            state.partitions = _partitions(r[7], r[8])
            state.completions = r[9]
            out.append(state)
        return out

    async def txn_markers_written(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[PartitionKey],
    ) -> None:
        await self._pool.fetch(
            _MARKERS_WRITTEN,
            transactional_id,
            producer_id,
            producer_epoch,
            [k.topic_id for k in partitions],
            [k.partition for k in partitions],
            write=True,
        )

    async def txn_expired(self, now_ms: int, limit: int) -> list[TransactionState]:
        rows = await self._pool.fetch(_EXPIRED, now_ms, limit, write=False)
        return [_state(r, True) for r in rows]

    async def describe_producers(
        self, logs: Sequence[PartitionKey]
    ) -> list[list[ActiveProducer] | None]:
        rows = await self._pool.fetch(
            _PRODUCERS, [k.topic_id for k in logs], [k.partition for k in logs], write=False
        )
        out: list[list[ActiveProducer] | None] = [None] * len(logs)
        for i, hwm, pid, epoch, seq, ts, first in rows:
            if hwm is None:
                continue  # unknown log
            found = out[i - 1]
            if found is None:
                found = out[i - 1] = []
            if pid is not None:
                found.append(
                    ActiveProducer(
                        pid, epoch, seq, -1 if ts is None else ts, -1 if first is None else first
                    )
                )
        return out

    async def txn_forget_idle(self, idle_before_ms: int, limit: int) -> list[str]:
        rows = await self._pool.fetch(_FORGET_IDLE, idle_before_ms, limit, write=True)
        return [r[0] for r in rows]

    async def txn_pending_offsets(self, group_ids: Sequence[str]) -> dict[str, set[PartitionKey]]:
        rows = await self._pool.fetch(_PENDING_OFFSETS, list(group_ids), write=False)
        out: dict[str, set[PartitionKey]] = {}
        for group_id, topic_id, partition in rows:
            out.setdefault(group_id, set()).add(PartitionKey(topic_id, partition))
        return out
