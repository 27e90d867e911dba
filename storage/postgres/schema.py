"""The PostgreSQL schema: versioned table migrations, then one current text per function.

* ``storage/postgres/migrations/NNNN_name.sql``: tables, indexes and data fixes, applied
  once each, in order, recorded in ``schema_migrations``. A migration never defines a
  function: one that changes a function's signature or return type drops the old one
  (DROP FUNCTION IF EXISTS), and one that retires a function drops it.
* ``storage/postgres/functions/NAME.sql``: the current definition of function NAME
  (CREATE OR REPLACE FUNCTION, and the trigger that calls it if any), applied after the
  migrations. A change to a function is a diff of its file. ``schema_functions`` keeps a
  digest of each text applied, so a broker start replaces only what changed (or all of
  them after a migration ran, which may have dropped something they rely on).

Everything runs in one transaction under a transaction-scoped advisory lock, so brokers
starting together apply each step exactly once, and a failure leaves the schema as it was.
"""

from __future__ import annotations

import hashlib
import logging
import re
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources

import asyncpg

log = logging.getLogger(__name__)

# pg_advisory_xact_lock key serialising migrations ("sluice" in ASCII). Advisory locks
# are per database, so several Sluice databases on one server do not contend.
MIGRATION_LOCK_KEY = 0x736C75696365
MIGRATIONS_PACKAGE = "storage.postgres.migrations"
FUNCTIONS_PACKAGE = "storage.postgres.functions"
_MIGRATION_FILE = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
_FUNCTION_FILE = re.compile(r"^(sluice_[a-z0-9_]+)\.sql$")


@dataclass(frozen=True, slots=True)
class Migration:
    version: int
    name: str
    sql: str


@dataclass(frozen=True, slots=True)
class Function:
    name: str
    sql: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations() -> list[Migration]:
    """The packaged migrations, in version order."""
    found = []
    for entry in resources.files(MIGRATIONS_PACKAGE).iterdir():
        match = _MIGRATION_FILE.match(entry.name)
        if match:
            found.append(Migration(int(match[1]), match[2], entry.read_text(encoding="utf-8")))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if versions != list(range(1, len(found) + 1)):
        raise RuntimeError(f"PostgreSQL migrations must be numbered 1..n, found {versions}")
    return found


def load_functions() -> list[Function]:
    """The packaged functions, by name."""
    found = []
    for entry in resources.files(FUNCTIONS_PACKAGE).iterdir():
        match = _FUNCTION_FILE.match(entry.name)
        if match:
            found.append(Function(match[1], entry.read_text(encoding="utf-8")))
    return sorted(found, key=lambda f: f.name)


async def apply(
    conn: asyncpg.Connection,
    migrations: Sequence[Migration],
    functions: Sequence[Function],
    timeout: float,
) -> list[int]:
    """The migrations not applied yet, then the functions whose text changed; returns the
    versions of the migrations applied."""
    async with conn.transaction():
        # Taken before even looking: concurrent CREATE TABLE IF NOT EXISTS can fail.
        await conn.execute("SELECT pg_advisory_xact_lock($1)", MIGRATION_LOCK_KEY, timeout=timeout)
        applied = await _migrate(conn, migrations, timeout)
        replaced = await _replace_functions(conn, functions, bool(applied), timeout)
    if applied:
        log.info("applied PostgreSQL migrations %s", applied)
    if replaced:
        log.info("applied PostgreSQL functions %s", replaced)
    return applied


async def _migrate(
    conn: asyncpg.Connection, migrations: Sequence[Migration], timeout: float
) -> list[int]:
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations ("
        " version integer PRIMARY KEY,"
        " name text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())",
        timeout=timeout,
    )
    applied = {r[0] for r in await conn.fetch("SELECT version FROM schema_migrations")}
    known = {m.version for m in migrations}
    if applied - known:
        raise RuntimeError(
            f"PostgreSQL schema has migrations {sorted(applied - known)} that this code "
            "does not know: it is newer than this broker"
        )
    applied_now: list[int] = []
    for m in migrations:
        if m.version in applied:
            continue
        if _has_statements(m.sql):  # one whose function moved out may be comments only
            await conn.execute(m.sql, timeout=timeout)
        await conn.execute(
            "INSERT INTO schema_migrations (version, name) VALUES ($1, $2)",
            m.version,
            m.name,
            timeout=timeout,
        )
        applied_now.append(m.version)
    return applied_now


def _has_statements(sql: str) -> bool:
    return any(line.strip() and not line.strip().startswith("--") for line in sql.splitlines())


async def _replace_functions(
    conn: asyncpg.Connection, functions: Sequence[Function], all_of_them: bool, timeout: float
) -> list[str]:
    await conn.execute(
        "CREATE TABLE IF NOT EXISTS schema_functions ("
        " name text PRIMARY KEY,"
        " digest text NOT NULL,"
        " applied_at timestamptz NOT NULL DEFAULT now())",
        timeout=timeout,
    )
    current = {r[0]: r[1] for r in await conn.fetch("SELECT name, digest FROM schema_functions")}
    replaced: list[str] = []
    for f in functions:
        if not all_of_them and current.get(f.name) == f.digest:
            continue
        await conn.execute(f.sql, timeout=timeout)
        await conn.execute(
            "INSERT INTO schema_functions (name, digest) VALUES ($1, $2)"
            " ON CONFLICT (name) DO UPDATE SET digest = excluded.digest, applied_at = now()",
            f.name,
            f.digest,
            timeout=timeout,
        )
        replaced.append(f.name)
    # The digest of a function no longer shipped (a migration dropped it, as 0018 did
    # sluice_notify_logs) would otherwise stay, naming a function that is not there.
    await conn.execute(
        "DELETE FROM schema_functions WHERE name <> ALL($1::text[])",
        [f.name for f in functions],
        timeout=timeout,
    )
    return replaced
