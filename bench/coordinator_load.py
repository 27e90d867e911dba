"""The load of ``bench.coordinator_scale``: simulated brokers driving one PostgreSQL batch
coordinator through the product's own classes, and one timed phase of commits or finds.

A simulated broker is what a ``sluice broker`` keeps of the coordinator and nothing else:
the :class:`~storage.coordinator.postgres.PostgresCoordinator` that
``storage.backends.coordinator_and_catalog`` builds for ``coordinator=postgresql`` (its own
asyncpg pool, the broker's defaults: 1 to 10 connections; its notifier, which NOTIFYs the
logs its commits changed after each commit from a connection of its own), the LISTEN
connection its long polls wake on (opened as ``watch_logs`` opens it; notifications
counted, not parsed), one idempotent producer id and the next sequence of that producer in
every partition. Like the
real appender (broker/logs/diskless/diskless_append.py) it has at most one ``commit_file``
in flight: a broker commits its objects one after the other, in flush order. So N
committers are N brokers, each on its own connection, all in this one process (asyncio
tasks); the process's own CPU is measured beside PostgreSQL's so a driver that ran out of
CPU is seen as such.
"""

from __future__ import annotations

import asyncio
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from broker.config import BrokerConfig, load_config
from broker.metadata.topics import TopicRegistry
from storage.backends import coordinator_and_catalog
from storage.catalog import TopicCatalog
from storage.coordinator import BatchToCommit, FindRequest
from storage.coordinator.postgres import PostgresCoordinator
from storage.partition_key import PartitionKey
from storage.postgres.notify import APPLICATION_NAME as NOTIFIER_APPLICATION_NAME
from storage.postgres.notify import LOGS_CHANNEL

# One batch per partition and object: 16 records of 1 KiB, as the produce benches send them
# (16 KiB batches). The coordinator only sees the sizes and counts, never the bytes.
RECORDS_PER_BATCH = 16
BATCH_BYTES = 16 * 1024
# A consumer's fetch as Kafka's defaults size it: max.partition.fetch.bytes (1 MiB) per
# partition, fetch.max.bytes (50 MiB) for the whole answer.
PARTITION_MAX_BYTES = 1024 * 1024
FETCH_MAX_BYTES = 50 * 1024 * 1024
# A tail reader: it asks from this many batches below the high watermark, so that each
# partition's answer holds a few batches, as for a consumer a flush or two behind.
TAIL_BATCHES = 2
# Catalog set-up commits this many partitions per object (fewer round trips).
SETUP_OBJECT_PARTITIONS = 1000


def broker_config(dsn: str, overrides: dict[str, str] | None = None) -> BrokerConfig:
    """A production broker's config: S3 and PostgreSQL, whatever else at its defaults
    (``overrides``: the bench's ``-o``)."""
    layers = {"object.store": "s3", "coordinator": "postgresql", "coordinator.dsn": dsn}
    return load_config({**layers, **(overrides or {})})


@dataclass
class Catalog:
    """The partitions the load picks from, and the high watermark last seen of each (the
    finds' offsets)."""

    keys: list[PartitionKey]
    hwm: dict[PartitionKey, int] = field(default_factory=dict)


