"""Wake-ups of other brokers' long polls on PostgreSQL (storage/postgres/notify.py).

The writing transactions send no NOTIFY any more (migration 0018 dropped the ``logs_notify``
trigger, whose NOTIFY made every commit flush the WAL alone under one server-wide lock): the
process that committed notifies the logs it changed after its commit, from a connection of
its own, coalesced. Here, on a real PostgreSQL:

- every write that moves a log (commit, transaction markers, DeleteRecords, retention, the
  seed of a migration) is notified, and never by the backend that wrote it;
- commits within the notifier's interval share one NOTIFY; without a notifier, nothing
  arrives at all;
- a notifier whose connection was killed delivers what it held once it reconnects;
- a long poll on broker B wakes within a short time when broker A commits to its partition,
  and only through that notification (with the notifier off it waits its whole max_wait).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from uuid import UUID, uuid4

import asyncpg
import pytest
from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.node import Broker
from broker.server.api_table import build_api_table
from storage.backends import coordinator_and_catalog
from storage.coordinator import BatchToCommit, RetentionPolicy
from storage.coordinator.postgres import PostgresCoordinator
from storage.objects.local import LocalObjectStore
from storage.partition_key import PartitionKey
from storage.transactions import CompleteRequest, Marker
from tests.e2e._batches import Record, build_batch
from tests.fixtures.brokers import eventually, started_brokers
from tests.fixtures.postgres import PostgresServer
from tests.unit._handlers import decode_answer, fetch_body, request_and_context

NOW = 1_700_000_000_000
# Spelled out rather than imported from storage/postgres/notify.py, so that this module runs
# against the code before it too (and fails there by its assertions).
LOGS_CHANNEL = "sluice_logs"
NOTIFIER = "sluice notify"  # the notifier connection's application_name
POOL = "sluice"  # the pool's, whose backends run the writing transactions


def parse(payload: str) -> list[PartitionKey]:
    assert payload, "no 'maybe any partition' for a few partitions"
    keys = []
    for line in payload.split("\n"):
        topic_id, _, partition = line.partition(":")
        keys.append(PartitionKey(UUID(topic_id), int(partition)))
    return keys


class Listener:
    """LISTEN sluice_logs on a connection of the test's own: every notification with the
    backend pid that sent it."""

    def __init__(self) -> None:
        self.got: list[tuple[int, str]] = []
        self.arrived = asyncio.Event()
        self._conn: asyncpg.Connection | None = None

    async def start(self, dsn: str) -> None:
        self._conn = await asyncpg.connect(dsn)
        await self._conn.add_listener(LOGS_CHANNEL, self._on)

    def _on(self, _conn: object, pid: int, _channel: str, payload: str) -> None:
        self.got.append((pid, payload))
        self.arrived.set()

    async def wait(self, count: int, timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while len(self.got) < count:
            self.arrived.clear()
            left = deadline - time.monotonic()
            assert left > 0, f"{len(self.got)} notifications of {count} in {timeout} s"
            await asyncio.wait_for(self.arrived.wait(), left)

    def keys(self) -> set[PartitionKey]:
        return {k for _pid, payload in self.got for k in parse(payload)}

    def last(self) -> list[PartitionKey]:
        return parse(self.got[-1][1])

    async def wait_keys(self, keys: set[PartitionKey], timeout: float = 10.0) -> None:
        """Until every one of ``keys`` was named."""
        deadline = time.monotonic() + timeout
        while not keys <= self.keys():
            self.arrived.clear()
            left = deadline - time.monotonic()
            assert left > 0, f"not notified in {timeout} s: {keys - self.keys()}"
            await asyncio.wait_for(self.arrived.wait(), left)

    async def senders(self) -> set[str]:
        """The application names of the backends that sent what arrived (still connected:
        the coordinator is open), e.g. {'sluice notify'}."""
        assert self._conn is not None
        pids = sorted({pid for pid, _ in self.got})
        rows = await self._conn.fetch(
            "SELECT pid, application_name FROM pg_stat_activity WHERE pid = ANY($1::int[])", pids
        )
        names = {r["pid"]: r["application_name"] for r in rows}
        return {names.get(pid, f"gone pid {pid}") for pid in pids}

    async def execute(self, sql: str, *args: Any) -> Any:
        assert self._conn is not None
        return await self._conn.fetchval(sql, *args)

    async def close(self) -> None:
        if self._conn is not None:
            await self._conn.close()


@pytest.fixture
async def listener(postgres_dsn: str) -> AsyncIterator[Listener]:
    listening = Listener()
    await listening.start(postgres_dsn)
    try:
        yield listening
    finally:
        await listening.close()


def batch(k: PartitionKey, producer_id: int = -1) -> BatchToCommit:
    """One record; a producer id makes it transactional (epoch 0, sequence 0)."""
    txn = producer_id >= 0
    return BatchToCommit(
        k.topic_id, k.partition, 0, 100, 1, NOW, 0, producer_id, 0 if txn else -1,
        0 if txn else -1, txn,
    )  # fmt: skip


async def opened(dsn: str, **kwargs: Any) -> PostgresCoordinator:
    c = PostgresCoordinator(dsn, **kwargs)
    await c.start()
    return c


# --------------------------------------------------------------------------- the coordinator


async def test_every_write_that_moves_a_log_is_notified_and_never_by_its_transaction(
    postgres_dsn: str, listener: Listener
) -> None:
    """The trigger sent the NOTIFY from the committing backend, inside its transaction
    (so it held NOTIFY's server-wide lock through the commit's WAL flush): here every
    notification comes from the notifier's connection, and each kind of write is seen."""
    c = await opened(postgres_dsn)
    try:
        p_commit, p_txn, p_delete, p_retain, p_seed = (PartitionKey(uuid4(), 0) for _ in range(5))
        await c.create_logs([p_commit, p_txn, p_delete, p_retain])
        for k in (p_commit, p_delete, p_retain):
            assert (await c.commit_file(f"o/{k}", 100, 1, [batch(k)], NOW))[0].error == 0
        await listener.wait_keys({p_commit, p_delete, p_retain})

        # A transaction: its batch, then its marker, each moves the log.
        init = await c.txn_init("tx", 60_000, -1, -1, NOW)
        assert await c.txn_add("tx", init.producer_id, 0, [p_txn], [], NOW) == 0
        [done] = await c.commit_file("o/txn", 100, 1, [batch(p_txn, init.producer_id)], NOW)
        assert done.error == 0
        await listener.wait_keys({p_txn})
        seen = len(listener.got)
        marker = Marker(p_txn.topic_id, p_txn.partition, 0, 60, NOW)
        ended = await c.txn_complete(
            CompleteRequest("tx", init.producer_id, 0, True, False, "m/1", 60, 1, [marker], NOW)
        )
        assert ended.error == 0 and ended.offsets == [1]
        await listener.wait(seen + 1)
        assert listener.last() == [p_txn]

        # DeleteRecords and retention move log starts.
        [deleted] = await c.delete_records([(p_delete, 1)], NOW)
        assert deleted.error == 0 and deleted.low_watermark == 1
        await listener.wait(seen + 2)
        assert listener.last() == [p_delete]
        # A retention round over two logs of which one moves: only that one is notified.
        policies = [
            RetentionPolicy(p_retain.topic_id, 0, 0, -1),
            RetentionPolicy(p_commit.topic_id, 0, -1, -1),
        ]
        [moved, kept] = await c.enforce_retention(policies, NOW + 10_000)
        assert (moved.log_start_offset, kept.log_start_offset) == (1, 0)
        await listener.wait(seen + 3)
        assert listener.last() == [p_retain]
        # The seed of a log migrated from classic moves its empty log to the boundary.
        assert await c.seed_log(p_seed, 7, []) == (7, 7)
        await listener.wait(seen + 4)
        assert listener.last() == [p_seed]
        await asyncio.sleep(0.2)
        assert len(listener.got) == seen + 4, "nothing else notified"

        # Never the pool's backends, which ran the writing transactions.
        assert await listener.senders() == {NOTIFIER}
    finally:
        await c.close()


