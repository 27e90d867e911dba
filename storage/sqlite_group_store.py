"""Committed group offsets on SQLite, in the coordinator's database file.

Same file as :class:`storage.sqlite_coordinator.SqliteCoordinator` (offsets belong with
the data they point into, and a backup of one file has both), but its own connection
and worker thread, and its own migration component ("groups"). WAL mode lets the two
connections read concurrently; writes take turns on SQLite's write lock, whose busy
timeout covers the other connection's short transactions.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar
from uuid import UUID

from storage.group_store import CommittedOffset, GroupStore, OffsetKey
from storage.sqlite_coordinator import SqliteUser

T = TypeVar("T")

MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE group_offsets (
            group_id TEXT NOT NULL,
            topic_id BLOB NOT NULL,
            partition INTEGER NOT NULL,
            committed_offset INTEGER NOT NULL,
            leader_epoch INTEGER NOT NULL,
            metadata TEXT NOT NULL,
            commit_timestamp INTEGER NOT NULL,
            PRIMARY KEY (group_id, topic_id, partition)
        ) WITHOUT ROWID""",
        # Deleting a topic removes its offsets from every group.
        "CREATE INDEX group_offsets_topic ON group_offsets (topic_id)",
    ],
]

_COLUMNS = "topic_id, partition, committed_offset, leader_epoch, metadata, commit_timestamp"


def _offset(row: tuple[Any, ...]) -> CommittedOffset:
    return CommittedOffset(UUID(bytes=row[0]), row[1], row[2], row[3], row[4], row[5])


class SqliteGroupStore(SqliteUser, GroupStore):
    def __init__(self, path: str) -> None:
        super().__init__(path, "groups", MIGRATIONS, "sluice-groups")

    async def commit_offsets(self, group_id: str, offsets: Sequence[CommittedOffset]) -> None:
        rows = [
            (
                group_id,
                o.topic_id.bytes,
                o.partition,
                o.offset,
                o.leader_epoch,
                o.metadata,
                o.commit_timestamp,
            )
            for o in offsets
        ]
        if rows:
            await self._write(_commit, rows)

    async def fetch_offsets(
        self, requests: Mapping[str, Sequence[OffsetKey] | None]
    ) -> dict[str, list[CommittedOffset]]:
        wanted = {g: None if keys is None else list(keys) for g, keys in requests.items()}
        return await self._read(_fetch, wanted)

    async def groups_with_offsets(self, group_ids: Sequence[str] | None = None) -> list[str]:
        return await self._read(
            _groups_with_offsets, None if group_ids is None else list(group_ids)
        )

    async def delete_offsets(self, group_id: str, keys: Sequence[OffsetKey]) -> None:
        rows = [(group_id, k.topic_id.bytes, k.partition) for k in keys]
        if rows:
            await self._write(_delete_offsets, rows)

    async def delete_groups(self, group_ids: Sequence[str]) -> list[str]:
        if not group_ids:
            return []
        return await self._write(_delete_groups, sorted(set(group_ids)))

    async def delete_topics(self, topic_ids: Sequence[UUID]) -> None:
        if topic_ids:
            await self._write(_delete_topics, [t.bytes for t in topic_ids])

    async def groups_committed_before(self, cutoff_ms: int) -> list[str]:
        return await self._read(_groups_committed_before, cutoff_ms)

    async def expire_offsets(self, group_ids: Sequence[str], cutoff_ms: int) -> int:
        if not group_ids:
            return 0
        return await self._write(_expire, sorted(set(group_ids)), cutoff_ms)


def _commit(cur: sqlite3.Cursor, rows: list[tuple[Any, ...]]) -> None:
    cur.executemany(
        "INSERT INTO group_offsets (group_id, topic_id, partition, committed_offset,"
        " leader_epoch, metadata, commit_timestamp) VALUES (?, ?, ?, ?, ?, ?, ?)"
        " ON CONFLICT (group_id, topic_id, partition) DO UPDATE SET"
        " committed_offset = excluded.committed_offset, leader_epoch = excluded.leader_epoch,"
        " metadata = excluded.metadata, commit_timestamp = excluded.commit_timestamp",
        rows,
    )


def _fetch(
    cur: sqlite3.Cursor, wanted: dict[str, list[OffsetKey] | None]
) -> dict[str, list[CommittedOffset]]:
    out: dict[str, list[CommittedOffset]] = {}
    for group_id, keys in wanted.items():
        if keys is None:
            rows = cur.execute(
                f"SELECT {_COLUMNS} FROM group_offsets WHERE group_id = ?"
                " ORDER BY topic_id, partition",
                (group_id,),
            ).fetchall()
        else:
            rows = []
            for k in keys:
                row = cur.execute(
                    f"SELECT {_COLUMNS} FROM group_offsets"
                    " WHERE group_id = ? AND topic_id = ? AND partition = ?",
                    (group_id, k.topic_id.bytes, k.partition),
                ).fetchone()
                if row is not None:
                    rows.append(row)
        if rows:
            out[group_id] = [_offset(r) for r in rows]
    return out


def _groups_with_offsets(cur: sqlite3.Cursor, group_ids: list[str] | None) -> list[str]:
    if group_ids is None:
        return [r[0] for r in cur.execute("SELECT DISTINCT group_id FROM group_offsets ORDER BY 1")]
    found = []
    for group_id in sorted(set(group_ids)):
        row = cur.execute(
            "SELECT 1 FROM group_offsets WHERE group_id = ? LIMIT 1", (group_id,)
        ).fetchone()
        if row is not None:
            found.append(group_id)
    return found


def _delete_offsets(cur: sqlite3.Cursor, rows: list[tuple[Any, ...]]) -> None:
    cur.executemany(
        "DELETE FROM group_offsets WHERE group_id = ? AND topic_id = ? AND partition = ?", rows
    )


def _delete_groups(cur: sqlite3.Cursor, group_ids: list[str]) -> list[str]:
    existed = []
    for group_id in group_ids:
        if cur.execute("DELETE FROM group_offsets WHERE group_id = ?", (group_id,)).rowcount:
            existed.append(group_id)
    return existed


def _delete_topics(cur: sqlite3.Cursor, topic_ids: list[bytes]) -> None:
    cur.executemany("DELETE FROM group_offsets WHERE topic_id = ?", [(t,) for t in topic_ids])


def _groups_committed_before(cur: sqlite3.Cursor, cutoff_ms: int) -> list[str]:
    return [
        r[0]
        for r in cur.execute(
            "SELECT DISTINCT group_id FROM group_offsets WHERE commit_timestamp < ? ORDER BY 1",
            (cutoff_ms,),
        )
    ]


def _expire(cur: sqlite3.Cursor, group_ids: list[str], cutoff_ms: int) -> int:
    removed = 0
    for group_id in group_ids:
        removed += cur.execute(
            "DELETE FROM group_offsets WHERE group_id = ? AND commit_timestamp < ?",
            (group_id, cutoff_ms),
        ).rowcount
    return removed
