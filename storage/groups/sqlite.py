"""Committed group offsets on SQLite, in the coordinator's database file.

Same file as :class:`storage.coordinator.sqlite.SqliteCoordinator` (offsets belong with
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

from storage.groups import (
    CommittedOffset,
    GroupSnapshot,
    GroupStore,
    MemberSnapshot,
    OffsetKey,
)
from storage.sqlite import SqliteUser

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
    # 2: membership snapshots (storage/groups/: GroupSnapshot).
    [
        """CREATE TABLE group_snapshots (
            group_id TEXT PRIMARY KEY,
            generation_id INTEGER NOT NULL,
            protocol_type TEXT NOT NULL,
            protocol_name TEXT NOT NULL,
            leader_id TEXT NOT NULL,
            state_since_ms INTEGER NOT NULL,
            written_ms INTEGER NOT NULL
        ) WITHOUT ROWID""",
        """CREATE TABLE group_snapshot_members (
            group_id TEXT NOT NULL,
            position INTEGER NOT NULL,
            member_id TEXT NOT NULL,
            group_instance_id TEXT,
            client_id TEXT NOT NULL,
            client_host TEXT NOT NULL,
            rebalance_timeout_ms INTEGER NOT NULL,
            session_timeout_ms INTEGER NOT NULL,
            subscription BLOB NOT NULL,
            assignment BLOB NOT NULL,
            PRIMARY KEY (group_id, position)
        ) WITHOUT ROWID""",
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

    async def store_group(self, snapshot: GroupSnapshot) -> None:
        await self._write(_store_group, snapshot)

    async def load_group(self, group_id: str) -> GroupSnapshot | None:
        return await self._read(_load_group, group_id)

    async def delete_group_snapshots(self, group_ids: Sequence[str]) -> None:
        if group_ids:
            await self._write(_delete_snapshots, sorted(set(group_ids)))

    async def groups_with_snapshots(self) -> list[str]:
        return await self._read(
            lambda cur: [
                r[0] for r in cur.execute("SELECT group_id FROM group_snapshots ORDER BY 1")
            ]
        )

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
        had_offsets = cur.execute(
            "DELETE FROM group_offsets WHERE group_id = ?", (group_id,)
        ).rowcount
        if _delete_snapshot(cur, group_id) or had_offsets:
            existed.append(group_id)
    return existed


def _delete_snapshot(cur: sqlite3.Cursor, group_id: str) -> bool:
    cur.execute("DELETE FROM group_snapshot_members WHERE group_id = ?", (group_id,))
    return cur.execute("DELETE FROM group_snapshots WHERE group_id = ?", (group_id,)).rowcount > 0


def _delete_snapshots(cur: sqlite3.Cursor, group_ids: list[str]) -> None:
    for group_id in group_ids:
        _delete_snapshot(cur, group_id)


def _store_group(cur: sqlite3.Cursor, s: GroupSnapshot) -> None:
    _delete_snapshot(cur, s.group_id)
    cur.execute(
        "INSERT INTO group_snapshots (group_id, generation_id, protocol_type, protocol_name,"
        " leader_id, state_since_ms, written_ms) VALUES (?, ?, ?, ?, ?, ?, ?)",
        (s.group_id, s.generation_id, s.protocol_type, s.protocol_name, s.leader_id,
         s.state_since_ms, s.written_ms),
    )  # fmt: skip
    cur.executemany(
        "INSERT INTO group_snapshot_members (group_id, position, member_id, group_instance_id,"
        " client_id, client_host, rebalance_timeout_ms, session_timeout_ms, subscription,"
        " assignment) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        [
            (s.group_id, i, m.member_id, m.group_instance_id, m.client_id, m.client_host,
             m.rebalance_timeout_ms, m.session_timeout_ms, m.subscription, m.assignment)
            for i, m in enumerate(s.members)
        ],
    )  # fmt: skip


def _load_group(cur: sqlite3.Cursor, group_id: str) -> GroupSnapshot | None:
    row = cur.execute(
        "SELECT generation_id, protocol_type, protocol_name, leader_id, state_since_ms,"
        " written_ms FROM group_snapshots WHERE group_id = ?",
        (group_id,),
    ).fetchone()
    if row is None:
        return None
    members = tuple(
        MemberSnapshot(r[0], r[1], r[2], r[3], r[4], r[5], bytes(r[6]), bytes(r[7]))
        for r in cur.execute(
            "SELECT member_id, group_instance_id, client_id, client_host, rebalance_timeout_ms,"
            " session_timeout_ms, subscription, assignment FROM group_snapshot_members"
            " WHERE group_id = ? ORDER BY position",
            (group_id,),
        )
    )
    return GroupSnapshot(group_id, row[0], row[1], row[2], row[3], row[4], row[5], members)


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