async def test_commits_within_the_interval_share_one_notify(
    postgres_dsn: str, listener: Listener
) -> None:
    # A long interval, so that "within it" holds on a loaded machine.
    c = await opened(postgres_dsn, notify_interval_ms=2000)
    try:
        keys = [PartitionKey(uuid4(), 0) for _ in range(5)]
        await c.create_logs(keys)
        first = time.monotonic()
        await c.commit_file("o/0", 100, 1, [batch(keys[0])], NOW)
        # The first change after a quiet spell goes at once...
        await listener.wait(1)
        assert listener.last() == [keys[0]]
        # ...the next ones, one commit (one transaction) each, wait for the interval and go
        # out together.
        for i, k in enumerate(keys[1:], 1):
            assert (await c.commit_file(f"o/{i}", 100, 1, [batch(k)], NOW))[0].error == 0
        await listener.wait(2)
        assert time.monotonic() - first >= 1.9, "not sent before the interval ran out"
        assert set(listener.last()) == set(keys[1:])
        await asyncio.sleep(0.3)
        assert len(listener.got) == 2, "one NOTIFY for the four commits"
        assert c.notifier is not None and c.notifier.sent == 2
    finally:
        await c.close()


async def test_without_a_notifier_a_commit_notifies_nothing(
    postgres_dsn: str, listener: Listener
) -> None:
    """The commit transaction alone (the coordinator without its notifier): silent."""
    c = await opened(postgres_dsn, notify_interval_ms=None)
    try:
        k = PartitionKey(uuid4(), 0)
        await c.create_logs([k])
        for i in range(3):
            assert (await c.commit_file(f"o/{i}", 100, 1, [batch(k)], NOW))[0].error == 0
        await c.delete_records([(k, 1)], NOW)
        await asyncio.sleep(0.5)
        assert listener.got == []
    finally:
        await c.close()


