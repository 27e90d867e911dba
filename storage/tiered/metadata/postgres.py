"""Remote log segment metadata on PostgreSQL (table ``remote_log_segments``, migration
0007). Every method is one statement, so one round trip. Give it the coordinator's
:class:`PostgresPool` to share connections."""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

import asyncpg

from storage.postgres.pool import PoolUser, PostgresPool
from storage.tiered.metadata import (
    RemoteLogMetadataStore,
    RemoteSegment,
    SegmentExists,
    SegmentState,
    check_new,
    predecessors,
    segment_from_row,
    segment_to_row,
)

_COLUMNS = (
    "topic_id, partition, segment_id, start_offset, end_offset, max_timestamp, leader_epoch,"
    " epochs, size, broker_id, state, event_ms"
)
# ON CONFLICT DO NOTHING instead of catching a unique violation: an aborted statement
# would otherwise be logged as an error by the server for a case the caller expects.
_ADD = (
    f"INSERT INTO remote_log_segments ({_COLUMNS})"
    " VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)"
    " ON CONFLICT (segment_id) DO NOTHING RETURNING 1"
)
_UPDATE = (
    "UPDATE remote_log_segments SET state = $2, event_ms = $3"
    f" WHERE segment_id = $1 AND state = ANY($4::text[]) RETURNING {_COLUMNS}"
)
_LIST = (
    f"SELECT {_COLUMNS} FROM remote_log_segments WHERE topic_id = $1 AND partition = $2"
    " AND ($3::bigint IS NULL OR end_offset >= $3)"
    " AND ($4::text[] IS NULL OR state = ANY($4::text[]))"
    " ORDER BY start_offset, segment_id"
)
_DELETE = (
    "WITH d AS (DELETE FROM remote_log_segments WHERE segment_id = ANY($1::uuid[])"
    " RETURNING 1) SELECT count(*) FROM d"
)
_DELETE_TOPICS = (
    "WITH s AS (DELETE FROM remote_log_starts WHERE topic_id = ANY($1::uuid[])),"
    " d AS (DELETE FROM remote_log_segments WHERE topic_id = ANY($1::uuid[])"
    " RETURNING 1) SELECT count(*) FROM d"
)
_TOPIC_PARTITIONS = "SELECT DISTINCT topic_id, partition FROM remote_log_segments"
_LOG_START = (
    "SELECT coalesce((SELECT log_start FROM remote_log_starts"
    " WHERE topic_id = $1 AND partition = $2), 0)"
)
_ADVANCE = (
    "INSERT INTO remote_log_starts AS r (topic_id, partition, log_start) VALUES ($1, $2, $3)"
    " ON CONFLICT (topic_id, partition) DO UPDATE"
    " SET log_start = greatest(r.log_start, excluded.log_start) RETURNING log_start"
)


def _same(value: UUID) -> UUID:
    return value  # asyncpg takes UUIDs as they are


def _segment(row: asyncpg.Record) -> RemoteSegment:
    # asyncpg hands back its own UUID subclass; keep the plain one callers compare with.
    return segment_from_row(row, lambda v: UUID(bytes=v.bytes))


class PostgresRemoteLogMetadata(PoolUser, RemoteLogMetadataStore):
    def __init__(
        self,
        dsn: str | PostgresPool,
        *,
        command_timeout: float = 15.0,
        connect_timeout: float = 5.0,
    ) -> None:
        super().__init__(
            dsn,
            min_size=1,
            max_size=2,
            command_timeout=command_timeout,
            connect_timeout=connect_timeout,
        )

    @property
    def pool(self) -> PostgresPool:
        return self._pool

    async def add_segment(self, segment: RemoteSegment) -> None:
        check_new(segment)
        s = segment
        row = await self._pool.fetchrow(_ADD, *segment_to_row(s, _same), write=True)
        if row is None:
            raise SegmentExists(str(s.segment_id))

    async def update_state(
        self, segment_id: UUID, state: SegmentState, event_ms: int
    ) -> RemoteSegment | None:
        before = [s.value for s in predecessors(state)]
        if not before:
            return None
        row = await self._pool.fetchrow(
            _UPDATE, segment_id, state.value, event_ms, before, write=True
        )
        return None if row is None else _segment(row)

    async def list_segments(
        self,
        topic_id: UUID,
        partition: int,
        *,
        from_offset: int | None = None,
        states: Sequence[SegmentState] | None = None,
    ) -> list[RemoteSegment]:
        wanted = None if states is None else [s.value for s in states]
        rows = await self._pool.fetch(_LIST, topic_id, partition, from_offset, wanted, write=False)
        return [_segment(r) for r in rows]

    async def delete_segments(self, segment_ids: Sequence[UUID]) -> int:
        if not segment_ids:
            return 0
        row = await self._pool.fetchrow(_DELETE, list(set(segment_ids)), write=True)
        return int(row[0]) if row is not None else 0

    async def delete_topics(self, topic_ids: Sequence[UUID]) -> int:
        if not topic_ids:
            return 0
        row = await self._pool.fetchrow(_DELETE_TOPICS, list(set(topic_ids)), write=True)
        return int(row[0]) if row is not None else 0

    async def topic_partitions(self) -> dict[UUID, set[int]]:
        out: dict[UUID, set[int]] = {}
        for row in await self._pool.fetch(_TOPIC_PARTITIONS, write=False):
            out.setdefault(UUID(bytes=row[0].bytes), set()).add(int(row[1]))
        return out

    async def log_start(self, topic_id: UUID, partition: int) -> int:
        row = await self._pool.fetchrow(_LOG_START, topic_id, partition, write=False)
        return int(row[0]) if row is not None else 0

    async def advance_log_start(self, topic_id: UUID, partition: int, offset: int) -> int:
        row = await self._pool.fetchrow(_ADVANCE, topic_id, partition, max(offset, 0), write=True)
        assert row is not None
        return int(row[0])
