"""Share-partition state on PostgreSQL, in the coordinator's database (table
``share_partitions``, migration 0015; the groups' membership in ``share_groups``, 0019).
Same contract as :class:`storage.share_groups.sqlite.SqliteShareStateStore`; every method
is one statement (one round trip), the compare-and-set write of many partitions included.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from uuid import UUID

from storage.postgres.pool import PoolUser, PostgresPool
from storage.share_groups import (
    ShareKey,
    ShareStateStore,
    StateWrite,
    StoredState,
    first_version,
)

_LOAD = (
    "SELECT s.topic_id, s.partition, s.version, s.state"
    " FROM unnest($2::uuid[], $3::integer[]) AS k(t, p)"
    " JOIN share_partitions s ON s.group_id = $1 AND s.topic_id = k.t AND s.partition = k.p"
)
# Rows absent (expected version 0) are inserted unless another broker did first; the
# others are updated only at the version read. A concurrent update of the same row waits
# for the first one's lock, then finds the version changed and updates nothing.
_WRITE = (
    "WITH w AS (SELECT * FROM unnest($2::uuid[], $3::integer[], $4::bigint[], $5::text[],"
    "  $6::bigint[]) AS w(t, p, v, s, first)),"
    " ins AS (INSERT INTO share_partitions (group_id, topic_id, partition, version, state)"
    "  SELECT $1, w.t, w.p, w.first, w.s FROM w WHERE w.v = 0 ORDER BY w.t, w.p"
    "  ON CONFLICT DO NOTHING RETURNING topic_id, partition, version),"
    " upd AS (UPDATE share_partitions s SET version = s.version + 1, state = w.s FROM w"
    "  WHERE w.v > 0 AND s.group_id = $1 AND s.topic_id = w.t AND s.partition = w.p"
    "  AND s.version = w.v RETURNING s.topic_id, s.partition, s.version)"
    " SELECT topic_id, partition, version FROM ins"
    " UNION ALL SELECT topic_id, partition, version FROM upd"
)
_GROUP_STATES = (
    "SELECT topic_id, partition, version, state FROM share_partitions WHERE group_id = $1"
    " ORDER BY topic_id, partition"
)
_GROUPS = "SELECT group_id FROM share_partitions UNION SELECT group_id FROM share_groups ORDER BY 1"
_HAS_GROUP = (
    "SELECT EXISTS (SELECT 1 FROM share_groups WHERE group_id = $1)"
    " OR EXISTS (SELECT 1 FROM share_partitions WHERE group_id = $1)"
)
_STORE_MEMBERSHIP = (
    "INSERT INTO share_groups (group_id, membership) VALUES ($1, $2)"
    " ON CONFLICT (group_id) DO UPDATE SET membership = excluded.membership"
)
_LOAD_MEMBERSHIP = "SELECT membership FROM share_groups WHERE group_id = $1"
_DELETE_MEMBERSHIP = "DELETE FROM share_groups WHERE group_id = $1"
_DELETE_ALL = (
    "WITH d AS (DELETE FROM share_partitions WHERE group_id = $1 RETURNING 1)"
    " SELECT count(*) FROM d"
)
_DELETE_SOME = (
    "WITH d AS (DELETE FROM share_partitions s USING unnest($2::uuid[], $3::integer[])"
    "  AS k(t, p) WHERE s.group_id = $1 AND s.topic_id = k.t AND s.partition = k.p"
    "  RETURNING 1) SELECT count(*) FROM d"
)
_GROUP_CONFIGS = "SELECT name, value FROM group_configs WHERE group_id = $1"
# Removals and settings in one statement (they name different keys).
_ALTER_CONFIGS = (
    "WITH d AS (DELETE FROM group_configs WHERE group_id = $1 AND name = ANY($2::text[]))"
    " INSERT INTO group_configs (group_id, name, value)"
    " SELECT $1, k.n, k.v FROM unnest($3::text[], $4::text[]) AS k(n, v)"
    " ON CONFLICT (group_id, name) DO UPDATE SET value = excluded.value"
)
_DELETE_TOPICS = "DELETE FROM share_partitions WHERE topic_id = ANY($1::uuid[])"


def _key(row: object) -> ShareKey:
    # asyncpg hands back its own UUID subclass; keep the plain one callers compare with.
    return ShareKey(UUID(bytes=row[0].bytes), row[1])  # type: ignore[index]


class PostgresShareStateStore(PoolUser, ShareStateStore):
    def __init__(self, dsn: str | PostgresPool, *, command_timeout: float = 15.0) -> None:
        super().__init__(dsn, min_size=1, max_size=4, command_timeout=command_timeout)

    async def load(self, group_id: str, keys: Sequence[ShareKey]) -> dict[ShareKey, StoredState]:
        if not keys:
            return {}
        rows = await self._pool.fetch(
            _LOAD, group_id, [k.topic_id for k in keys], [k.partition for k in keys], write=False
        )
        return {_key(r): StoredState(r[2], r[3]) for r in rows}

    async def write(self, group_id: str, writes: Sequence[StateWrite]) -> dict[ShareKey, int]:
        if not writes:
            return {}
        rows = await self._pool.fetch(
            _WRITE,
            group_id,
            [w.key.topic_id for w in writes],
            [w.key.partition for w in writes],
            [w.expected_version for w in writes],
            [w.state for w in writes],
            [first_version() for _ in writes],
            write=True,
        )
        return {_key(r): int(r[2]) for r in rows}

    async def group_states(self, group_id: str) -> dict[ShareKey, StoredState]:
        rows = await self._pool.fetch(_GROUP_STATES, group_id, write=False)
        return {_key(r): StoredState(r[2], r[3]) for r in rows}

    async def groups(self) -> list[str]:
        return [r[0] for r in await self._pool.fetch(_GROUPS, write=False)]

    async def has_group(self, group_id: str) -> bool:
        row = await self._pool.fetchrow(_HAS_GROUP, group_id, write=False)
        return bool(row is not None and row[0])

    async def store_membership(self, group_id: str, membership: str) -> None:
        await self._pool.fetch(_STORE_MEMBERSHIP, group_id, membership, write=True)

    async def load_membership(self, group_id: str) -> str | None:
        row = await self._pool.fetchrow(_LOAD_MEMBERSHIP, group_id, write=False)
        return str(row[0]) if row is not None else None

    async def delete_membership(self, group_id: str) -> None:
        await self._pool.fetch(_DELETE_MEMBERSHIP, group_id, write=True)

    async def delete(self, group_id: str, keys: Sequence[ShareKey] | None) -> int:
        if keys is None:
            row = await self._pool.fetchrow(_DELETE_ALL, group_id, write=True)
        else:
            row = await self._pool.fetchrow(
                _DELETE_SOME,
                group_id,
                [k.topic_id for k in keys],
                [k.partition for k in keys],
                write=True,
            )
        return int(row[0]) if row is not None else 0

    async def group_configs(self, group_id: str) -> dict[str, str]:
        rows = await self._pool.fetch(_GROUP_CONFIGS, group_id, write=False)
        return {r[0]: r[1] for r in rows}

    async def alter_group_configs(self, group_id: str, changes: Mapping[str, str | None]) -> None:
        if not changes:
            return
        removed = [n for n, v in changes.items() if v is None]
        kept = [(n, v) for n, v in changes.items() if v is not None]
        await self._pool.fetch(
            _ALTER_CONFIGS,
            group_id,
            removed,
            [n for n, _ in kept],
            [v for _, v in kept],
            write=True,
        )

    async def delete_topics(self, topic_ids: Sequence[UUID]) -> None:
        if topic_ids:
            await self._pool.fetch(_DELETE_TOPICS, list(topic_ids), write=True)