async def test_a_notifier_whose_connection_died_delivers_once_back(
    postgres_dsn: str, listener: Listener
) -> None:
    c = await opened(postgres_dsn)
    assert c.notifier is not None
    c.notifier.retry_s = 0.05  # a quick retry, not the production second
    try:
        keys = [PartitionKey(uuid4(), 0) for _ in range(2)]
        await c.create_logs(keys)
        await c.commit_file("o/0", 100, 1, [batch(keys[0])], NOW)
        await listener.wait(1)
        # The notifier's backend is killed, as by a failover or an idle-connection reaper:
        # the next NOTIFY fails on the dead connection, and is sent again on a new one.
        killed = await listener.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE application_name = $1 AND datname = current_database()",
            NOTIFIER,
        )
        assert killed == 1
        await asyncio.sleep(0.1)
        await c.commit_file("o/1", 100, 1, [batch(keys[1])], NOW)
        await listener.wait_keys(set(keys))
    finally:
        await c.close()


# --------------------------------------------------------------------------- two brokers


async def _call(broker: Broker, key: int, version: int, data: dict[str, Any]) -> Any:
    request, ctx = request_and_context(key, version, data)
    handler = build_api_table(broker)[key].handler
    response = await handler(ctx, request)
    if isinstance(response, asyncio.Future):
        # A long poll's deferred answer: waited for past its max_wait (unlike the unit
        # tests' 5 s), so that a poll nobody woke fails by its delay, not by a timeout.
        response = await asyncio.wait_for(response, 60)
    return decode_answer(response, key, version)