class SimBroker:
    """One broker's share of the coordinator (see the module docstring)."""

    def __init__(
        self, node_id: int, config: BrokerConfig, idempotent: bool, seed: int, notify: bool = True
    ) -> None:
        self.node_id = node_id
        coordinator, catalog = coordinator_and_catalog(config)
        assert isinstance(coordinator, PostgresCoordinator)
        if not notify:
            # A what-if, not the product: no broker's long poll would wake on this one's
            # commits. The notifier has opened nothing yet (it connects at its first send).
            coordinator.notifier = None
        self.coordinator = coordinator
        self.catalog: TopicCatalog = catalog
        self.config = config
        self.idempotent = idempotent
        self.rng = random.Random(seed)
        self.producer_id = -1
        self.sequences: dict[PartitionKey, int] = {}
        self.notifications = 0
        self.listening = asyncio.Event()  # set once the LISTEN connection is in place
        self._listening: asyncio.Task[None] | None = None
        self._objects = 0

    async def start(self) -> None:
        await self.coordinator.start()
        await self.catalog.start()
        if self.idempotent:
            # As InitProducerId: a block of ids from the coordinator, shared by all brokers.
            self.producer_id = await self.coordinator.allocate_producer_ids(1)

    async def close(self) -> None:
        await self.listen(False)
        await self.catalog.close()
        await self.coordinator.close()

    async def listen(self, on: bool) -> None:
        """Keep (or stop) the LISTEN connection a broker's long polls wake on: every
        commit's NOTIFY is delivered to each listener, a cost of the database that grows
        with the number of brokers. Through the coordinator's pool as ``watch_logs``
        listens, but without its parsing of each payload into partition keys: that is the
        broker's CPU, and here it would be taken from the simulated brokers' commits."""
        if on and self._listening is None:
            self.listening = asyncio.Event()
            listening = self.coordinator.pool.listen(LOGS_CHANNEL, self._notified, self._gap)
            self._listening = asyncio.ensure_future(listening)
        elif not on and self._listening is not None:
            task, self._listening = self._listening, None
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    def _gap(self) -> None:
        # Called once the LISTEN is in place (and after each reconnection).
        self.listening.set()

    def _notified(self, payload: str) -> None:
        self.notifications += 1

    def batches(self, keys: Sequence[PartitionKey], now_ms: int) -> list[BatchToCommit]:
        """One object's batches, one per partition of ``keys``, with this broker's producer
        sequences (advanced only when the commit is accepted: see :meth:`accepted`)."""
        out = []
        for i, key in enumerate(keys):
            sequence = self.sequences.get(key, 0) if self.idempotent else -1
            out.append(
                BatchToCommit(
                    key.topic_id,
                    key.partition,
                    i * BATCH_BYTES,
                    BATCH_BYTES,
                    RECORDS_PER_BATCH,
                    now_ms,
                    0,
                    self.producer_id,
                    0 if self.idempotent else -1,
                    sequence,
                )
            )
        return out

    def object_key(self) -> str:
        self._objects += 1
        return f"bench/{self.node_id}/{self._objects}"

    async def commit(self, keys: Sequence[PartitionKey], catalog: Catalog) -> int:
        """One object's commit; returns how many of its batches were refused."""
        now_ms = int(time.time() * 1000)
        batches = self.batches(keys, now_ms)
        results = await self.coordinator.commit_file(
            self.object_key(), len(batches) * BATCH_BYTES, self.node_id, batches, now_ms
        )
        refused = 0
        for key, result in zip(keys, results, strict=True):
            if result.error:
                refused += 1
                continue
            if self.idempotent:
                self.sequences[key] = self.sequences.get(key, 0) + RECORDS_PER_BATCH
            end = result.base_offset + RECORDS_PER_BATCH
            if end > catalog.hwm.get(key, 0):
                catalog.hwm[key] = end
        return refused

    async def find(self, keys: Sequence[PartitionKey], catalog: Catalog) -> int:
        """One fetch's find_batches over ``keys`` from a little below each high watermark;
        returns how many partitions answered an error."""
        back = TAIL_BATCHES * RECORDS_PER_BATCH
        requests = [
            FindRequest(k.topic_id, k.partition, max(0, catalog.hwm.get(k, 0) - back),
                        PARTITION_MAX_BYTES)
            for k in keys
        ]  # fmt: skip
        results = await self.coordinator.find_batches(requests, FETCH_MAX_BYTES)
        return sum(1 for r in results if r.error)


async def create_catalog(
    broker: SimBroker, partitions: int, topic_partitions: int, say: Callable[[str], None]
) -> Catalog:
    """Topics of ``topic_partitions`` partitions each (the last one smaller) up to
    ``partitions`` in all, created as a broker without controller creates them
    (TopicRegistry.create: the logs, then the catalog row), then one batch committed in
    every partition so each log has a history to find."""
    registry = TopicRegistry(broker.catalog, broker.coordinator, broker.config)
    await registry.load()
    keys: list[PartitionKey] = []
    started = time.perf_counter()
    n = 0
    while len(keys) < partitions:
        count = min(topic_partitions, partitions - len(keys))
        topic = await registry.create(f"bench-{n:05d}", count, {})
        keys += [PartitionKey(topic.topic_id, p) for p in range(count)]
        n += 1
    created = time.perf_counter() - started
    catalog = Catalog(keys)
    started = time.perf_counter()
    for i in range(0, len(keys), SETUP_OBJECT_PARTITIONS):
        refused = await broker.commit(keys[i : i + SETUP_OBJECT_PARTITIONS], catalog)
        if refused:
            raise RuntimeError(f"setup commit refused {refused} batches")
    say(
        f"  catalog: {n} topics, {len(keys)} partitions created in {created:.1f} s; "
        f"one batch in each committed in {time.perf_counter() - started:.1f} s"
    )
    return catalog


@dataclass
class PhaseResult:
    """One timed phase: every call's latency, in seconds."""

    kind: str  # "commit" or "find"
    concurrency: int
    seconds: float
    latencies: list[float]
    refused: int  # batches refused (commit) or partitions answered an error (find)

    @property
    def per_second(self) -> float:
        return len(self.latencies) / self.seconds if self.seconds else float("nan")


