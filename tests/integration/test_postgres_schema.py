"""The PostgreSQL schema as table migrations plus one current text per function
(storage.postgres.schema): a database made by the earlier code, whose migrations defined
and redefined the functions themselves, upgrades to exactly the schema a new database
gets, and keeps working with its data.

tests/fixtures/postgres_v11/ holds migrations 1-11 as that code shipped them.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import pytest

from storage.coordinator import BatchToCommit, FindRequest
from storage.coordinator.postgres import PostgresCoordinator
from storage.partition_key import PartitionKey
from storage.postgres.pool import PostgresPool
from storage.postgres.schema import Migration, load_functions, load_migrations
from storage.transactions import NONE, ONGOING, CompleteRequest, Marker
from tests.fixtures.postgres import PostgresServer

OLD = Path(__file__).parent.parent / "fixtures" / "postgres_v11"
NOW = 1_700_000_000_000
BIG = 1 << 62
P0 = PartitionKey(UUID(int=0xA0), 0)
P1 = PartitionKey(UUID(int=0xA1), 0)


def old_migrations() -> list[Migration]:
    found = []
    for path in sorted(OLD.glob("*.sql")):
        version, name = path.stem.split("_", 1)
        found.append(Migration(int(version), name, path.read_text(encoding="utf-8")))
    return found


async def schema(dsn: str) -> dict[str, Any]:
    """What a database's schema is made of, comparable across databases."""
    conn = await asyncpg.connect(dsn)
    try:
        functions = await conn.fetch(
            "SELECT pg_get_functiondef(p.oid) FROM pg_proc p"
            " WHERE p.pronamespace = 'public'::regnamespace ORDER BY 1"
        )
        triggers = await conn.fetch(
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE NOT tgisinternal ORDER BY 1"
        )
        columns = await conn.fetch(
            "SELECT table_name, column_name, data_type, is_nullable, column_default,"
            " collation_name FROM information_schema.columns WHERE table_schema = 'public'"
            " ORDER BY 1, 2"
        )
        indexes = await conn.fetch(
            "SELECT indexdef FROM pg_indexes WHERE schemaname = 'public' ORDER BY 1"
        )
        constraints = await conn.fetch(
            "SELECT conrelid::regclass::text, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE connamespace = 'public'::regnamespace ORDER BY 1, 2"
        )
        versions = await conn.fetch("SELECT version, name FROM schema_migrations ORDER BY 1")
    finally:
        await conn.close()
    return {
        "functions": [r[0] for r in functions],
        "triggers": [r[0] for r in triggers],
        "columns": [tuple(r) for r in columns],
        "indexes": [r[0] for r in indexes],
        "constraints": [tuple(r) for r in constraints],
        "migrations": [tuple(r) for r in versions],
    }


@pytest.fixture
async def fresh_schema(postgres_server: PostgresServer) -> AsyncIterator[dict[str, Any]]:
    dsn = await postgres_server.new_database()
    try:
        c = PostgresCoordinator(dsn)
        await c.start()
        await c.close()
        yield await schema(dsn)
    finally:
        await postgres_server.drop_database(dsn)


async def old_database(server: PostgresServer, upto: int) -> tuple[str, PostgresPool]:
    """A database as the earlier code left it after its migrations 1..``upto`` (the
    functions then defined by those migrations, none of the new texts)."""
    dsn = await server.new_database()
    pool = PostgresPool(dsn)
    await pool.start()
    await pool.migrate(old_migrations()[:upto], functions=[])
    return dsn, pool


async def test_the_functions_have_one_text_each() -> None:
    functions = load_functions()
    assert len({f.name for f in functions}) == len(functions)
    for f in functions:
        # Each file defines its own function, replaceably; the migrations define none.
        assert f"CREATE OR REPLACE FUNCTION {f.name}(" in f.sql
        assert f.sql.count("CREATE OR REPLACE FUNCTION") == 1, f.name
    for m in load_migrations():
        assert "FUNCTION sluice_" not in m.sql.replace("DROP FUNCTION IF EXISTS sluice_", ""), (
            m.name
        )


@pytest.mark.parametrize("upto", [11, 7, 4])
async def test_an_old_database_upgrades_to_the_fresh_schema(
    postgres_server: PostgresServer, fresh_schema: dict[str, Any], upto: int
) -> None:
    dsn, pool = await old_database(postgres_server, upto)
    await pool.close()
    try:
        c = PostgresCoordinator(dsn)
        await c.start()
        await c.close()
        assert await schema(dsn) == fresh_schema
    finally:
        await postgres_server.drop_database(dsn)


async def test_an_old_database_keeps_working_with_its_data(
    postgres_server: PostgresServer,
) -> None:
    dsn, pool = await old_database(postgres_server, 11)
    old = PostgresCoordinator(pool)  # on the migrated pool: the old functions as they are
    try:
        await old.start()
        await old.create_logs([P0, P1])
        [done] = await old.commit_file("data", 100, 7, [plain(P0)], NOW)
        assert done.error == NONE
        # A transaction left open across the upgrade: P0 diskless, P1 classic.
        init = await old.txn_init("tx", 60_000, -1, -1, NOW)
        assert await old.txn_add("tx", init.producer_id, 0, [P0, P1], [], NOW) == NONE
        [done] = await old.commit_file("txn", 50, 7, [plain(P0, init.producer_id)], NOW)
        assert done.error == NONE
    finally:
        await old.close()
        await pool.close()

    new = PostgresCoordinator(dsn)
    await new.start()
    try:
        [state] = await new.txn_get(["tx"])
        assert state is not None and state.state == ONGOING
        marker = Marker(P0.topic_id, P0.partition, 0, 60, NOW)
        ended = await new.txn_complete(
            CompleteRequest("tx", init.producer_id, 0, True, False, "markers", 60, 7, [marker],
                            NOW, pending=[P1])
        )  # fmt: skip
        assert ended.error == NONE and ended.offsets == [2]
        # The next transaction waits for the classic partition's pending marker.
        again = await new.txn_init("tx", 60_000, init.producer_id, 0, NOW)
        assert again.error == 51
        await new.txn_markers_written("tx", init.producer_id, 0, [P1])
        again = await new.txn_init("tx", 60_000, init.producer_id, 0, NOW)
        assert (again.error, again.producer_epoch) == (NONE, 1)

        found = await new.find_batches([FindRequest(P0.topic_id, 0, 0, BIG)], BIG)
        assert [(b.object_key, b.base_offset) for b in found[0].batches] == [
            ("data", 0),
            ("txn", 1),
            ("markers", 2),
        ]
    finally:
        await new.close()
        await postgres_server.drop_database(dsn)


def plain(k: PartitionKey, producer_id: int = -1) -> BatchToCommit:
    return BatchToCommit(
        topic_id=k.topic_id,
        partition=k.partition,
        byte_offset=0,
        byte_size=50,
        record_count=1,
        max_timestamp=1000,
        timestamp_type=0,
        producer_id=producer_id,
        producer_epoch=0 if producer_id >= 0 else -1,
        base_sequence=0 if producer_id >= 0 else -1,
        transactional=producer_id >= 0,
    )