@contextlib.asynccontextmanager
async def _two_brokers(
    server: PostgresServer, tmp_path: Path, notify: bool
) -> AsyncIterator[tuple[Broker, Broker]]:
    dsn = await server.new_database()
    store_dir = tmp_path / "objects"  # one object store for both, as one bucket

    def make(node_id: int) -> Broker:
        config = BrokerConfig(
            node_id=node_id,
            port=0,
            data_dir=str(tmp_path / f"b{node_id}"),
            coordinator="postgresql",
            coordinator_dsn=dsn,
            broker_heartbeat_interval_ms=100,
            broker_session_timeout_ms=3000,
            metadata_refresh_interval_ms=100,
            # Only a notification wakes a long poll within the test: no re-check of
            # others' commits before a minute (the default is 100 ms, 1 s once notified).
            remote_poll_interval_ms=60_000,
        )
        coordinator, catalog = coordinator_and_catalog(config)
        assert isinstance(coordinator, PostgresCoordinator)
        if not notify:
            coordinator.notifier = None
        return Broker(config, LocalObjectStore(str(store_dir)), coordinator, catalog)

    try:
        async with started_brokers(make) as nodes:
            await eventually(
                lambda: all(n.multi_broker for n in nodes), 20.0, "the brokers see each other"
            )
            yield nodes[0], nodes[1]
    finally:
        await server.drop_database(dsn)


async def _produce(broker: Broker, topic: str) -> None:
    records = build_batch([Record(b"k", b"v")], base_timestamp_ms=int(time.time() * 1000))
    answer = await _call(
        broker,
        0,
        9,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": 10_000,
            "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
        },
    )
    assert answer.responses[0].partition_responses[0].error_code == ErrorCode.none


async def _long_poll_woken_after(
    server: PostgresServer, tmp_path: Path, notify: bool, max_wait_ms: int
) -> tuple[float, float, int]:
    """A long poll on broker 2 at the end of a partition, then a produce on broker 1: seconds
    from the produce's answer (its commit done) to the long poll's, how long the long poll
    took in all, and the bytes it got."""
    async with _two_brokers(server, tmp_path, notify) as (a, b):
        created = await _call(
            a,
            19,
            7,
            {
                "topics": [
                    {"name": "woken", "num_partitions": 1, "replication_factor": -1,
                     "assignments": [], "configs": []}
                ],
                "timeout": 5000,
                "validate_only": False,
            },
        )  # fmt: skip
        assert created.topics[0].error_code == ErrorCode.none
        await eventually(
            lambda: b.topics.get("woken") is not None, 20.0, "broker 2 knows the topic"
        )
        # Each broker served one fetch and one produce first: warm connections and plans,
        # as a running cluster has them (and broker 1's commit wakes broker 2's listener
        # path once before the measured one).
        await _produce(a, "woken")
        await _call(b, 1, 12, fetch_body("woken", 0, min_bytes=1))
        began = time.monotonic()
        poll = asyncio.ensure_future(
            _call(b, 1, 12, fetch_body("woken", 1, max_wait_ms=max_wait_ms, min_bytes=1))
        )
        await asyncio.sleep(0.5)  # broker 2's long poll is waiting
        assert not poll.done()
        await _produce(a, "woken")
        committed = time.monotonic()
        answer = await poll
        answered = time.monotonic()
        part = answer.responses[0].partitions[0]
        assert part.error_code == ErrorCode.none
        return answered - committed, answered - began, len(part.records or b"")


async def test_a_long_poll_on_another_broker_wakes_on_a_commit(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    delay, _took, got = await _long_poll_woken_after(postgres_server, tmp_path, True, 15_000)
    print(f"broker 2's long poll answered {delay * 1000:.1f} ms after broker 1's commit")
    assert got > 0
    # Generous for a loaded 2-core machine; without the notification it is 15 s.
    assert delay < 3.0


async def test_without_notifications_the_long_poll_waits_its_max_wait(
    postgres_server: PostgresServer, tmp_path: Path
) -> None:
    """The control: what wakes the long poll above is the notifier's NOTIFY, nothing else
    (no local wake-up, no re-check)."""
    _delay, took, got = await _long_poll_woken_after(postgres_server, tmp_path, False, 2_000)
    # Answered at its max_wait, not before (with the record: its last look finds it).
    assert took >= 1.95
    assert got > 0
