"""Share-partition state on SQLite, in the coordinator's database file (its own
connection and migration component, "share_groups", as storage/groups/sqlite.py)."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping, Sequence
from uuid import UUID

from storage.share_groups import (
    ShareKey,
    ShareStateStore,
    StateWrite,
    StoredState,
    first_version,
)
from storage.sqlite import SqliteUser

MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE share_partitions (
            group_id TEXT NOT NULL,
            topic_id BLOB NOT NULL,
            partition INTEGER NOT NULL,
            version INTEGER NOT NULL,
            state TEXT NOT NULL,
            PRIMARY KEY (group_id, topic_id, partition)
        ) WITHOUT ROWID""",
        "CREATE INDEX share_partitions_topic ON share_partitions (topic_id)",
        """CREATE TABLE group_configs (
            group_id TEXT NOT NULL,
            name TEXT NOT NULL,
            value TEXT NOT NULL,
            PRIMARY KEY (group_id, name)
        ) WITHOUT ROWID""",
    ],
    [
        # Share groups' membership (epochs, members, assignments) as JSON, one row per group.
        """CREATE TABLE share_groups (
            group_id TEXT NOT NULL PRIMARY KEY,
            membership TEXT NOT NULL
        ) WITHOUT ROWID""",
    ],
]


class SqliteShareStateStore(SqliteUser, ShareStateStore):
    def __init__(self, path: str) -> None:
        super().__init__(path, "share_groups", MIGRATIONS, "sluice-share")

    async def load(self, group_id: str, keys: Sequence[ShareKey]) -> dict[ShareKey, StoredState]:
        return await self._read(_load, group_id, list(keys))

    async def write(self, group_id: str, writes: Sequence[StateWrite]) -> dict[ShareKey, int]:
        if not writes:
            return {}
        return await self._write(_write, group_id, list(writes))

    async def group_states(self, group_id: str) -> dict[ShareKey, StoredState]:
        return await self._read(_group_states, group_id)

    async def groups(self) -> list[str]:
        return await self._read(
            lambda cur: [
                r[0]
                for r in cur.execute(
                    "SELECT group_id FROM share_partitions"
                    " UNION SELECT group_id FROM share_groups ORDER BY 1"
                )
            ]
        )

    async def has_group(self, group_id: str) -> bool:
        return await self._read(
            lambda cur: (
                cur.execute(
                    "SELECT EXISTS (SELECT 1 FROM share_groups WHERE group_id = ?)"
                    " OR EXISTS (SELECT 1 FROM share_partitions WHERE group_id = ?)",
                    (group_id, group_id),
                ).fetchone()[0]
                == 1
            )
        )

    async def store_membership(self, group_id: str, membership: str) -> None:
        await self._write(
            lambda cur: cur.execute(
                "INSERT INTO share_groups (group_id, membership) VALUES (?, ?)"
                " ON CONFLICT (group_id) DO UPDATE SET membership = excluded.membership",
                (group_id, membership),
            )
        )

    async def load_membership(self, group_id: str) -> str | None:
        row = await self._read(
            lambda cur: cur.execute(
                "SELECT membership FROM share_groups WHERE group_id = ?", (group_id,)
            ).fetchone()
        )
        return row[0] if row is not None else None

    async def delete_membership(self, group_id: str) -> None:
        await self._write(
            lambda cur: cur.execute("DELETE FROM share_groups WHERE group_id = ?", (group_id,))
        )

    async def delete(self, group_id: str, keys: Sequence[ShareKey] | None) -> int:
        return await self._write(_delete, group_id, None if keys is None else list(keys))

    async def group_configs(self, group_id: str) -> dict[str, str]:
        return await self._read(
            lambda cur: dict(
                cur.execute(
                    "SELECT name, value FROM group_configs WHERE group_id = ?", (group_id,)
                ).fetchall()
            )
        )

    async def alter_group_configs(self, group_id: str, changes: Mapping[str, str | None]) -> None:
        if changes:
            await self._write(_alter_configs, group_id, list(changes.items()))

    async def delete_topics(self, topic_ids: Sequence[UUID]) -> None:
        if topic_ids:
            await self._write(
                lambda cur: cur.executemany(
                    "DELETE FROM share_partitions WHERE topic_id = ?",
                    [(t.bytes,) for t in topic_ids],
                )
            )


def _alter_configs(
    cur: sqlite3.Cursor, group_id: str, changes: list[tuple[str, str | None]]
) -> None:
    for name, value in changes:
        if value is None:
            cur.execute(
                "DELETE FROM group_configs WHERE group_id = ? AND name = ?", (group_id, name)
            )
        else:
            cur.execute(
                "INSERT INTO group_configs (group_id, name, value) VALUES (?, ?, ?)"
                " ON CONFLICT (group_id, name) DO UPDATE SET value = excluded.value",
                (group_id, name, value),
            )


def _load(cur: sqlite3.Cursor, group_id: str, keys: list[ShareKey]) -> dict[ShareKey, StoredState]:
    out: dict[ShareKey, StoredState] = {}
    for key in keys:
        row = cur.execute(
            "SELECT version, state FROM share_partitions"
            " WHERE group_id = ? AND topic_id = ? AND partition = ?",
            (group_id, key.topic_id.bytes, key.partition),
        ).fetchone()
        if row is not None:
            out[key] = StoredState(row[0], row[1])
    return out


def _write(cur: sqlite3.Cursor, group_id: str, writes: list[StateWrite]) -> dict[ShareKey, int]:
    done: dict[ShareKey, int] = {}
    for w in writes:
        if w.expected_version == 0:
            version = first_version()
            changed = cur.execute(
                "INSERT INTO share_partitions (group_id, topic_id, partition, version, state)"
                " VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING",
                (group_id, w.key.topic_id.bytes, w.key.partition, version, w.state),
            ).rowcount
        else:
            version = w.expected_version + 1
            changed = cur.execute(
                "UPDATE share_partitions SET version = version + 1, state = ?"
                " WHERE group_id = ? AND topic_id = ? AND partition = ? AND version = ?",
                (w.state, group_id, w.key.topic_id.bytes, w.key.partition, w.expected_version),
            ).rowcount
        if changed:
            done[w.key] = version
    return done


def _group_states(cur: sqlite3.Cursor, group_id: str) -> dict[ShareKey, StoredState]:
    return {
        ShareKey(UUID(bytes=r[0]), r[1]): StoredState(r[2], r[3])
        for r in cur.execute(
            "SELECT topic_id, partition, version, state FROM share_partitions"
            " WHERE group_id = ? ORDER BY topic_id, partition",
            (group_id,),
        )
    }


def _delete(cur: sqlite3.Cursor, group_id: str, keys: list[ShareKey] | None) -> int:
    if keys is None:
        return cur.execute("DELETE FROM share_partitions WHERE group_id = ?", (group_id,)).rowcount
    removed = 0
    for key in keys:
        removed += cur.execute(
            "DELETE FROM share_partitions WHERE group_id = ? AND topic_id = ? AND partition = ?",
            (group_id, key.topic_id.bytes, key.partition),
        ).rowcount
    return removed
