"""The schema step that ends markers of classic partitions in diskless logs (postgres 0011,
sqlite 8): a log sealed for classic before it may hold markers of the classic partition's
transactions past its boundary (txn_complete then wrote one for every partition and the
seal let them through); they go, and the log ends at its boundary again."""

from __future__ import annotations

import sqlite3
from collections.abc import Awaitable, Callable
from pathlib import Path
from uuid import UUID

import pytest

from storage.coordinator import BatchCoordinator, BatchToCommit, FindRequest
from storage.coordinator import sqlite as sqlite_coordinator
from storage.coordinator.postgres import PostgresCoordinator
from storage.coordinator.sqlite import SqliteCoordinator
from storage.partition_key import PartitionKey
from storage.postgres.pool import PostgresPool
from storage.postgres.schema import load_migrations
from storage.transactions import NONE, CompleteRequest, Marker

NOW = 1_700_000_000_000
BIG = 1 << 62
SEALED = PartitionKey(UUID(int=0x5E), 0)  # migrated to classic, sealed at 1
OTHER = PartitionKey(UUID(int=0xD1), 0)  # diskless


# Columns of migrations after the legacy schema that today's code reads: (name, default).
LATER_COLUMNS = (("last_producer_epoch", -1), ("completions", 0))


def plain(k: PartitionKey) -> BatchToCommit:
    return BatchToCommit(
        topic_id=k.topic_id,
        partition=k.partition,
        byte_offset=0,
        byte_size=100,
        record_count=1,
        max_timestamp=1000,
        timestamp_type=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
    )


async def end_txn(c: BatchCoordinator, tid: str, object_key: str, *parts: PartitionKey) -> None:
    """A transaction over ``parts`` ended as before: a marker in every partition's log."""
    init = await c.txn_init(tid, 60_000, -1, -1, NOW)
    assert await c.txn_add(tid, init.producer_id, init.producer_epoch, parts, [], NOW) == NONE
    markers = [Marker(k.topic_id, k.partition, 60 * i, 60, NOW) for i, k in enumerate(parts)]
    done = await c.txn_complete(CompleteRequest(
        tid, init.producer_id, init.producer_epoch, True, False, object_key, 60 * len(parts),
        7, markers, NOW,
    ))  # fmt: skip
    assert done.error == NONE and done.registered


async def legacy_state(c: BatchCoordinator, seal: Callable[[str], Awaitable[None]]) -> None:
    await c.create_logs([SEALED, OTHER])
    await c.commit_file("data", 100, 7, [plain(SEALED)], NOW)
    # One object with markers of both logs, one with a marker of the sealed log only; the
    # seal at 1 before them, as a migration to classic recorded it (the row is written
    # last only because today's code refuses these markers).
    await end_txn(c, "a", "shared", OTHER, SEALED)
    await end_txn(c, "b", "phantom", SEALED)
    await seal("INSERT INTO sealed_logs (topic_id, partition, boundary) VALUES")
    assert (await c.log_info([SEALED]))[0].high_watermark == 3


async def assert_cleaned(c: BatchCoordinator) -> None:
    [sealed, other] = await c.log_info([SEALED, OTHER])
    assert (sealed.log_start_offset, sealed.high_watermark, sealed.byte_size) == (0, 1, 100)
    assert (other.high_watermark, other.byte_size) == (1, 60)
    reqs = [FindRequest(k.topic_id, k.partition, 0, BIG) for k in (SEALED, OTHER)]
    found = await c.find_batches(reqs, BIG, read_committed=False)
    assert [[(b.base_offset, b.object_key) for b in f.batches] for f in found] == [
        [(0, "data")],
        [(0, "shared")],
    ]
    # The object holding only markers past the seal is unreferenced now.
    assert [f.object_key for f in await c.files_to_delete(BIG, 10)] == ["phantom"]


async def test_sqlite_drops_markers_past_a_seal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = str(tmp_path / "coordinator.db")
    monkeypatch.setattr(sqlite_coordinator, "MIGRATIONS", sqlite_coordinator.MIGRATIONS[:7])
    old = SqliteCoordinator(path)
    await old.start()

    async def seal(insert: str) -> None:
        conn = sqlite3.connect(path, timeout=30)
        try:
            conn.execute(f"{insert} (?, ?, 1)", (SEALED.topic_id.bytes, SEALED.partition))
            conn.commit()
        finally:
            conn.close()

    def alter(statement: str) -> None:
        conn = sqlite3.connect(path, timeout=30)
        try:
            conn.execute(statement)
            conn.commit()
        finally:
            conn.close()

    # Today's transaction code reads columns of later migrations (9, 10): present while the
    # legacy state is written, gone again before the upgrade, as in a version-7 database.
    for column, default in LATER_COLUMNS:
        alter(f"ALTER TABLE transactions ADD COLUMN {column} INTEGER NOT NULL DEFAULT {default}")
    try:
        await legacy_state(old, seal)
    finally:
        await old.close()
    for column, _default in LATER_COLUMNS:
        alter(f"ALTER TABLE transactions DROP COLUMN {column}")
    monkeypatch.undo()
    new = SqliteCoordinator(path)
    await new.start()
    try:
        await assert_cleaned(new)
    finally:
        await new.close()


async def test_postgres_drops_markers_past_a_seal(postgres_dsn: str) -> None:
    pool = PostgresPool(postgres_dsn)
    await pool.start()
    migrations = load_migrations()
    assert migrations[10].name == "diskless_markers_only"
    await pool.migrate(migrations[:10])
    old = PostgresCoordinator(pool)  # on the migrated pool: no further migration

    async def seal(insert: str) -> None:
        await pool.fetch(f"{insert} ($1, $2, 1)", SEALED.topic_id, SEALED.partition, write=True)

    # As in the SQLite test: today's functions read columns of later migrations (0013, 0014).
    for column, default in LATER_COLUMNS:
        await pool.fetch(
            f"ALTER TABLE transactions ADD COLUMN {column} integer DEFAULT {default}", write=True
        )
    try:
        await old.start()
        await legacy_state(old, seal)
        for column, _default in LATER_COLUMNS:
            await pool.fetch(f"ALTER TABLE transactions DROP COLUMN {column}", write=True)
    finally:
        await old.close()
        await pool.close()
    new = PostgresCoordinator(postgres_dsn)
    await new.start()
    try:
        await assert_cleaned(new)
    finally:
        await new.close()
