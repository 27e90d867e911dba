"""PostgresCoordinator against a real server: what the shared contract suite cannot show.

Several brokers (separate pools) on one database, PostgreSQL restarting under load,
concurrent migrations, error mapping, and the one-round-trip-per-operation promise
checked on the wire.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import shutil
import struct
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit
from uuid import UUID, uuid4

import asyncpg
import pytest

from sluice.launch.postgres import LocalPostgres, free_port
from storage.coordinator import (
    BatchToCommit,
    CommitResult,
    CoordinatorUnavailable,
    FindRequest,
    RetentionPolicy,
)
from storage.coordinator.postgres import PostgresCoordinator
from storage.groups import CommittedOffset
from storage.partition_key import PartitionKey
from storage.postgres.pool import PostgresPool
from storage.postgres.schema import load_migrations
from storage.transactions import CompleteRequest, Marker
from tests.fixtures.postgres import local_postgres_available

NOW = 1_700_000_000_000
BIG = 1 << 62
_keys = itertools.count()


def batch(
    topic: UUID, partition: int, count: int = 1, size: int = 100, pid: int = -1, seq: int = -1
) -> BatchToCommit:
    return BatchToCommit(
        topic_id=topic,
        partition=partition,
        byte_offset=0,
        byte_size=size,
        record_count=count,
        max_timestamp=1000,
        timestamp_type=0,
        producer_id=pid,
        producer_epoch=0 if pid >= 0 else -1,
        base_sequence=seq,
    )


def key(prefix: str = "obj") -> str:
    return f"{prefix}/{next(_keys):08d}"


async def opened(dsn: str | PostgresPool, **kwargs: object) -> PostgresCoordinator:
    c = PostgresCoordinator(dsn, **kwargs)  # type: ignore[arg-type]
    await c.start()
    return c


async def assert_contiguous(
    c: PostgresCoordinator, logs: Sequence[PartitionKey], expected_records: dict[PartitionKey, int]
) -> dict[PartitionKey, list[tuple[str, int, int]]]:
    """Every log's batches tile [0, high watermark) with no gap and no overlap; returns
    (object key, base, last) per log."""
    infos = await c.log_info(logs)
    found = await c.find_batches([FindRequest(k.topic_id, k.partition, 0, BIG) for k in logs], BIG)
    out = {}
    for k, info, result in zip(logs, infos, found, strict=True):
        assert result.error == 0
        assert info.high_watermark == expected_records[k]
        spans = [(b.object_key, b.base_offset, b.last_offset) for b in result.batches]
        expected_base = 0
        for _, base, last in spans:
            assert base == expected_base, (k, spans)
            expected_base = last + 1
        assert expected_base == info.high_watermark
        out[k] = spans
    return out


# --------------------------------------------------------------------------- brokers


async def test_concurrent_brokers_never_deadlock_and_offsets_stay_contiguous(
    postgres_dsn: str,
) -> None:
    topic = uuid4()
    logs = [PartitionKey(topic, p) for p in range(5)]
    brokers = [await opened(postgres_dsn, max_pool=3) for _ in range(4)]
    await brokers[0].create_logs(logs)
    committed: dict[PartitionKey, int] = {k: 0 for k in logs}
    spans: dict[PartitionKey, list[tuple[int, int]]] = {k: [] for k in logs}

    async def broker_task(n: int, c: PostgresCoordinator) -> None:
        rng = random.Random(n)
        seqs = {k: 0 for k in logs}
        pid = 1000 + n  # an idempotent producer per broker: producer_state under contention
        for _ in range(50):
            order = logs[:]
            rng.shuffle(order)  # every broker touches the partitions in its own order
            batches = []
            for k in order:
                count = rng.randint(1, 3)
                batches.append(batch(k.topic_id, k.partition, count, pid=pid, seq=seqs[k]))
                seqs[k] += count
            results = await c.commit_file(key(f"b{n}"), 1000, n, batches, NOW)
            for b, r in zip(batches, results, strict=True):
                assert r.error == 0, r
                k = PartitionKey(b.topic_id, b.partition)
                committed[k] += b.record_count
                spans[k].append((r.base_offset, r.base_offset + b.record_count - 1))

    try:
        await asyncio.wait_for(
            asyncio.gather(*(broker_task(n, c) for n, c in enumerate(brokers))), 60
        )
        found = await assert_contiguous(brokers[1], logs, committed)
        for k in logs:
            assert sorted(spans[k]) == [(base, last) for _, base, last in found[k]]
    finally:
        for c in brokers:
            await c.close()


async def test_commits_deletions_and_retention_from_several_brokers_never_deadlock(
    postgres_dsn: str,
) -> None:
    # Deleters lock logs rows and then the files they empty; committers lock logs rows.
    # Both in one global order each, whatever order the requests name them in.
    topics = [uuid4(), uuid4()]
    logs = [PartitionKey(t, p) for t in topics for p in range(3)]
    brokers = [await opened(postgres_dsn, max_pool=2) for _ in range(4)]
    await brokers[0].create_logs(logs)
    spans: dict[PartitionKey, list[tuple[int, int]]] = {k: [] for k in logs}

    async def committer(n: int, c: PostgresCoordinator) -> None:
        rng = random.Random(n)
        for _ in range(30):
            order = rng.sample(logs, 4)
            results = await c.commit_file(
                key(f"c{n}"), 400, n, [batch(k.topic_id, k.partition, 2) for k in order], NOW
            )
            for k, r in zip(order, results, strict=True):
                assert r.error == 0
                spans[k].append((r.base_offset, r.base_offset + 1))

    async def deleter(c: PostgresCoordinator) -> None:
        rng = random.Random(99)
        for i in range(30):
            order = rng.sample(logs, 4)
            if i % 2:
                results = await c.delete_records([(k, -1) for k in order], NOW)
                assert all(r.error == 0 for r in results)
            else:
                policies = [RetentionPolicy(k.topic_id, k.partition, -1, 0) for k in order]
                assert all(r.error == 0 for r in await c.enforce_retention(policies, NOW))

    try:
        await asyncio.wait_for(
            asyncio.gather(
                *(committer(n, c) for n, c in enumerate(brokers[:3])), deleter(brokers[3])
            ),
            60,
        )
        for k, info in zip(logs, await brokers[0].log_info(logs), strict=True):
            covered = sorted(spans[k])
            assert [base for base, _ in covered] == list(range(0, 2 * len(covered), 2))
            assert info.high_watermark == 2 * len(covered)
    finally:
        for c in brokers:
            await c.close()


async def test_files_emptied_concurrently_from_two_partitions_are_marked(
    postgres_dsn: str,
) -> None:
    # Each file holds batches of two partitions; broker A empties one partition while
    # broker B empties the other. Neither sees the other's deletions before commit:
    # only the row lock in sluice_mark_files_if_empty makes the second one mark it.
    topic = uuid4()
    p, q = PartitionKey(topic, 0), PartitionKey(topic, 1)
    a, b = await opened(postgres_dsn), await opened(postgres_dsn)
    try:
        await a.create_logs([p, q])
        for round_ in range(20):
            object_key = f"shared/{round_}"
            await a.commit_file(object_key, 200, 1, [batch(topic, 0), batch(topic, 1)], NOW)
            await asyncio.gather(
                a.delete_records([(p, -1)], NOW),
                b.delete_records([(q, -1)], NOW),
            )
            deleting = {f.object_key for f in await a.files_to_delete(BIG, 1000)}
            assert object_key in deleting, round_
    finally:
        await a.close()
        await b.close()


# --------------------------------------------------------------------------- migrations


async def test_concurrent_migrations_apply_the_schema_once(postgres_dsn: str) -> None:
    pools = [PostgresPool(postgres_dsn, max_size=1) for _ in range(8)]
    try:
        await asyncio.gather(*(p.start() for p in pools))
        applied = await asyncio.gather(*(p.migrate() for p in pools))
        everything = [m.version for m in load_migrations()]
        assert sorted(applied, key=len) == [[]] * 7 + [everything]
        rows = await pools[0].fetch(
            "SELECT version, count(*) FROM schema_migrations GROUP BY version ORDER BY 1",
            write=False,
        )
        assert [tuple(r) for r in rows] == [(v, 1) for v in everything]
        # And coordinators starting together (what brokers do) just work.
        coordinators = await asyncio.gather(*(opened(postgres_dsn) for _ in range(4)))
        for c in coordinators:
            await c.close()
    finally:
        for p in pools:
            await p.close()


async def test_a_schema_newer_than_the_code_is_refused(postgres_dsn: str) -> None:
    c = await opened(postgres_dsn)
    await c.pool.fetch(
        "INSERT INTO schema_migrations (version, name) VALUES (9999, 'future')", write=True
    )
    await c.close()
    old = PostgresCoordinator(postgres_dsn)
    try:
        with pytest.raises(RuntimeError, match="newer"):
            await old.start()
    finally:
        await old.close()


# --------------------------------------------------------------------------- errors


async def test_start_against_no_server_is_unavailable() -> None:
    c = PostgresCoordinator(
        f"postgresql://postgres@127.0.0.1:{free_port()}/x?sslmode=disable", connect_timeout=1
    )
    started = time.monotonic()
    with pytest.raises(CoordinatorUnavailable) as info:
        await c.start()
    assert not info.value.outcome_unknown
    assert time.monotonic() - started < 2


async def test_pool_acquire_timeout_is_unavailable_and_nothing_was_sent(
    postgres_dsn: str,
) -> None:
    pool = PostgresPool(postgres_dsn, max_size=1, acquire_timeout=0.2)
    c = await opened(pool)
    try:
        topic = uuid4()
        await c.create_logs([PartitionKey(topic, 0)])
        busy = asyncio.create_task(pool.fetch("SELECT pg_sleep(1)", write=False))
        await asyncio.sleep(0.05)
        with pytest.raises(CoordinatorUnavailable) as info:
            await c.commit_file(key(), 100, 1, [batch(topic, 0)], NOW)
        assert not info.value.outcome_unknown
        await busy
        assert (await c.log_info([PartitionKey(topic, 0)]))[0].high_watermark == 0
    finally:
        await c.close()


async def test_command_timeout_during_commit_is_unavailable_with_unknown_outcome(
    postgres_dsn: str,
) -> None:
    c = await opened(postgres_dsn, command_timeout=0.3)
    topic = uuid4()
    log = PartitionKey(topic, 0)
    await c.create_logs([log])
    blocker = await asyncpg.connect(postgres_dsn)
    try:
        # Another transaction holds the partition's row: the commit waits past its timeout.
        tx = blocker.transaction()
        await tx.start()
        await blocker.execute(
            "SELECT 1 FROM logs WHERE topic_id = $1 AND partition = 0 FOR UPDATE", topic
        )
        started = time.monotonic()
        with pytest.raises(CoordinatorUnavailable) as info:
            await c.commit_file(key(), 100, 1, [batch(topic, 0)], NOW)
        assert info.value.outcome_unknown
        assert time.monotonic() - started < 2
        # Reads say outcome known (nothing to be unknown about).
        with pytest.raises(CoordinatorUnavailable) as info:
            await c.pool.fetch("SELECT pg_sleep(1)", write=False)
        assert not info.value.outcome_unknown
        await tx.rollback()
        # The timed-out statement was cancelled; the pool goes on.
        results = await c.commit_file(key(), 100, 1, [batch(topic, 0)], NOW)
        assert results == [CommitResult(0, 0, -1, 0)]
    finally:
        await blocker.close()
        await c.close()


async def test_connection_killed_during_commit_is_unavailable_with_unknown_outcome(
    postgres_dsn: str,
) -> None:
    c = await opened(postgres_dsn, max_pool=1)
    topic = uuid4()
    await c.create_logs([PartitionKey(topic, 0)])
    other = await asyncpg.connect(postgres_dsn)
    try:
        tx = other.transaction()
        await tx.start()
        await other.execute(
            "SELECT 1 FROM logs WHERE topic_id = $1 AND partition = 0 FOR UPDATE", topic
        )
        commit = asyncio.create_task(c.commit_file(key(), 100, 1, [batch(topic, 0)], NOW))
        await asyncio.sleep(0.2)  # the commit now waits for the row lock
        killed = await other.fetchval(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
            " WHERE application_name = 'sluice' AND query LIKE '%sluice_commit_file%'"
        )
        assert killed
        with pytest.raises(CoordinatorUnavailable) as info:
            await commit
        assert info.value.outcome_unknown
        await tx.rollback()
        # The pool replaced the dead connection by itself.
        assert (await c.commit_file(key(), 100, 1, [batch(topic, 0)], NOW))[0].error == 0
    finally:
        await other.close()
        await c.close()


async def test_statement_errors_are_not_disguised_as_unavailability(postgres_dsn: str) -> None:
    c = await opened(postgres_dsn)
    topic = uuid4()
    try:
        await c.create_logs([PartitionKey(topic, 0)])
        await c.commit_file("same", 100, 1, [batch(topic, 0)], NOW)
        with pytest.raises(asyncpg.UniqueViolationError):
            await c.commit_file("same", 100, 1, [batch(topic, 0)], NOW)
    finally:
        await c.close()


# --------------------------------------------------------------------------- restart


@pytest.fixture
def own_postgres() -> Iterator[LocalPostgres]:
    if not local_postgres_available():
        pytest.fail("PostgreSQL binaries not installed (scripts/test installs them)")
    # Not tmp_path: as root the server runs as `postgres`, which cannot enter pytest's
    # private temp root.
    directory = Path(tempfile.mkdtemp(prefix="sluice-test-pg-restart-"))
    server = LocalPostgres(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()
        shutil.rmtree(directory, ignore_errors=True)


async def test_postgres_restart_under_load(own_postgres: LocalPostgres) -> None:
    timeout = 1.0
    c = await opened(own_postgres.dsn, command_timeout=timeout, connect_timeout=timeout)
    topic = uuid4()
    logs = [PartitionKey(topic, p) for p in range(3)]
    await c.create_logs(logs)
    acknowledged: list[tuple[str, list[CommitResult]]] = []
    failures: list[CoordinatorUnavailable] = []
    slowest = 0.0
    restarted = asyncio.Event()
    ok_after_restart = 0

    async def load() -> None:
        nonlocal slowest, ok_after_restart
        while ok_after_restart < 20:
            object_key = key("restart")
            started = time.monotonic()
            try:
                results = await c.commit_file(
                    object_key, 300, 1, [batch(topic, p, count=2) for p in range(3)], NOW
                )
            except CoordinatorUnavailable as e:
                failures.append(e)
                await asyncio.sleep(0.01)
            else:
                acknowledged.append((object_key, results))
                if restarted.is_set():
                    ok_after_restart += 1
            slowest = max(slowest, time.monotonic() - started)

    task = asyncio.create_task(load())
    while len(acknowledged) < 20:
        await asyncio.sleep(0.01)
    await asyncio.to_thread(own_postgres.restart)
    restarted.set()
    await asyncio.wait_for(task, 30)

    assert failures, "the restart went unnoticed: no commit failed"
    # Never hung: each call ended within its timeouts (acquire + command) and a margin.
    assert slowest < 2 * timeout + 1.0
    # Every acknowledged commit is there, at the offsets it was given; the logs are
    # contiguous (commits with an unknown outcome either fully landed or not at all).
    info = await c.log_info(logs)
    found = await assert_contiguous(
        c, logs, {k: i.high_watermark for k, i in zip(logs, info, strict=True)}
    )
    for p, k in enumerate(logs):
        by_key = {object_key: base for object_key, base, _ in found[k]}
        for object_key, results in acknowledged:
            assert by_key[object_key] == results[p].base_offset
    await c.close()


# --------------------------------------------------------------------------- round trips


class WireCounter:
    """A TCP proxy in front of PostgreSQL counting the client's round trips: each Sync
    (extended protocol), Flush (asyncpg's prepare) or Query (simple protocol) message
    ends one."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream_port = upstream_port
        self.round_trips = 0
        self.parses = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def close(self) -> None:
        assert self._server is not None
        self._server.close()
        for t in self._tasks:
            t.cancel()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.upstream_port)
        for coro in (self._client_to_server(reader, up_writer), self._pipe(up_reader, writer)):
            task = asyncio.create_task(coro)
            self._tasks.add(task)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            writer.write(data)
        writer.close()

    async def _client_to_server(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        # Startup packets have no type byte (SSLRequest, StartupMessage); then every
        # message is: type byte, int32 length including itself, payload.
        length = struct.unpack("!i", await reader.readexactly(4))[0]
        writer.write(struct.pack("!i", length) + await reader.readexactly(length - 4))
        try:
            while True:
                header = await reader.readexactly(5)
                body = await reader.readexactly(struct.unpack("!i", header[1:])[0] - 4)
                if header[:1] in (b"S", b"H", b"Q"):
                    self.round_trips += 1
                if header[:1] == b"P":
                    self.parses += 1
                writer.write(header + body)
        except asyncio.IncompleteReadError:
            writer.close()


async def test_every_operation_is_one_round_trip(postgres_dsn: str) -> None:
    parts = urlsplit(postgres_dsn)
    if parts.hostname not in ("127.0.0.1", "localhost") or parts.port is None:
        pytest.skip("the counting proxy runs on loopback only")
    proxy = WireCounter(parts.port)
    proxy_port = await proxy.start()
    netloc = parts.netloc.rsplit(":", 1)[0] + f":{proxy_port}"
    # No TLS: the proxy reads the messages.
    dsn = urlunsplit(parts._replace(netloc=netloc, query="sslmode=disable"))
    sql: list[str] = []
    # One connection, so warming its statement cache is warming the one we measure.
    pool = PostgresPool(dsn, min_size=1, max_size=1)
    pool.on_query = sql.append
    # Without the notifier: its NOTIFYs (one per 5 ms at most, whatever the operations) go
    # after the commits on a connection of its own, which the proxy would count too
    # (tests/integration/test_postgres_notify.py measures them).
    c = await opened(pool, notify_interval_ms=None)
    topics = [uuid4() for _ in range(10)]
    logs = [PartitionKey(t, p) for t in topics for p in range(10)]

    pids = itertools.count(1)

    def commit_batches(n: int) -> list[BatchToCommit]:
        # Idempotent (a new producer each time, so all are accepted): the costliest path.
        pid = next(pids)
        return [batch(k.topic_id, k.partition, pid=pid, seq=0) for k in logs[:n]]

    async def ops() -> None:
        await c.create_logs(logs)
        await c.commit_file(key(), 1, 1, commit_batches(100), NOW)
        await c.find_batches([FindRequest(k.topic_id, k.partition, 0, BIG) for k in logs], BIG)
        await c.list_offsets([])
        await c.log_info(logs)
        await c.delete_records([(logs[0], 1)], NOW)
        await c.enforce_retention([], NOW)
        await c.files_to_delete(BIG, 10)
        await c.forget_files(["x"])
        await c.allocate_producer_ids(10)
        await c.delete_logs([uuid4()], NOW)

    try:
        await ops()  # warm-up: asyncpg prepares each statement once per connection
        for _ in range(2):
            sql.clear()
            proxy.round_trips = proxy.parses = 0
            await ops()
            assert len(sql) == 11  # one statement per operation...
            assert proxy.round_trips == 11  # ...and one round trip each on the wire
            assert proxy.parses == 0  # prepared once, then reused
        # The commit of 100 batches over 100 partitions alone: one round trip.
        proxy.round_trips = 0
        results = await c.commit_file(key(), 1, 1, commit_batches(100), NOW)
        assert [r.error for r in results] == [0] * 100
        assert proxy.round_trips == 1
    finally:
        await c.close()
        await proxy.close()


async def test_every_transaction_operation_is_one_round_trip(postgres_dsn: str) -> None:
    """The transaction store's operations, and the transactional paths of commit_file,
    find_batches and list_offsets: one round trip each on the wire."""
    parts = urlsplit(postgres_dsn)
    if parts.hostname not in ("127.0.0.1", "localhost") or parts.port is None:
        pytest.skip("the counting proxy runs on loopback only")
    proxy = WireCounter(parts.port)
    proxy_port = await proxy.start()
    netloc = parts.netloc.rsplit(":", 1)[0] + f":{proxy_port}"
    dsn = urlunsplit(parts._replace(netloc=netloc, query="sslmode=disable"))
    pool = PostgresPool(dsn, min_size=1, max_size=1)
    c = await opened(pool, notify_interval_ms=None)  # as above: the operations' round trips
    logs = [PartitionKey(uuid4(), p) for p in range(20)]
    ids = itertools.count()
    offset = CommittedOffset(logs[0].topic_id, 0, 1, -1, "", NOW)
    markers = [Marker(k.topic_id, k.partition, 0, 50, NOW) for k in logs]

    async def ops() -> int:
        await c.create_logs(logs)
        tid = f"tx-{next(ids)}"
        r = await c.txn_init(tid, 60_000, -1, -1, NOW)
        pid, epoch = r.producer_id, r.producer_epoch
        await c.txn_add(tid, pid, epoch, logs, ["g"], NOW)
        await c.txn_commit_offsets(tid, pid, epoch, "g", [offset], NOW)
        batches = [
            BatchToCommit(k.topic_id, k.partition, 0, 100, 1, 1000, 0, pid, epoch, 0, True)
            for k in logs
        ]
        results = await c.commit_file(key(), 1, 1, batches, NOW)
        assert [x.error for x in results] == [0] * len(logs)
        await c.find_batches(
            [FindRequest(k.topic_id, k.partition, 0, BIG) for k in logs], BIG, True
        )
        await c.list_offsets([], True)
        await c.txn_get([tid, "nope"])
        await c.txn_list([], [], 0, NOW)
        await c.txn_expired(NOW, 10)
        await c.txn_pending_offsets(["g", "h"])
        done = await c.txn_complete(
            CompleteRequest(tid, pid, epoch, False, True, key(), 1, 1, markers, NOW)
        )
        assert done.error == 0 and done.registered
        return 12

    try:
        await ops()  # warm-up: asyncpg prepares each statement once per connection
        for _ in range(2):
            proxy.round_trips = proxy.parses = 0
            n = await ops()
            assert proxy.round_trips == n
            assert proxy.parses == 0
    finally:
        await c.close()
        await proxy.close()
