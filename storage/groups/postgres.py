"""Committed group offsets on PostgreSQL, in the coordinator's database (table
``group_offsets``, migration 0003), and membership snapshots (``group_snapshots`` and
``group_snapshot_members``, migration 0009).

Same contract as :class:`storage.groups.sqlite.SqliteGroupStore`; every method is
one statement, so an OffsetCommit or OffsetFetch request is one round trip whatever
its size. Give it the coordinator's :class:`PostgresPool` to share connections.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from uuid import UUID

import asyncpg

from storage.groups import (
    CommittedOffset,
    GroupSnapshot,
    GroupStore,
    MemberSnapshot,
    OffsetKey,
)
from storage.postgres.pool import PoolUser, PostgresPool

_COLUMNS = "o.group_id, o.topic_id, o.partition, o.committed_offset, o.leader_epoch, o.metadata,"
_COLUMNS += " o.commit_timestamp"

_COMMIT = (
    "INSERT INTO group_offsets AS o (group_id, topic_id, partition, committed_offset,"
    " leader_epoch, metadata, commit_timestamp)"
    " SELECT $1, k.t, k.p, k.o, k.e, k.m, k.ts"
    " FROM unnest($2::uuid[], $3::integer[], $4::bigint[], $5::integer[], $6::text[],"
    "  $7::bigint[]) AS k(t, p, o, e, m, ts)"
    # Rows in one order: two commits of one group touching the same partitions (a zombie
    # and its successor) wait on each other instead of deadlocking.
    " ORDER BY k.t, k.p"
    " ON CONFLICT (group_id, topic_id, partition) DO UPDATE SET"
    " committed_offset = excluded.committed_offset, leader_epoch = excluded.leader_epoch,"
    " metadata = excluded.metadata, commit_timestamp = excluded.commit_timestamp"
)
# Whole groups ($1) and single partitions ($2..$4) in one statement.
_FETCH = (
    f"SELECT {_COLUMNS} FROM group_offsets o WHERE o.group_id = ANY($1::text[])"
    " UNION ALL"
    f" SELECT {_COLUMNS} FROM unnest($2::text[], $3::uuid[], $4::integer[]) AS k(g, t, p)"
    " JOIN group_offsets o ON o.group_id = k.g AND o.topic_id = k.t AND o.partition = k.p"
)
_GROUPS_WITH_OFFSETS = (
    "SELECT DISTINCT group_id FROM group_offsets"
    " WHERE $1::text[] IS NULL OR group_id = ANY($1::text[]) ORDER BY 1"
)
_DELETE_OFFSETS = (
    "DELETE FROM group_offsets o USING unnest($2::uuid[], $3::integer[]) AS k(t, p)"
    " WHERE o.group_id = $1 AND o.topic_id = k.t AND o.partition = k.p"
)
_DELETE_GROUPS = (
    "WITH o AS (DELETE FROM group_offsets WHERE group_id = ANY($1::text[]) RETURNING group_id),"
    " m AS (DELETE FROM group_snapshot_members WHERE group_id = ANY($1::text[])),"
    " s AS (DELETE FROM group_snapshots WHERE group_id = ANY($1::text[]) RETURNING group_id)"
    " SELECT group_id FROM o UNION SELECT group_id FROM s ORDER BY 1"
)
# The group row and its members in one statement. Members are replaced position by
# position and the positions past the new count deleted: the sub-statements of one
# statement do not see each other's rows, so they must touch different ones.
_STORE_GROUP = (
    "WITH g AS (INSERT INTO group_snapshots (group_id, generation_id, protocol_type,"
    "  protocol_name, leader_id, state_since_ms, written_ms)"
    "  VALUES ($1, $2, $3, $4, $5, $6, $7)"
    "  ON CONFLICT (group_id) DO UPDATE SET generation_id = excluded.generation_id,"
    "  protocol_type = excluded.protocol_type, protocol_name = excluded.protocol_name,"
    "  leader_id = excluded.leader_id, state_since_ms = excluded.state_since_ms,"
    "  written_ms = excluded.written_ms),"
    " d AS (DELETE FROM group_snapshot_members"
    "  WHERE group_id = $1 AND position >= cardinality($8::text[]))"
    " INSERT INTO group_snapshot_members (group_id, position, member_id, group_instance_id,"
    "  client_id, client_host, rebalance_timeout_ms, session_timeout_ms, subscription,"
    "  assignment)"
    " SELECT $1, k.n - 1, k.mid, k.iid, k.cid, k.host, k.rt, k.st, k.sub, k.asg"
    " FROM unnest($8::text[], $9::text[], $10::text[], $11::text[], $12::integer[],"
    "  $13::integer[], $14::bytea[], $15::bytea[])"
    "  WITH ORDINALITY AS k(mid, iid, cid, host, rt, st, sub, asg, n)"
    " ON CONFLICT (group_id, position) DO UPDATE SET member_id = excluded.member_id,"
    "  group_instance_id = excluded.group_instance_id, client_id = excluded.client_id,"
    "  client_host = excluded.client_host,"
    "  rebalance_timeout_ms = excluded.rebalance_timeout_ms,"
    "  session_timeout_ms = excluded.session_timeout_ms,"
    "  subscription = excluded.subscription, assignment = excluded.assignment"
)
_LOAD_GROUP = (
    "SELECT s.generation_id, s.protocol_type, s.protocol_name, s.leader_id,"
    " s.state_since_ms, s.written_ms, m.member_id, m.group_instance_id, m.client_id,"
    " m.client_host, m.rebalance_timeout_ms, m.session_timeout_ms, m.subscription,"
    " m.assignment"
    " FROM group_snapshots s LEFT JOIN group_snapshot_members m ON m.group_id = s.group_id"
    " WHERE s.group_id = $1 ORDER BY m.position"
)
_DELETE_SNAPSHOTS = (
    "WITH m AS (DELETE FROM group_snapshot_members WHERE group_id = ANY($1::text[]))"
    " DELETE FROM group_snapshots WHERE group_id = ANY($1::text[])"
)
_GROUPS_WITH_SNAPSHOTS = "SELECT group_id FROM group_snapshots ORDER BY 1"
_DELETE_TOPICS = "DELETE FROM group_offsets WHERE topic_id = ANY($1::uuid[])"
_COMMITTED_BEFORE = (
    "SELECT DISTINCT group_id FROM group_offsets WHERE commit_timestamp < $1 ORDER BY 1"
)
_EXPIRE = (
    "WITH d AS (DELETE FROM group_offsets WHERE group_id = ANY($1::text[])"
    " AND commit_timestamp < $2 RETURNING 1) SELECT count(*) FROM d"
)


def _offset(row: asyncpg.Record) -> CommittedOffset:
    # asyncpg hands back its own UUID subclass; keep the plain one callers compare with.
    return CommittedOffset(UUID(bytes=row[1].bytes), row[2], row[3], row[4], row[5], row[6])


class PostgresGroupStore(PoolUser, GroupStore):
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
            max_size=4,
            command_timeout=command_timeout,
            connect_timeout=connect_timeout,
        )

    @property
    def pool(self) -> PostgresPool:
        return self._pool

    async def commit_offsets(self, group_id: str, offsets: Sequence[CommittedOffset]) -> None:
        # One row per key (the last given wins): ON CONFLICT cannot update a row twice.
        latest = {o.key: o for o in offsets}
        if not latest:
            return
        rows = list(latest.values())
        await self._pool.fetch(
            _COMMIT,
            group_id,
            [o.topic_id for o in rows],
            [o.partition for o in rows],
            [o.offset for o in rows],
            [o.leader_epoch for o in rows],
            [o.metadata for o in rows],
            [o.commit_timestamp for o in rows],
            write=True,
        )

    async def fetch_offsets(
        self, requests: Mapping[str, Sequence[OffsetKey] | None]
    ) -> dict[str, list[CommittedOffset]]:
        whole = [g for g, keys in requests.items() if keys is None]
        singles = sorted(
            {
                (g, k.topic_id, k.partition)
                for g, keys in requests.items()
                if keys is not None
                for k in keys
            }
        )
        if not whole and not singles:
            return {}
        rows = await self._pool.fetch(
            _FETCH,
            whole,
            [s[0] for s in singles],
            [s[1] for s in singles],
            [s[2] for s in singles],
            write=False,
        )
        out: dict[str, list[CommittedOffset]] = {}
        for row in rows:
            out.setdefault(row[0], []).append(_offset(row))
        for offsets in out.values():
            offsets.sort(key=lambda o: (o.topic_id.bytes, o.partition))
        return out

    async def groups_with_offsets(self, group_ids: Sequence[str] | None = None) -> list[str]:
        rows = await self._pool.fetch(
            _GROUPS_WITH_OFFSETS, None if group_ids is None else list(group_ids), write=False
        )
        return [r[0] for r in rows]

    async def delete_offsets(self, group_id: str, keys: Sequence[OffsetKey]) -> None:
        if keys:
            await self._pool.fetch(
                _DELETE_OFFSETS,
                group_id,
                [k.topic_id for k in keys],
                [k.partition for k in keys],
                write=True,
            )

    async def delete_groups(self, group_ids: Sequence[str]) -> list[str]:
        if not group_ids:
            return []
        rows = await self._pool.fetch(_DELETE_GROUPS, sorted(set(group_ids)), write=True)
        return [r[0] for r in rows]

    async def store_group(self, snapshot: GroupSnapshot) -> None:
        m = snapshot.members
        await self._pool.fetch(
            _STORE_GROUP,
            snapshot.group_id,
            snapshot.generation_id,
            snapshot.protocol_type,
            snapshot.protocol_name,
            snapshot.leader_id,
            snapshot.state_since_ms,
            snapshot.written_ms,
            [x.member_id for x in m],
            [x.group_instance_id for x in m],
            [x.client_id for x in m],
            [x.client_host for x in m],
            [x.rebalance_timeout_ms for x in m],
            [x.session_timeout_ms for x in m],
            [x.subscription for x in m],
            [x.assignment for x in m],
            write=True,
        )

    async def load_group(self, group_id: str) -> GroupSnapshot | None:
        rows = await self._pool.fetch(_LOAD_GROUP, group_id, write=False)
        if not rows:
            return None
        first = rows[0]
        members = tuple(
            MemberSnapshot(r[6], r[7], r[8], r[9], r[10], r[11], bytes(r[12]), bytes(r[13]))
            for r in rows
            if r[6] is not None  # the LEFT JOIN's row of a group without members
        )
        return GroupSnapshot(
            group_id, first[0], first[1], first[2], first[3], first[4], first[5], members
        )

    async def delete_group_snapshots(self, group_ids: Sequence[str]) -> None:
        if group_ids:
            await self._pool.fetch(_DELETE_SNAPSHOTS, sorted(set(group_ids)), write=True)

    async def groups_with_snapshots(self) -> list[str]:
        rows = await self._pool.fetch(_GROUPS_WITH_SNAPSHOTS, write=False)
        return [r[0] for r in rows]

    async def delete_topics(self, topic_ids: Sequence[UUID]) -> None:
        if topic_ids:
            await self._pool.fetch(_DELETE_TOPICS, list(topic_ids), write=True)

    async def groups_committed_before(self, cutoff_ms: int) -> list[str]:
        rows = await self._pool.fetch(_COMMITTED_BEFORE, cutoff_ms, write=False)
        return [r[0] for r in rows]

    async def expire_offsets(self, group_ids: Sequence[str], cutoff_ms: int) -> int:
        if not group_ids:
            return 0
        row = await self._pool.fetchrow(_EXPIRE, sorted(set(group_ids)), cutoff_ms, write=True)
        return int(row[0]) if row is not None else 0
