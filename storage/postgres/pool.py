"""One asyncpg pool shared by the PostgreSQL coordinator and catalog.

It owns three things the backends must not each get subtly different:

* error mapping: connection refused or lost, pool acquire timeout, command timeout and
  server shutdown become :class:`CoordinatorUnavailable`, with ``outcome_unknown`` set
  when a write had been sent (it may have committed); everything else propagates as is;
* the schema: :meth:`PostgresPool.migrate` applies storage.postgres.schema (the
  versioned table migrations, then the functions) once per pool;
* round-trip accounting: every statement goes through :meth:`PostgresPool.fetch`, which
  counts it and calls :attr:`PostgresPool.on_query` (tests assert one round trip per
  operation with it).

asyncpg pools reconnect per connection: a connection found closed at acquire is
replaced, so the pool recovers by itself when PostgreSQL comes back.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from typing import Any

import asyncpg

from storage.coordinator import CoordinatorUnavailable
from storage.outage import OutageLog
from storage.postgres.schema import Function, Migration, apply, load_functions, load_migrations

log = logging.getLogger(__name__)

# SQLSTATEs that mean "the server is not there for us right now": class 08 connection
# exceptions, class 53 insufficient resources (too many connections, disk full),
# admin/crash shutdown, cannot connect now (starting up), query cancelled (timeouts).
_UNAVAILABLE_CLASSES = ("08", "53")
_UNAVAILABLE_STATES = frozenset({"57P01", "57P02", "57P03", "57014"})


def is_unavailable(exc: BaseException) -> bool:
    """Whether ``exc`` says PostgreSQL is unreachable or gone, rather than that the
    statement was wrong."""
    if isinstance(exc, OSError | TimeoutError | asyncpg.PostgresConnectionError):
        return True
    if isinstance(exc, asyncpg.PostgresError):
        state = exc.sqlstate or ""
        return state.startswith(_UNAVAILABLE_CLASSES) or state in _UNAVAILABLE_STATES
    return False


def lost_connection(exc: BaseException) -> bool:
    """Whether ``exc`` tells a statement's connection died under it: PostgreSQL gone
    (``is_unavailable``), or asyncpg's InternalClientError, the same death seen late (a
    FATAL that reached the connection just before its EOF leaves its protocol mid-error,
    and the next statement on it fails so: "cannot switch to state 12")."""
    return is_unavailable(exc) or isinstance(exc, asyncpg.InternalClientError)


class _QuietPoolFloor(logging.Filter):
    """asyncpg's pool logs "Failed to restore the pool connection floor; retrying" with a
    traceback each time it cannot reopen its ``min_size`` connections: during an outage,
    once per released connection. The outage is what the broker's tasks report
    (storage.outage); this keeps the first as one line, without the traceback, and drops
    the rest until a statement succeeds again."""

    def __init__(self) -> None:
        super().__init__()
        self.said = False

    def filter(self, record: logging.LogRecord) -> bool:
        if "connection floor" not in str(record.msg):
            return True
        if self.said:
            return False
        self.said = True
        cause = record.exc_info[1] if record.exc_info else None
        record.msg, record.args = "%s (%r); said once per outage", (record.getMessage(), cause)
        record.exc_info, record.exc_text = None, None
        return True


_POOL_FLOOR = _QuietPoolFloor()
logging.getLogger("asyncpg.pool").addFilter(_POOL_FLOOR)


def _closed(conn: Any) -> bool:
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:
        # A pool proxy whose connection closed is detached from it at once.
        return True


def _terminate(conn: Any) -> None:
    if not _closed(conn):
        conn.terminate()


async def _keep_session(conn: asyncpg.Connection) -> None:
    """Pool reset hook: nothing to reset.

    asyncpg's default reset runs ``SELECT pg_advisory_unlock_all(); CLOSE ALL; ...``
    at every release: one more round trip per operation. We never leave session state
    behind (no LISTEN, no SET, only transaction-scoped advisory locks), and asyncpg
    still rolls back a transaction left open before calling this.
    """


class PostgresPool:
    """An asyncpg pool with Sluice's error mapping, migrations and accounting.

    ``start()`` and ``close()`` are counted: each user (the coordinator, the catalog,
    a test) starts it once and closes it once, and the connections close with the
    last user. So one pool can be handed to both backends of a broker.
    """

    def __init__(
        self,
        dsn: str,
        *,
        min_size: int = 1,
        max_size: int = 10,
        command_timeout: float = 15.0,
        connect_timeout: float = 5.0,
        acquire_timeout: float | None = None,
    ) -> None:
        self.dsn = dsn
        self.min_size = min_size
        self.max_size = max_size
        self.command_timeout = command_timeout
        self.connect_timeout = connect_timeout
        # Waiting for a free connection (or a new one) no longer than a statement may take.
        self.acquire_timeout = command_timeout if acquire_timeout is None else acquire_timeout
        self._pool: asyncpg.Pool | None = None
        self._users = 0
        self._start_lock = asyncio.Lock()
        self._migrated = False
        self.queries = 0
        # Called with the SQL of every statement sent (tests count round trips with it).
        self.on_query: Callable[[str], None] | None = None

    async def start(self) -> None:
        async with self._start_lock:
            if self._pool is None:
                self._pool = await self._create()
            self._users += 1

    async def _create(self) -> asyncpg.Pool:
        try:
            return await asyncpg.create_pool(
                self.dsn,
                min_size=self.min_size,
                max_size=self.max_size,
                command_timeout=self.command_timeout,
                timeout=self.connect_timeout,
                reset=_keep_session,
                server_settings={
                    "application_name": "sluice",
                    # The functions rely on READ COMMITTED: a statement after a lock
                    # wait must see what the lock holder committed.
                    "default_transaction_isolation": "read committed",
                },
            )
        except Exception as e:
            if is_unavailable(e):
                raise CoordinatorUnavailable(f"cannot connect to PostgreSQL: {e!r}") from e
            raise

    async def close(self) -> None:
        """Release one user's hold; the last one closes the connections."""
        if self._users == 0:
            return
        self._users -= 1
        if self._users == 0 and self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.close()

    def _require(self) -> asyncpg.Pool:
        if self._pool is None:
            raise RuntimeError("PostgresPool is not started")
        return self._pool

    # ---------------------------------------------------------------- statements

    async def fetch(self, sql: str, *args: Any, write: bool) -> list[asyncpg.Record]:
        """Run one statement (one round trip) and return its rows.

        ``write`` says whether the statement changes anything: if the connection dies
        or the command times out after it was sent, the write may have committed, so
        the CoordinatorUnavailable raised says ``outcome_unknown``.
        """
        pool = self._require()
        try:
            conn = await pool.acquire(timeout=self.acquire_timeout)
        except Exception as e:
            # Nothing was sent: no pooled connection was free in time, or a new one
            # could not be opened.
            if is_unavailable(e):
                raise CoordinatorUnavailable(f"PostgreSQL unavailable: {e!r}") from e
            raise
        try:
            self.queries += 1
            if self.on_query is not None:
                self.on_query(sql)
            rows = await conn.fetch(sql, *args)
            _POOL_FLOOR.said = False  # the server answers: a later outage is new
            return rows
        except Exception as e:
            if isinstance(e, asyncpg.InterfaceError) and _closed(conn):
                # asyncpg noticed the dead connection before sending anything.
                raise CoordinatorUnavailable(f"PostgreSQL connection lost: {e!r}") from e
            if lost_connection(e):
                if not isinstance(e, TimeoutError):
                    # The server said FATAL (shutdown, terminated) or the socket broke:
                    # drop the connection, the pool opens a new one at the next acquire.
                    # (A timed-out statement is cancelled by asyncpg instead, which keeps
                    # the connection usable.)
                    _terminate(conn)
                raise CoordinatorUnavailable(
                    f"PostgreSQL failed during a statement: {e!r}", outcome_unknown=write
                ) from e
            raise
        finally:
            try:
                await pool.release(conn)
            except Exception:
                # asyncpg terminates a connection it cannot release cleanly; the
                # statement's own outcome (result or exception) is what matters here, and
                # what the caller reports: this is the same outage seen once more.
                log.debug("releasing a PostgreSQL connection failed", exc_info=True)

    async def fetchrow(self, sql: str, *args: Any, write: bool) -> asyncpg.Record | None:
        rows = await self.fetch(sql, *args, write=write)
        return rows[0] if rows else None

    # ---------------------------------------------------------------- notifications

    async def listen(
        self,
        channel: str,
        on_payload: Callable[[str], None],
        on_gap: Callable[[], None],
        retry_s: float = 1.0,
    ) -> None:
        """Call ``on_payload`` for each NOTIFY on ``channel`` until cancelled.

        LISTEN needs a connection of its own (outside the pool: a pooled one would be
        reset and handed out). Whenever it is (re)established ``on_gap`` runs, since
        notifications sent while it was down are lost for good.
        """
        # While the server is down every retry fails: said once, and once when back.
        outage = OutageLog(f"PostgreSQL LISTEN {channel}", log, is_unavailable)
        while True:
            conn: asyncpg.Connection | None = None
            listening = False
            lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            try:
                with outage:
                    conn = await asyncpg.connect(self.dsn, timeout=self.connect_timeout)
                    conn.add_termination_listener(functools.partial(_resolve, lost))
                    await conn.add_listener(
                        channel, lambda _c, _pid, _ch, payload: on_payload(payload)
                    )
                    on_gap()
                    listening = True
                if listening:
                    await lost
                    outage.failed(ConnectionError("the LISTEN connection was lost"))
            finally:
                if conn is not None and not conn.is_closed():
                    conn.terminate()
            await asyncio.sleep(retry_s)

    # ---------------------------------------------------------------- migrations

    async def migrate(
        self,
        migrations: Sequence[Migration] | None = None,
        functions: Sequence[Function] | None = None,
    ) -> list[int]:
        """Bring the schema up to this code's (storage.postgres.schema.apply), in one
        transaction; returns the migration versions this call applied. Safe to run from
        many brokers at once; a pool that has migrated once (for the coordinator) skips it
        (for the catalog)."""
        if self._migrated:
            return []
        if migrations is None:
            migrations = load_migrations()
        if functions is None:
            functions = load_functions()
        pool = self._require()
        try:
            async with pool.acquire(timeout=self.acquire_timeout) as conn:
                timeout = max(self.command_timeout, 60.0)
                applied = await apply(conn, migrations, functions, timeout)
        except Exception as e:
            if is_unavailable(e):
                # DDL is transactional: an interrupted migration rolled back or committed
                # whole; the next start finds out which.
                raise CoordinatorUnavailable(f"migrating PostgreSQL failed: {e!r}") from e
            raise
        self._migrated = True
        return applied


class PoolUser:
    """One hold on a PostgresPool, which may be shared (coordinator and catalog).

    ``start()`` takes the hold and applies migrations; ``close()`` gives it back, and
    the pool's connections close with the last hold.
    """

    def __init__(self, pool: str | PostgresPool, **pool_options: Any) -> None:
        self._pool = pool if isinstance(pool, PostgresPool) else PostgresPool(pool, **pool_options)
        self._started = False

    async def start(self) -> None:
        await self._pool.start()
        self._started = True
        await self._pool.migrate()

    async def close(self) -> None:
        if self._started:
            self._started = False
            await self._pool.close()


def _resolve(future: asyncio.Future[None], *_args: object) -> None:
    if not future.done():
        future.set_result(None)