async def run_phase(
    kind: str,
    brokers: Sequence[SimBroker],
    catalog: Catalog,
    partitions_per_call: int,
    seconds: float,
) -> PhaseResult:
    """Every broker calls ``commit`` (or ``find``) back to back for ``seconds``, each over
    ``partitions_per_call`` partitions drawn at random (uniformly: any broker writes and
    serves any partition of a diskless topic). Calls still running at the deadline finish
    and count; the rate is over the time until the last one ended."""
    loop = asyncio.get_running_loop()
    latencies: list[float] = []
    refused = 0
    go = asyncio.Event()
    k = min(partitions_per_call, len(catalog.keys))

    async def one(broker: SimBroker) -> None:
        nonlocal refused
        await go.wait()
        call = broker.commit if kind == "commit" else broker.find
        while loop.time() < deadline:
            keys = broker.rng.sample(catalog.keys, k)
            started = time.perf_counter()
            refused += await call(keys, catalog)
            latencies.append(time.perf_counter() - started)

    tasks = [asyncio.ensure_future(one(b)) for b in brokers]
    await asyncio.sleep(0)  # every task waits on the event before the clock starts
    began = loop.time()
    deadline = began + seconds
    go.set()
    await asyncio.gather(*tasks)
    return PhaseResult(kind, len(brokers), loop.time() - began, latencies, refused)


async def start_brokers(
    config: BrokerConfig,
    count: int,
    idempotent: bool,
    seed: int,
    first_id: int = 1,
    notify: bool = True,
) -> list[SimBroker]:
    """``count`` simulated brokers, started a few at a time (each opens its pool and
    checks the schema)."""
    brokers = [SimBroker(first_id + i, config, idempotent, seed + i, notify) for i in range(count)]
    for i in range(0, count, 8):
        await asyncio.gather(*(b.start() for b in brokers[i : i + 8]))
    return brokers


# What a committer's backend was doing, by pg_stat_activity's wait event: the row locks of
# logs another commit holds (its transaction id, until that commit's WAL flush ends), the
# WAL flush itself, NOTIFY's queue (one lock for the whole server at commit), or running.
# The brokers' notifiers (their own connections, named so) are told apart.
_WAITS = (
    "SELECT wait_event_type, wait_event, application_name = $1 FROM pg_stat_activity"
    " WHERE datname = current_database() AND backend_type = 'client backend'"
    " AND state = 'active' AND pid <> pg_backend_pid()"
)


def wait_kind(event_type: str | None, event: str | None) -> str:
    """A sampled active backend's activity, grouped as the report names it."""
    if event_type is None:
        return "cpu"
    if event_type == "Lock" and event in ("transactionid", "tuple"):
        return "row locks"
    if event_type == "Lock" and event == "object":
        return "notify lock"
    if event_type in ("IO", "LWLock") and event is not None and event.startswith("WAL"):
        return "wal"
    return f"{event_type}:{event}"


class WaitSampler:
    """Samples what the active backends of the database wait on, every ``interval_s``,
    over one connection of its own (a few short queries a second: little load). It runs
    in a thread with its own event loop: on the simulated brokers' loop, busy with their
    calls and notifications, its samples came late or not at all."""

    def __init__(self, dsn: str, interval_s: float = 0.05) -> None:
        self._dsn = dsn
        self._interval = interval_s
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self.counts: dict[str, int] = {}
        self.notifier_counts: dict[str, int] = {}
        self.samples = 0

    def begin(self) -> None:
        self.counts = {}
        self.notifier_counts = {}
        self.samples = 0
        self._stop = threading.Event()
        self._error = None
        self._thread = threading.Thread(target=self._main, args=(self._stop,), daemon=True)
        self._thread.start()

    async def end(self) -> dict[str, float]:
        """Each kind's share of the samples of active backends (empty if none)."""
        assert self._thread is not None
        self._stop.set()
        await asyncio.to_thread(self._thread.join)
        if self._error is not None:
            raise self._error
        total = sum(self.counts.values())
        return {k: v / total for k, v in sorted(self.counts.items())} if total else {}

    def notifiers(self) -> tuple[float, float]:
        """The notifiers' backends of the last phase: how many were active at a sample on
        average, and the share of those samples spent waiting for NOTIFY's lock."""
        seen = sum(self.notifier_counts.values())
        active = seen / self.samples if self.samples else 0.0
        return active, self.notifier_counts.get("notify lock", 0) / seen if seen else 0.0

    def _main(self, stop: threading.Event) -> None:
        try:
            asyncio.run(self._run(stop))
        except BaseException as exc:  # handed to end(), on the caller's loop
            self._error = exc

    async def _run(self, stop: threading.Event) -> None:
        import asyncpg

        conn = await asyncpg.connect(self._dsn, timeout=10)
        try:
            while not stop.is_set():
                for event_type, event, notifier in await conn.fetch(
                    _WAITS, NOTIFIER_APPLICATION_NAME
                ):
                    kind = wait_kind(event_type, event)
                    counts = self.notifier_counts if notifier else self.counts
                    counts[kind] = counts.get(kind, 0) + 1
                self.samples += 1
                await asyncio.sleep(self._interval)
        finally:
            await conn.close()
