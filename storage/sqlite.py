"""SQLite plumbing shared by the embedded stores (batch coordinator, catalog, group store,
tiered segments' metadata): one worker thread owning one connection, WAL and
``synchronous=FULL``, versioned migrations per component, one transaction per call.

sqlite3 calls block, so every database call of a store runs on ONE dedicated worker
thread that owns the only connection (:class:`SqliteThread`). Serialising on one thread
also means no two transactions of this process ever contend for the write lock; ``BEGIN
IMMEDIATE`` still matters for other processes (jobs reading or merging the same file).
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")


class SqliteThread:
    """One worker thread owning one sqlite3 connection.

    The connection is opened lazily on the worker thread (sqlite3 objects must stay on
    the thread that made them), in autocommit mode so transactions are explicit, WAL
    so readers in other processes never block the writer, and ``synchronous=FULL``
    because an acknowledged produce must survive power loss.
    """

    def __init__(
        self,
        path: str,
        component: str,
        migrations: Sequence[Sequence[str]],
        thread_name: str,
    ) -> None:
        self._path = path
        self._component = component
        self._migrations = migrations
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=thread_name)
        self._conn: sqlite3.Connection | None = None
        self._closed = False

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        if self._closed:
            raise RuntimeError("sqlite connection is closed")
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._call, fn, args)

    async def close(self) -> None:
        if self._closed:
            return
        loop = asyncio.get_running_loop()
        await loop.run_in_executor(self._executor, self._close_conn)
        self._closed = True
        self._executor.shutdown(wait=False)

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        conn = self._conn if self._conn is not None else self._open()
        return fn(conn, *args)

    def _open(self) -> sqlite3.Connection:
        conn = sqlite3.connect(
            self._path, isolation_level=None, timeout=30.0, cached_statements=256
        )
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        migrate(conn, self._component, self._migrations)
        self._conn = conn
        return conn

    def _close_conn(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class SqliteUser:
    """A backend on one SqliteThread (the coordinator, the catalog, the group store): start()
    opens the connection, which applies the component's migrations; ``_write``/``_read`` run
    one transaction on the thread (the SQLite twin of storage.postgres.pool.PoolUser)."""

    def __init__(
        self, path: str, component: str, migrations: Sequence[Sequence[str]], thread_name: str
    ) -> None:
        self._db = SqliteThread(path, component, migrations, thread_name)

    async def start(self) -> None:
        await self._db.run(lambda conn: None)

    async def close(self) -> None:
        await self._db.close()

    async def _write(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._db.run(run_transaction, True, fn, *args)

    async def _read(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._db.run(run_transaction, False, fn, *args)


def migrate(conn: sqlite3.Connection, component: str, migrations: Sequence[Sequence[str]]) -> None:
    """Apply the migrations past the stored version, all in one transaction.

    ``schema_version`` is keyed by component so the catalog and the coordinator can
    share one database file if a deployment wants that.
    """
    conn.execute("BEGIN IMMEDIATE")
    try:
        conn.execute(
            "CREATE TABLE IF NOT EXISTS schema_version ("
            " component TEXT PRIMARY KEY, version INTEGER NOT NULL)"
        )
        row = conn.execute(
            "SELECT version FROM schema_version WHERE component = ?", (component,)
        ).fetchone()
        current = row[0] if row else 0
        if current > len(migrations):
            raise RuntimeError(
                f"{component} schema version {current} is newer than this code ({len(migrations)})"
            )
        for statements in migrations[current:]:
            for statement in statements:
                conn.execute(statement)
        conn.execute(
            "INSERT INTO schema_version (component, version) VALUES (?, ?)"
            " ON CONFLICT (component) DO UPDATE SET version = excluded.version",
            (component, len(migrations)),
        )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def run_transaction(conn: sqlite3.Connection, write: bool, fn: Callable[..., T], *args: Any) -> T:
    # Read-only methods use a deferred BEGIN: a consistent snapshot without taking the
    # write lock from other processes.
    conn.execute("BEGIN IMMEDIATE" if write else "BEGIN")
    try:
        result = fn(conn.cursor(), *args)
        conn.execute("COMMIT")
        return result
    except BaseException:
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise
