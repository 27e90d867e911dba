"""Wake-ups of other brokers' long polls: NOTIFY 'sluice_logs', sent by the process that
changed the logs, after its commit, from a connection of its own.

Why not in the writing transaction (the ``logs_notify`` trigger did that until migration
0018): PostgreSQL queues a transaction's notifications under one lock for the whole server,
taken just before its commit and held until the commit record is flushed. Every notifying
commit therefore flushed the WAL alone, one after the other; with 16-64 brokers the
committing backends spent 88-98 % of their time waiting for that lock
(docs/coordinator-scaling.md). Here the lock is taken by a transaction that writes nothing
but its commit record and commits asynchronously (``synchronous_commit=off``; without it
PostgreSQL would already skip the flush of a transaction that wrote no WAL, but a catalog
read that prunes a page writes some), so it is held for a queue insert, never through a WAL
flush and never while rows of ``logs`` are locked; and one process's changes are gathered
into one NOTIFY per ``interval_s`` at most.

What is notified: the logs whose high watermark or start a write of this process moved,
as the trigger did (storage/coordinator/postgres.py: commit_file, txn_complete's markers,
delete_records, enforce_retention's moves, seed_log). Not replace_batches (the jobs' merge
and compaction): it changes where batches are and a log's byte size, no offset, so no long
poll has anything new to read; the trigger woke every waiter of those logs for nothing.

The payload is "topic_id:partition" lines, at most :data:`MAX_PAYLOAD_BYTES` each (NOTIFY
refuses 8000 and more): a longer list is split over several notifications of the same
transaction, and beyond :data:`MAX_PAYLOADS` of them one empty payload is sent instead, which
listeners read as "maybe any partition" (they wake every waiter and look again).

What a notification after the commit loses: a process that dies (or loses the database)
between a commit and its NOTIFY never sends it. That costs latency only: a long poll that
was not woken finds the data at its next look, its broker's re-check (``remote.poll.interval.ms``,
at least a second while notifications arrive: broker/node.py ``remote_poll_seconds``) or the
fetch's ``fetch.wait.max.ms``, whichever comes first, as for any notification lost while a
listener reconnects. Notifications are best effort either way; nothing correct depends on them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable
from uuid import UUID

import asyncpg

from storage.outage import OutageLog
from storage.partition_key import PartitionKey
from storage.postgres.pool import lost_connection

log = logging.getLogger(__name__)

LOGS_CHANNEL = "sluice_logs"
# NOTIFY's payload limit is 8000 bytes; the trigger kept the same margin.
MAX_PAYLOAD_BYTES = 7900
# About 190 partitions fit one payload; past this many payloads (~1,500 partitions) one
# "maybe any partition" wakes every waiter more cheaply than listeners parsing them all.
MAX_PAYLOADS = 8
# The notifier's connection, told apart from the pool's ("sluice") in pg_stat_activity.
APPLICATION_NAME = "sluice notify"
_NOTIFY = f"SELECT pg_notify('{LOGS_CHANNEL}', p) FROM unnest($1::text[]) AS p"


def encode_payloads(keys: Iterable[PartitionKey]) -> list[str]:
    """The payloads announcing ``keys`` (none for no keys), each within NOTIFY's limit;
    ``[""]`` ("maybe any partition") when they would take more than MAX_PAYLOADS."""
    payloads: list[str] = []
    lines: list[str] = []
    size = 0
    for k in sorted(set(keys), key=lambda k: (k.topic_id, k.partition)):
        line = f"{k.topic_id}:{k.partition}"
        if lines and size + 1 + len(line) > MAX_PAYLOAD_BYTES:
            payloads.append("\n".join(lines))
            lines, size = [], 0
            if len(payloads) == MAX_PAYLOADS:
                return [""]
        size += len(line) + (1 if lines else 0)
        lines.append(line)
    if lines:
        payloads.append("\n".join(lines))
    return payloads


def decode_payload(payload: str) -> list[PartitionKey] | None:
    """The partitions a notification names; None for "maybe any partition"."""
    if not payload:
        return None
    keys = []
    for line in payload.split("\n"):
        topic_id, _, partition = line.partition(":")
        keys.append(PartitionKey(UUID(topic_id), int(partition)))
    return keys


class LogsNotifier:
    """Gathers the logs this process's commits changed and NOTIFYs them, coalesced.

    :meth:`changed` is called once the transaction that changed them has committed (never
    before: a listener woken early would look, find nothing and wait again). The first
    change after a quiet spell is sent at once; changes arriving while a NOTIFY is in flight,
    or within ``interval_s`` of the last one, go out together in the next, so a busy broker
    sends at most one notifying transaction per interval whatever its commit rate.
    """

    def __init__(
        self,
        dsn: str,
        *,
        interval_s: float = 0.005,
        connect_timeout: float = 5.0,
        command_timeout: float = 15.0,
        retry_s: float = 1.0,
    ) -> None:
        self._dsn = dsn
        self._interval = interval_s
        self._connect_timeout = connect_timeout
        self._command_timeout = command_timeout
        self.retry_s = retry_s  # after a failed NOTIFY
        self._pending: set[PartitionKey] = set()
        self._task: asyncio.Task[None] | None = None
        self._conn: asyncpg.Connection | None = None
        self._last_sent = float("-inf")
        self._closed = False
        self._outage = OutageLog(
            # The connection is dropped after any failure; one that died under the
            # statement (a PostgreSQL restart) is an outage, not a bug to log with a
            # traceback (nemesis run 7 logged two at a kill of PostgreSQL).
            f"PostgreSQL NOTIFY {LOGS_CHANNEL}",
            log,
            lost_connection,
        )
        self.sent = 0  # notifying transactions that committed (tests, benchmarks)

    def changed(self, keys: Iterable[PartitionKey]) -> None:
        """These logs changed in a transaction that has committed (or may have: an unknown
        outcome; a wake-up for nothing only costs a look)."""
        if self._closed:
            # A write that ended after close() (a broker stopping): no new connection that
            # nothing would close; the others' long polls see it at their next look.
            return
        self._pending.update(keys)
        if self._pending and (self._task is None or self._task.done()):
            self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            wait = self._last_sent + self._interval - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            keys, self._pending = self._pending, set()
            try:
                await self._send(encode_payloads(keys))
            except Exception as exc:
                # Kept for the next try: a listener that missed them waits for its next look.
                self._pending |= keys
                self._drop_connection()
                self._outage.failed(exc)
                await asyncio.sleep(self.retry_s)
                continue
            finally:
                self._last_sent = loop.time()
            self._outage.succeeded()

    async def _send(self, payloads: list[str]) -> None:
        if self._conn is None or self._conn.is_closed():
            self._conn = await asyncpg.connect(
                self._dsn,
                timeout=self._connect_timeout,
                command_timeout=self._command_timeout,
                server_settings={
                    "application_name": APPLICATION_NAME,
                    # See the module docstring: no WAL flush while NOTIFY's lock is held.
                    "synchronous_commit": "off",
                },
            )
        # One statement in autocommit: one transaction, one take of the lock, every payload.
        await self._conn.execute(_NOTIFY, payloads)
        self.sent += 1

    def _drop_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None and not conn.is_closed():
            conn.terminate()

    async def close(self, flush_s: float = 1.0) -> None:
        """Send what is pending (for up to ``flush_s``: a broker stopping after its last
        commit still wakes the others), then close the connection."""
        self._closed = True
        task = self._task
        if task is not None and not task.done():
            try:
                await asyncio.wait_for(asyncio.shield(task), flush_s)
            except TimeoutError:
                task.cancel()
                await asyncio.gather(task, return_exceptions=True)
        self._pending.clear()
        if self._conn is not None and not self._conn.is_closed():
            conn, self._conn = self._conn, None
            try:
                await asyncio.wait_for(conn.close(), flush_s)
            except Exception:
                conn.terminate()
