"""Remote log segment metadata on SQLite, in the coordinator's database file (its own
connection and migration component "remote_log", like the group store)."""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from storage.sqlite import SqliteUser
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

MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE remote_log_segments (
            segment_id BLOB PRIMARY KEY,
            topic_id BLOB NOT NULL,
            partition INTEGER NOT NULL,
            start_offset INTEGER NOT NULL,
            end_offset INTEGER NOT NULL,
            max_timestamp INTEGER NOT NULL,
            leader_epoch INTEGER NOT NULL,
            epochs TEXT NOT NULL,
            size INTEGER NOT NULL,
            broker_id INTEGER NOT NULL,
            state TEXT NOT NULL CHECK (state IN ('COPY_SEGMENT_STARTED',
                'COPY_SEGMENT_FINISHED', 'DELETE_SEGMENT_STARTED', 'DELETE_SEGMENT_FINISHED')),
            event_ms INTEGER NOT NULL
        )""",
        # Every read is one partition's segments in offset order.
        "CREATE INDEX remote_log_segments_partition"
        " ON remote_log_segments (topic_id, partition, start_offset)",
        """CREATE TABLE remote_log_starts (
            topic_id BLOB NOT NULL,
            partition INTEGER NOT NULL,
            log_start INTEGER NOT NULL,
            PRIMARY KEY (topic_id, partition)
        ) WITHOUT ROWID""",
    ],
]

_COLUMNS = (
    "topic_id, partition, segment_id, start_offset, end_offset, max_timestamp, leader_epoch,"
    " epochs, size, broker_id, state, event_ms"
)


def _uuid_bytes(value: UUID) -> bytes:
    return value.bytes


def _segment(row: tuple[Any, ...]) -> RemoteSegment:
    return segment_from_row(row, lambda v: UUID(bytes=v))


class SqliteRemoteLogMetadata(SqliteUser, RemoteLogMetadataStore):
    def __init__(self, path: str) -> None:
        super().__init__(path, "remote_log", MIGRATIONS, "sluice-remote-log")

    async def add_segment(self, segment: RemoteSegment) -> None:
        check_new(segment)
        s = segment
        await self._write(_add, segment_to_row(s, _uuid_bytes))

    async def update_state(
        self, segment_id: UUID, state: SegmentState, event_ms: int
    ) -> RemoteSegment | None:
        return await self._write(_update, segment_id.bytes, state, event_ms)

    async def list_segments(
        self,
        topic_id: UUID,
        partition: int,
        *,
        from_offset: int | None = None,
        states: Sequence[SegmentState] | None = None,
    ) -> list[RemoteSegment]:
        wanted = None if states is None else {s.value for s in states}
        return await self._read(_list, topic_id.bytes, partition, from_offset, wanted)

    async def delete_segments(self, segment_ids: Sequence[UUID]) -> int:
        ids = [(i.bytes,) for i in set(segment_ids)]
        return await self._write(_delete, ids) if ids else 0

    async def delete_topics(self, topic_ids: Sequence[UUID]) -> int:
        ids = [(i.bytes,) for i in set(topic_ids)]
        return await self._write(_delete_topics, ids) if ids else 0

    async def topic_partitions(self) -> dict[UUID, set[int]]:
        return await self._read(_topic_partitions)

    async def log_start(self, topic_id: UUID, partition: int) -> int:
        return await self._read(_log_start, topic_id.bytes, partition)

    async def advance_log_start(self, topic_id: UUID, partition: int, offset: int) -> int:
        return await self._write(_advance, topic_id.bytes, partition, offset)


def _add(cur: sqlite3.Cursor, row: tuple[Any, ...]) -> None:
    try:
        cur.execute(
            f"INSERT INTO remote_log_segments ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?)", row
        )
    except sqlite3.IntegrityError as exc:
        raise SegmentExists(str(UUID(bytes=row[2]))) from exc


def _update(
    cur: sqlite3.Cursor, segment_id: bytes, state: SegmentState, event_ms: int
) -> RemoteSegment | None:
    before = [s.value for s in predecessors(state)]
    if not before:
        return None
    marks = ",".join("?" * len(before))
    row = cur.execute(
        f"UPDATE remote_log_segments SET state = ?, event_ms = ?"
        f" WHERE segment_id = ? AND state IN ({marks}) RETURNING {_COLUMNS}",
        (state.value, event_ms, segment_id, *before),
    ).fetchone()
    return None if row is None else _segment(row)


def _list(
    cur: sqlite3.Cursor,
    topic_id: bytes,
    partition: int,
    from_offset: int | None,
    states: set[str] | None,
) -> list[RemoteSegment]:
    rows = cur.execute(
        f"SELECT {_COLUMNS} FROM remote_log_segments WHERE topic_id = ? AND partition = ?"
        " AND (? IS NULL OR end_offset >= ?) ORDER BY start_offset, segment_id",
        (topic_id, partition, from_offset, from_offset),
    ).fetchall()
    return [_segment(r) for r in rows if states is None or r[10] in states]


def _delete(cur: sqlite3.Cursor, ids: list[tuple[bytes]]) -> int:
    cur.executemany("DELETE FROM remote_log_segments WHERE segment_id = ?", ids)
    return cur.rowcount if cur.rowcount >= 0 else 0


def _delete_topics(cur: sqlite3.Cursor, ids: list[tuple[bytes]]) -> int:
    cur.executemany("DELETE FROM remote_log_segments WHERE topic_id = ?", ids)
    deleted = cur.rowcount if cur.rowcount >= 0 else 0
    cur.executemany("DELETE FROM remote_log_starts WHERE topic_id = ?", ids)
    return deleted


def _topic_partitions(cur: sqlite3.Cursor) -> dict[UUID, set[int]]:
    out: dict[UUID, set[int]] = {}
    for topic_id, partition in cur.execute(
        "SELECT DISTINCT topic_id, partition FROM remote_log_segments"
    ):
        out.setdefault(UUID(bytes=topic_id), set()).add(int(partition))
    return out


def _log_start(cur: sqlite3.Cursor, topic_id: bytes, partition: int) -> int:
    row = cur.execute(
        "SELECT log_start FROM remote_log_starts WHERE topic_id = ? AND partition = ?",
        (topic_id, partition),
    ).fetchone()
    return 0 if row is None else int(row[0])


def _advance(cur: sqlite3.Cursor, topic_id: bytes, partition: int, offset: int) -> int:
    row = cur.execute(
        "INSERT INTO remote_log_starts (topic_id, partition, log_start) VALUES (?, ?, ?)"
        " ON CONFLICT (topic_id, partition) DO UPDATE"
        " SET log_start = max(log_start, excluded.log_start) RETURNING log_start",
        (topic_id, partition, max(offset, 0)),
    ).fetchone()
    return int(row[0])
