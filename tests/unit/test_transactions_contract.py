"""Contract of TransactionStore and of the transactional parts of BatchCoordinator
(commit_file's verification, the last stable offset, read_committed fetches and
ListOffsets, aborted transactions): every backend passes this suite unchanged.

The ``coordinator`` / ``coordinator_factory`` fixtures (conftest.py) run each test once
per backend. Tests talk through the interfaces, except a few checks of what must be gone
from the tables (no interface shows it) and one shortcut to an almost exhausted epoch.
"""

from __future__ import annotations

import asyncio
import itertools
import random
import sqlite3
from collections.abc import AsyncIterator, Sequence
from typing import Any
from uuid import UUID

import pytest

from storage.coordinator import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    BatchCoordinator,
    BatchToCommit,
    CommitResult,
    FindRequest,
    FindResult,
    ListOffsetsRequest,
    ListOffsetsResult,
    RetentionPolicy,
)
from storage.coordinator.postgres import PostgresCoordinator
from storage.coordinator.sqlite import SqliteCoordinator
from storage.groups import CommittedOffset, GroupStore, OffsetKey
from storage.groups.postgres import PostgresGroupStore
from storage.groups.sqlite import SqliteGroupStore
from storage.partition_key import PartitionKey
from storage.transactions import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    CONCURRENT_TRANSACTIONS,
    EMPTY,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TXN_STATE,
    NONE,
    ONGOING,
    PRODUCER_FENCED,
    AbortedTransaction,
    ActiveProducer,
    CompleteRequest,
    CompleteResult,
    Marker,
    TransactionState,
)

from .conftest import CoordinatorFactory

UNKNOWN = 3
OUT_OF_ORDER = 45  # OUT_OF_ORDER_SEQUENCE_NUMBER
OUT_OF_RANGE = 1
NOW = 1_700_000_000_000
BIG = 1 << 62
TIMEOUT = 60_000

T1 = UUID("00000000-0000-0000-0000-000000000001")
T2 = UUID("00000000-0000-0000-0000-000000000002")
P10, P11, P20 = PartitionKey(T1, 0), PartitionKey(T1, 1), PartitionKey(T2, 0)
_keys = itertools.count()


def key() -> str:
    return f"txn-objects/{next(_keys):06d}"


def batch(
    k: PartitionKey = P10,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
    count: int = 1,
    size: int = 100,
    ts: int = 1000,
    transactional: bool = True,
) -> BatchToCommit:
    return BatchToCommit(
        topic_id=k.topic_id,
        partition=k.partition,
        byte_offset=0,
        byte_size=size,
        record_count=count,
        max_timestamp=ts,
        timestamp_type=0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
        transactional=transactional,
    )


def plain(k: PartitionKey = P10, count: int = 1, ts: int = 1000) -> BatchToCommit:
    return batch(k, count=count, ts=ts, transactional=False)


def marker(k: PartitionKey, size: int = 60) -> Marker:
    return Marker(k.topic_id, k.partition, 0, size, NOW)


class Producer:
    """A transactional producer as the broker drives the store for it."""

    def __init__(self, c: BatchCoordinator, tid: str = "tx") -> None:
        self.c = c
        self.tid = tid
        self.pid = -1
        self.epoch = -1
        self.seq: dict[PartitionKey, int] = {}

    async def init(self, timeout_ms: int = TIMEOUT, now: int = NOW) -> None:
        r = await self.c.txn_init(self.tid, timeout_ms, -1, -1, now)
        assert r.error == NONE, r
        if r.producer_id != self.pid or r.producer_epoch != self.epoch:
            self.seq.clear()  # a new epoch restarts sequences
        self.pid, self.epoch = r.producer_id, r.producer_epoch

    async def add(self, *parts: PartitionKey, groups: Sequence[str] = (), now: int = NOW) -> int:
        return await self.c.txn_add(self.tid, self.pid, self.epoch, parts, groups, now)

    async def begin(self, *parts: PartitionKey, groups: Sequence[str] = ()) -> None:
        await self.init()
        assert await self.add(*parts, groups=groups) == NONE

    def batch(self, k: PartitionKey = P10, count: int = 1, ts: int = 1000) -> BatchToCommit:
        seq = self.seq.get(k, 0)
        self.seq[k] = seq + count
        return batch(k, self.pid, self.epoch, seq, count, ts=ts)

    async def send(self, k: PartitionKey = P10, count: int = 1, ts: int = 1000) -> CommitResult:
        (result,) = await commit(self.c, self.batch(k, count, ts))
        return result

    async def end(
        self,
        commit: bool,
        *parts: PartitionKey,
        bump: bool = False,
        epoch: int | None = None,
        object_key: str | None = None,
        tv2: bool = False,
    ) -> CompleteResult:
        return await self.c.txn_complete(
            CompleteRequest(
                self.tid,
                self.pid,
                self.epoch if epoch is None else epoch,
                commit,
                bump or tv2,
                object_key or key(),
                1000,
                7,
                [marker(k) for k in parts],
                NOW,
                tv2=tv2,
            )
        )

    async def state(self) -> TransactionState:
        (s,) = await self.c.txn_get([self.tid])
        assert s is not None
        return s


async def commit(c: BatchCoordinator, *batches: BatchToCommit) -> list[CommitResult]:
    return await c.commit_file(key(), 1000, 7, batches, NOW)


async def find(
    c: BatchCoordinator,
    offset: int,
    k: PartitionKey = P10,
    read_committed: bool = True,
    max_bytes: int = BIG,
) -> FindResult:
    req = FindRequest(k.topic_id, k.partition, offset, max_bytes)
    return (await c.find_batches([req], BIG, read_committed=read_committed))[0]


async def lso(c: BatchCoordinator, k: PartitionKey = P10) -> int:
    return (await find(c, 0, k, read_committed=False)).last_stable_offset


async def hwm(c: BatchCoordinator, k: PartitionKey = P10) -> int:
    return (await c.log_info([k]))[0].high_watermark


async def list_offset(
    c: BatchCoordinator, ts: int, read_committed: bool, k: PartitionKey = P10
) -> ListOffsetsResult:
    req = ListOffsetsRequest(k.topic_id, k.partition, ts)
    return (await c.list_offsets([req], read_committed=read_committed))[0]


def offsets_of(result: FindResult) -> list[tuple[int, int]]:
    return [(b.base_offset, b.last_offset) for b in result.batches]


def sorted_aborted(result: FindResult) -> list[AbortedTransaction]:
    assert result.aborted is not None
    return sorted(result.aborted, key=lambda a: (a.first_offset, a.producer_id))


async def setup_logs(c: BatchCoordinator, *keys: PartitionKey) -> None:
    await c.create_logs(list(keys) or [P10, P11, P20])


async def raw(c: BatchCoordinator, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    """Run SQL on the backend's own database (``?`` placeholders; ``$n`` for PostgreSQL
    are made from them), for what no interface shows."""
    if isinstance(c, PostgresCoordinator):
        n = itertools.count(1)
        pg_sql = "".join(f"${next(n)}" if ch == "?" else ch for ch in sql)
        return [tuple(r) for r in await c.pool.fetch(pg_sql, *args, write=True)]
    assert isinstance(c, SqliteCoordinator)
    conn = sqlite3.connect(c.path, timeout=30)
    try:
        rows = conn.execute(sql, args).fetchall()
        conn.commit()
        return rows
    finally:
        conn.close()


async def count_rows(c: BatchCoordinator, table: str) -> int:
    return int((await raw(c, f"SELECT count(*) FROM {table}"))[0][0])


@pytest.fixture
async def groups(coordinator: BatchCoordinator) -> AsyncIterator[GroupStore]:
    """The group store on the coordinator's own database, as the broker runs it."""
    store: GroupStore
    if isinstance(coordinator, PostgresCoordinator):
        store = PostgresGroupStore(coordinator.pool)
    else:
        assert isinstance(coordinator, SqliteCoordinator)
        store = SqliteGroupStore(coordinator.path)
    await store.start()
    try:
        yield store
    finally:
        await store.close()


# --------------------------------------------------------------------------- get / init


async def test_get_answers_in_order_with_none_for_unknown(coordinator: BatchCoordinator) -> None:
    a, b = Producer(coordinator, "a"), Producer(coordinator, "b")
    await a.init()
    await b.init(timeout_ms=5000, now=NOW + 1)
    got = await coordinator.txn_get(["b", "nope", "a"])
    assert got == [
        TransactionState("b", b.pid, 0, EMPTY, 5000, -1, NOW + 1),
        None,
        TransactionState("a", a.pid, 0, EMPTY, TIMEOUT, -1, NOW),
    ]
    assert await coordinator.txn_get([]) == []


async def test_init_of_a_new_id_takes_the_producer_id_counter(
    coordinator: BatchCoordinator,
) -> None:
    first = await coordinator.allocate_producer_ids(10)
    r = await coordinator.txn_init("tx", TIMEOUT, -1, -1, NOW)
    assert (r.error, r.producer_id, r.producer_epoch, r.pending) == (NONE, first + 10, 0, None)
    # The same counter: nobody else gets that id.
    assert await coordinator.allocate_producer_ids(1) == first + 11
    other = await coordinator.txn_init("tx2", TIMEOUT, -1, -1, NOW)
    assert other.producer_id == first + 12


async def test_init_again_bumps_the_epoch_and_takes_the_new_timeout(
    coordinator: BatchCoordinator,
) -> None:
    p = Producer(coordinator)
    await p.init()
    pid = p.pid
    r = await coordinator.txn_init("tx", 9000, -1, -1, NOW + 5)
    assert (r.error, r.producer_id, r.producer_epoch) == (NONE, pid, 1)
    assert await p.state() == TransactionState("tx", pid, 1, EMPTY, 9000, -1, NOW + 5)


async def test_init_after_a_completed_transaction_bumps_the_epoch(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.begin(P10)
    assert (await p.end(True, P10)).error == NONE
    r = await coordinator.txn_init("tx", TIMEOUT, -1, -1, NOW)
    assert (r.error, r.producer_id, r.producer_epoch) == (NONE, p.pid, p.epoch + 1)
    assert (await p.state()).state == EMPTY


async def _set_epoch(c: BatchCoordinator, tid: str, epoch: int) -> None:
    # Reaching epoch 32766 through the interface would take 32766 calls.
    await raw(
        c, "UPDATE transactions SET producer_epoch = ? WHERE transactional_id = ?", epoch, tid
    )


async def test_epoch_exhaustion_gives_a_new_producer_id(coordinator: BatchCoordinator) -> None:
    p = Producer(coordinator)
    await p.init()
    old = p.pid
    await _set_epoch(coordinator, "tx", 32765)
    r = await coordinator.txn_init("tx", TIMEOUT, -1, -1, NOW)
    assert (r.producer_id, r.producer_epoch) == (old, 32766)  # the last usable epoch
    r = await coordinator.txn_init("tx", TIMEOUT, -1, -1, NOW)
    assert r.error == NONE and r.producer_id > old and r.producer_epoch == 0
    s = await p.state()
    assert (s.producer_id, s.producer_epoch) == (r.producer_id, 0)
    # And from an epoch a coordinator abort bumped to the int16 maximum.
    await _set_epoch(coordinator, "tx", 32767)
    r2 = await coordinator.txn_init("tx", TIMEOUT, -1, -1, NOW)
    assert r2.producer_id > r.producer_id and r2.producer_epoch == 0


async def test_kip360_reinit_with_another_id_or_epoch_is_fenced(
    coordinator: BatchCoordinator,
) -> None:
    p = Producer(coordinator)
    await p.init()
    before = await p.state()
    for pid, epoch in ((p.pid, 5), (p.pid + 1, 0), (p.pid, -1)):
        r = await coordinator.txn_init("tx", 1, pid, epoch, NOW + 9)
        assert (r.error, r.producer_id, r.producer_epoch) == (PRODUCER_FENCED, -1, -1)
    assert await p.state() == before  # nothing changed
    r = await coordinator.txn_init("tx", TIMEOUT, p.pid, 0, NOW)
    assert (r.error, r.producer_id, r.producer_epoch) == (NONE, p.pid, 1)


async def test_kip360_retry_of_a_bump_gets_the_same_epoch_back(
    coordinator: BatchCoordinator,
) -> None:
    """A producer re-initialising with its id and epoch (KIP-360) whose answer was lost
    retries with the same epoch: Kafka answers the epoch it bumped to (the previous epoch is
    remembered), not PRODUCER_FENCED, and bumps nothing twice."""
    p = Producer(coordinator)
    await p.init()
    bumped = await coordinator.txn_init("tx", TIMEOUT, p.pid, p.epoch, NOW + 1)
    assert (bumped.error, bumped.producer_epoch) == (NONE, p.epoch + 1)
    for _ in range(2):  # the retry, and the retry of the retry
        again = await coordinator.txn_init("tx", TIMEOUT, p.pid, p.epoch, NOW + 2)
        assert (again.error, again.producer_id, again.producer_epoch) == (
            NONE,
            p.pid,
            p.epoch + 1,
        )
    # Once the producer moved on from the bumped epoch, the old one is fenced.
    newer = await coordinator.txn_init("tx", TIMEOUT, p.pid, p.epoch + 1, NOW + 3)
    assert (newer.error, newer.producer_epoch) == (NONE, p.epoch + 2)
    stale = await coordinator.txn_init("tx", TIMEOUT, p.pid, p.epoch, NOW + 4)
    assert stale.error == PRODUCER_FENCED


async def test_a_producer_fenced_by_a_coordinator_abort_recovers_with_kip360(
    coordinator: BatchCoordinator,
) -> None:
    """The timeout sweep's abort fences the producer (epoch + 1). As Kafka 4.x (its
    differential session txn_timeout), that producer's KIP-360 InitProducerId with its id
    and fenced epoch is answered the new epoch (Empty, the new timeout), not PRODUCER_FENCED:
    a librdkafka or Java producer cut off past its transaction timeout recovers. An older
    epoch is still fenced, and the new epoch re-initialises as usual."""
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.init()
    r = await coordinator.txn_init("tx", TIMEOUT, p.pid, p.epoch, NOW)
    p.epoch = r.producer_epoch
    assert await p.add(P10) == NONE
    assert (await p.end(False, P10, bump=True)).error == NONE
    fenced = await coordinator.txn_init("tx", TIMEOUT, p.pid, p.epoch - 1, NOW)
    assert fenced.error == PRODUCER_FENCED
    for _ in range(2):  # and its retry
        again = await coordinator.txn_init("tx", 7000, p.pid, p.epoch, NOW + 1)
        assert (again.error, again.producer_id, again.producer_epoch) == (
            NONE,
            p.pid,
            p.epoch + 1,
        )
        s = await p.state()
        assert (s.state, s.producer_epoch, s.timeout_ms) == (EMPTY, p.epoch + 1, 7000)
    newer = await coordinator.txn_init("tx", TIMEOUT, p.pid, p.epoch + 1, NOW + 2)
    assert (newer.error, newer.producer_epoch) == (NONE, p.epoch + 2)


async def test_the_timeout_abort_ends_only_the_transaction_it_read(
    coordinator: BatchCoordinator,
) -> None:
    """The sweep reads an expired transaction, the producer ends it and begins another with
    the same epoch and partitions; the sweep's abort must not end the new one."""
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.init(timeout_ms=10)
    assert await p.add(P10, now=NOW) == NONE
    [expired] = await coordinator.txn_expired(NOW + 11, 10)
    assert (await p.end(True, P10)).error == NONE
    assert await p.add(P10, now=NOW + 20) == NONE  # a new transaction, same epoch
    sweep = CompleteRequest(
        "tx", p.pid, p.epoch, False, True, key(), 1000, 7, [marker(P10)], NOW + 21,
        started_ms=expired.started_ms,
    )  # fmt: skip
    assert (await coordinator.txn_complete(sweep)).error == CONCURRENT_TRANSACTIONS
    s = await p.state()
    assert (s.state, s.producer_epoch, s.partitions, s.started_ms) == (
        ONGOING,
        p.epoch,
        [P10],
        NOW + 20,
    )
    # The transaction it read is what it ends when nothing changed meanwhile.
    [expired] = await coordinator.txn_expired(NOW + 31, 10)
    sweep = CompleteRequest(
        "tx", p.pid, p.epoch, False, True, key(), 1000, 7, [marker(P10)], NOW + 32,
        started_ms=expired.started_ms,
    )  # fmt: skip
    assert (await coordinator.txn_complete(sweep)).error == NONE


async def test_init_while_ongoing_with_partitions_is_concurrent_with_the_pending_one(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.init()
    assert await p.add(P20, P11, groups=["g2", "g1"], now=NOW + 3) == NONE
    before = await p.state()
    r = await coordinator.txn_init("tx", 1, -1, -1, NOW + 10)
    assert (r.error, r.producer_id, r.producer_epoch) == (CONCURRENT_TRANSACTIONS, -1, -1)
    assert r.pending == TransactionState(
        "tx", p.pid, p.epoch, ONGOING, TIMEOUT, NOW + 3, NOW + 3, [P11, P20], ["g1", "g2"]
    )
    assert await p.state() == before
    # The broker aborts it (fencing), then init succeeds.
    done = await p.end(False, P11, P20, bump=True)
    assert done.error == NONE
    r = await coordinator.txn_init("tx", TIMEOUT, -1, -1, NOW)
    assert (r.error, r.producer_epoch) == (NONE, p.epoch + 2)


async def test_init_discards_an_ongoing_transaction_with_only_groups(
    coordinator: BatchCoordinator, groups: GroupStore
) -> None:
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.begin(groups=["g"])
    o = CommittedOffset(T1, 0, 42, -1, "", NOW)
    assert await p_commit_offsets(p, "g", [o]) == NONE
    r = await coordinator.txn_init("tx", TIMEOUT, -1, -1, NOW + 1)
    assert (r.error, r.producer_id, r.producer_epoch) == (NONE, p.pid, p.epoch + 1)
    assert await coordinator.txn_get(["tx"]) == [
        TransactionState("tx", p.pid, p.epoch + 1, EMPTY, TIMEOUT, -1, NOW + 1)
    ]
    p.epoch += 1
    # The discarded offsets never turn up, not even when a later transaction commits.
    assert await p.add(groups=["g"]) == NONE
    assert (await p.end(True)).error == NONE
    assert await groups.fetch_offsets({"g": None}) == {}


async def p_commit_offsets(p: Producer, group: str, offsets: Sequence[CommittedOffset]) -> int:
    return await p.c.txn_commit_offsets(p.tid, p.pid, p.epoch, group, offsets, NOW)


# --------------------------------------------------------------------------- add


async def test_add_starts_a_transaction_and_unions(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.init()
    assert await p.add(P11, P10, groups=["g2"], now=NOW + 5) == NONE
    assert await p.add(P10, P20, P20, groups=["g1", "g2"], now=NOW + 9) == NONE
    assert await p.add(now=NOW + 20) == NONE  # nothing to add
    assert await p.state() == TransactionState(
        "tx", p.pid, p.epoch, ONGOING, TIMEOUT, NOW + 5, NOW + 5, [P10, P11, P20], ["g1", "g2"]
    )


async def test_add_after_completion_starts_a_new_transaction(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.begin(P10, P11)
    assert (await p.end(True, P10, P11)).error == NONE
    assert await p.add(P20, now=NOW + 50) == NONE
    s = await p.state()
    assert (s.state, s.started_ms, s.partitions, s.groups) == (ONGOING, NOW + 50, [P20], [])


async def test_add_errors_change_nothing(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.init()
    await p.init()  # epoch 1
    before = await p.state()
    c = coordinator
    assert await c.txn_add("nope", p.pid, p.epoch, [P10], [], NOW) == INVALID_PRODUCER_ID_MAPPING
    assert await c.txn_add("tx", p.pid + 1, p.epoch, [P10], [], NOW) == INVALID_PRODUCER_ID_MAPPING
    assert await c.txn_add("tx", p.pid, 0, [P10], ["g"], NOW) == PRODUCER_FENCED
    assert await c.txn_add("tx", p.pid, 2, [P10], ["g"], NOW) == PRODUCER_FENCED
    assert await p.state() == before
    assert await c.txn_get(["nope"]) == [None]


# --------------------------------------------------------------------------- offsets


async def test_pending_offsets_become_committed_offsets_on_commit(
    coordinator: BatchCoordinator, groups: GroupStore
) -> None:
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.begin(P10, groups=["g"])
    o1 = CommittedOffset(T1, 0, 5, 1, "m", NOW)
    o2 = CommittedOffset(T1, 1, 7, -1, "", NOW)
    assert await p_commit_offsets(p, "g", [o1, o2]) == NONE
    newer = CommittedOffset(T1, 0, 9, 2, "n", NOW + 1)
    assert await p_commit_offsets(p, "g", [newer]) == NONE  # replaces the pending one
    # Pending: not the group's committed offsets yet.
    assert await groups.fetch_offsets({"g": None}) == {}
    # An offset committed outside the transaction is overwritten at commit.
    await groups.commit_offsets("g", [CommittedOffset(T1, 1, 1, -1, "", NOW)])
    assert (await p.end(True, P10)).error == NONE
    got = await groups.fetch_offsets({"g": [OffsetKey(T1, 0), OffsetKey(T1, 1)]})
    assert sorted(got["g"], key=lambda o: o.partition) == [newer, o2]
    # Gone from the transaction: the next commit does not write them again.
    await groups.delete_offsets("g", [OffsetKey(T1, 0)])
    assert await p.add(P10, groups=["g"]) == NONE
    assert (await p.end(True, P10)).error == NONE
    assert [o.partition for o in (await groups.fetch_offsets({"g": None}))["g"]] == [1]


async def test_pending_offsets_vanish_on_abort(
    coordinator: BatchCoordinator, groups: GroupStore
) -> None:
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.begin(P10, groups=["g", "h"])
    assert await p_commit_offsets(p, "g", [CommittedOffset(T1, 0, 5, 1, "", NOW)]) == NONE
    assert await p_commit_offsets(p, "h", [CommittedOffset(T2, 0, 3, 1, "", NOW)]) == NONE
    assert (await p.end(False, P10)).error == NONE
    assert await groups.fetch_offsets({"g": None, "h": None}) == {}
    assert await p.add(P10, groups=["g"]) == NONE
    assert (await p.end(True, P10)).error == NONE
    assert await groups.fetch_offsets({"g": None, "h": None}) == {}


async def test_pending_offsets_are_listed_by_group_until_the_end(
    coordinator: BatchCoordinator, groups: GroupStore
) -> None:
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.begin(P10, groups=["g", "h"])
    assert await coordinator.txn_pending_offsets(["g", "h"]) == {}
    assert await p_commit_offsets(p, "g", [CommittedOffset(T1, 0, 5, 1, "", NOW)]) == NONE
    assert await p_commit_offsets(p, "g", [CommittedOffset(T2, 3, 5, 1, "", NOW)]) == NONE
    other = Producer(coordinator, "tx-other")
    await other.begin(P10, groups=["h"])
    assert await p_commit_offsets(other, "h", [CommittedOffset(T1, 1, 2, 1, "", NOW)]) == NONE
    assert await coordinator.txn_pending_offsets(["g", "h", "x"]) == {
        "g": {PartitionKey(T1, 0), PartitionKey(T2, 3)},
        "h": {PartitionKey(T1, 1)},
    }
    assert (await p.end(True, P10)).error == NONE
    assert (await other.end(False, P10)).error == NONE
    assert await coordinator.txn_pending_offsets(["g", "h"]) == {}


async def test_commit_offsets_errors(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.init()
    o = [CommittedOffset(T1, 0, 5, 1, "", NOW)]
    c = coordinator
    # Not ONGOING (Empty), then ONGOING without the group.
    assert await p_commit_offsets(p, "g", o) == INVALID_TXN_STATE
    assert await p.add(P10, groups=["h"]) == NONE
    assert await p_commit_offsets(p, "g", o) == INVALID_TXN_STATE
    assert await c.txn_commit_offsets("nope", p.pid, p.epoch, "h", o, NOW) == (
        INVALID_PRODUCER_ID_MAPPING
    )
    assert await c.txn_commit_offsets("tx", p.pid + 1, p.epoch, "h", o, NOW) == (
        INVALID_PRODUCER_ID_MAPPING
    )
    assert await c.txn_commit_offsets("tx", p.pid, p.epoch + 1, "h", o, NOW) == PRODUCER_FENCED
    assert await p_commit_offsets(p, "h", o) == NONE


# --------------------------------------------------------------------------- complete


async def test_commit_appends_markers_at_the_high_watermark(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await p.begin(P10, P11)
    await commit(c, plain(P10, count=2))
    assert (await p.send(P10, count=3)).base_offset == 2
    size_before = (await c.log_info([P10]))[0].byte_size
    k = key()
    done = await p.end(True, P11, P10, object_key=k)  # any order
    assert done == CompleteResult(NONE, [0, 5], True, completions=1)
    info = (await c.log_info([P10]))[0]
    assert (info.high_watermark, info.byte_size) == (6, size_before + 60)
    assert await hwm(c, P11) == 1
    assert await c.unknown_objects([k]) == []
    found = await find(c, 5)
    assert [(b.object_key, b.base_offset, b.last_offset, b.byte_size) for b in found.batches] == [
        (k, 5, 5, 60)
    ]
    # The marker closed the open transaction; a commit records no aborted transaction.
    assert found.last_stable_offset == 6
    assert (await find(c, 0)).aborted == []
    # The start of the ended transaction stays (Kafka's DescribeTransactions shows it).
    assert await p.state() == TransactionState(
        "tx", p.pid, p.epoch, COMPLETE_COMMIT, TIMEOUT, NOW, NOW
    )
    # InitProducerId starts the id afresh: no transaction begun since.
    assert (await c.txn_init("tx", TIMEOUT, -1, -1, NOW + 1)).error == NONE
    assert (await p.state()).started_ms == -1


async def test_abort_records_an_aborted_transaction_only_where_one_was_open(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await p.begin(P10, P11)
    await commit(c, plain(P10))
    assert (await p.send(P10, count=2)).base_offset == 1
    assert (await p.send(P10)).base_offset == 3  # same transaction: still opened at 1
    assert await lso(c) == 1
    done = await p.end(False, P10, P11)
    assert done == CompleteResult(NONE, [4, 0], True, completions=1)
    assert await lso(c) == 5
    assert (await find(c, 0)).aborted == [AbortedTransaction(p.pid, 1)]
    assert (await find(c, 0, P11)).aborted == []  # nothing was open there
    assert (await p.state()).state == COMPLETE_ABORT


async def test_markers_must_name_exactly_the_transactions_partitions(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await p.begin(P10, P11)
    await p.send(P10)
    before = await p.state()
    for parts in ((P10,), (P10, P11, P20), (P10, P10, P11), (P10, P10), ()):
        k = key()
        done = await p.end(True, *parts, object_key=k)
        assert done == CompleteResult(CONCURRENT_TRANSACTIONS, [-1] * len(parts), False)
        assert await c.unknown_objects([k]) == [k]  # not registered
    assert await p.state() == before
    assert (await hwm(c), await hwm(c, P11), await lso(c)) == (1, 0, 0)


async def test_a_retried_end_is_none_and_registers_nothing(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await p.begin(P10)
    await p.send(P10)
    assert (await p.end(True, P10)).registered
    k = key()
    assert await p.end(True, P10, object_key=k) == CompleteResult(NONE, [-1], False, 1)
    assert await c.unknown_objects([k]) == [k]
    assert await hwm(c) == 2
    # The other decision for a completed transaction is not a retry.
    assert await p.end(False, P10) == CompleteResult(INVALID_TXN_STATE, [-1], False)
    # A coordinator abort (bumping the epoch) retried with the epoch it was asked with.
    await p.begin(P10)
    await p.send(P10)
    assert (await p.end(False, P10, bump=True)).registered
    assert (await p.state()).producer_epoch == p.epoch + 1
    assert await p.end(False, P10, bump=True) == CompleteResult(NONE, [-1], False, 2)
    assert await p.end(False, P10) == CompleteResult(PRODUCER_FENCED, [-1], False)
    assert await hwm(c) == 4
    assert (await find(c, 0)).aborted == [AbortedTransaction(p.pid, 2)]


async def test_bump_epoch_fences_the_producer(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await p.begin(P10)
    await p.send(P10)
    assert (await p.end(False, P10, bump=True)).error == NONE
    s = await p.state()
    assert (s.producer_epoch, s.state, s.partitions) == (p.epoch + 1, COMPLETE_ABORT, [])
    assert await p.add(P10) == PRODUCER_FENCED
    assert (await p.send(P10)).error == INVALID_PRODUCER_EPOCH
    # Its KIP-360 re-initialisation is answered the new epoch (see the test below).
    r = await c.txn_init("tx", TIMEOUT, p.pid, p.epoch, NOW)
    assert (r.error, r.producer_id, r.producer_epoch) == (NONE, p.pid, p.epoch + 1)
    r = await c.txn_init("tx", TIMEOUT, p.pid, p.epoch + 1, NOW)
    assert (r.error, r.producer_id, r.producer_epoch) == (NONE, p.pid, p.epoch + 2)


async def test_a_tv2_end_bumps_the_epoch_and_the_next_transaction_starts_at_sequence_0(
    coordinator: BatchCoordinator,
) -> None:
    """KIP-890 part 2: every end bumps the epoch (answered in the result); a late batch
    of the ended transaction is fenced; the next one, at the new epoch, starts at 0."""
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await p.begin(P10)
    assert (await p.send(P10)).error == NONE
    done = await p.end(True, P10, tv2=True)
    assert (done.error, done.registered) == (NONE, True)
    assert (done.producer_id, done.producer_epoch) == (p.pid, p.epoch + 1)
    s = await p.state()
    assert (s.state, s.producer_epoch) == (COMPLETE_COMMIT, p.epoch + 1)
    # A retry of the ended transaction's batch (its old epoch) cannot reopen it.
    assert (await commit(c, batch(P10, p.pid, p.epoch, 1)))[0].error == INVALID_PRODUCER_EPOCH
    # A retried end with the old epoch is answered the same, with the new epoch.
    again = await p.end(True, P10, tv2=True)
    assert (again.error, again.registered) == (NONE, False)
    assert (again.producer_id, again.producer_epoch) == (p.pid, p.epoch + 1)
    p.epoch += 1
    p.seq.clear()
    assert await p.add(P10) == NONE
    assert (await p.send(P10)).error == NONE  # sequence 0 at the new epoch
    assert (await p.end(False, P10, tv2=True)).producer_epoch == p.epoch + 1
    assert (await hwm(c), await lso(c)) == (4, 4)
    assert (await find(c, 0)).aborted == [AbortedTransaction(p.pid, 2)]


async def test_a_tv2_abort_with_nothing_ongoing_ends_an_empty_transaction(
    coordinator: BatchCoordinator,
) -> None:
    """A TV2 producer may abort a transaction the coordinator never saw (its first batch
    was refused): at the stored epoch that bumps it; a commit is INVALID_TXN_STATE."""
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.init()
    # Without TV2 there is nothing to abort (as before).
    assert (await p.end(False)).error == INVALID_TXN_STATE
    assert (await p.end(True, tv2=True)).error == INVALID_TXN_STATE
    done = await p.end(False, tv2=True)
    assert (done.error, done.registered, done.producer_epoch) == (NONE, False, p.epoch + 1)
    s = await p.state()
    assert (s.state, s.producer_epoch) == (COMPLETE_ABORT, p.epoch + 1)
    # Again from CompleteAbort at the new epoch: another empty transaction ended.
    p.epoch += 1
    assert (await p.end(False, tv2=True)).producer_epoch == p.epoch + 1
    assert await count_rows(coordinator, "batches") == 0


async def test_a_tv2_end_at_the_last_epoch_moves_to_a_new_producer_id(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.init()
    await _set_epoch(coordinator, "tx", 32766)
    p.epoch = 32766
    assert await p.add(P10) == NONE
    done = await p.end(True, P10, tv2=True)
    assert done.error == NONE and done.producer_id > p.pid and done.producer_epoch == 0
    s = await p.state()
    assert (s.producer_id, s.producer_epoch, s.state) == (done.producer_id, 0, COMPLETE_COMMIT)
    # The marker closed the old producer id's transaction (at the int16 maximum epoch).
    assert await lso(coordinator) == await hwm(coordinator)


async def test_complete_errors_change_nothing(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await p.init()

    async def end(tid: str, pid: int, epoch: int) -> CompleteResult:
        k = key()
        done = await c.txn_complete(
            CompleteRequest(tid, pid, epoch, True, False, k, 1, 7, [marker(P10)], NOW)
        )
        assert await c.unknown_objects([k]) == [k]
        return done

    # Empty (nothing was added) is not a transaction to end.
    assert await end("tx", p.pid, p.epoch) == CompleteResult(INVALID_TXN_STATE, [-1], False)
    assert await p.add(P10) == NONE
    await p.send(P10)
    before = await p.state()
    assert (await end("nope", p.pid, p.epoch)).error == INVALID_PRODUCER_ID_MAPPING
    assert (await end("tx", p.pid + 1, p.epoch)).error == INVALID_PRODUCER_ID_MAPPING
    assert (await end("tx", p.pid, p.epoch + 1)).error == PRODUCER_FENCED
    assert await p.state() == before
    assert (await hwm(c), await lso(c)) == (1, 0)


async def test_markers_for_deleted_logs_are_skipped(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await p.begin(P10, P20)
    await p.send(P20)
    await c.delete_logs([T2], NOW)
    k = key()
    assert await p.end(True, P10, P20, object_key=k) == CompleteResult(NONE, [0, -1], True, 1)
    assert await c.unknown_objects([k]) == []
    # Every marker's log gone: nothing to register.
    await p.begin(P20)
    k = key()
    assert await p.end(False, P20, object_key=k) == CompleteResult(NONE, [-1], False, 2)
    assert await c.unknown_objects([k]) == [k]
    assert (await p.state()).state == COMPLETE_ABORT


async def test_a_transaction_of_only_offsets_ends_without_markers(
    coordinator: BatchCoordinator,
) -> None:
    p = Producer(coordinator)
    await p.begin(groups=["g"])
    k = key()
    assert await p.end(True, object_key=k) == CompleteResult(NONE, [], False, 1)
    assert await coordinator.unknown_objects([k]) == [k]
    assert (await p.state()).state == COMPLETE_COMMIT


# --------------------------------------------------------------------------- commit_file


async def test_transactional_batches_outside_their_transaction_are_refused(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    c = coordinator
    idempotent = await c.allocate_producer_ids(1)
    p = Producer(c)
    await p.init()
    unknown_log = batch(PartitionKey(T2, 9), p.pid, p.epoch, 0)
    k = key()
    results = await c.commit_file(
        k,
        1000,
        7,
        [
            batch(P10, idempotent, 0, 0),  # no transaction at all
            batch(P10, p.pid, p.epoch, 0),  # Empty: nothing added
            batch(P10, -1, -1, -1),  # no producer id
            unknown_log,
        ],
        NOW,
    )
    assert [r.error for r in results] == [INVALID_TXN_STATE] * 3 + [UNKNOWN]
    assert k in {f.object_key for f in await c.files_to_delete(BIG, 100)}  # nothing accepted
    assert await p.add(P11) == NONE
    assert (await p.send(P10)).error == INVALID_TXN_STATE  # partition not added
    assert (await p.send(P11)).error == NONE
    assert (await p.end(True, P11)).error == NONE
    assert (await p.send(P11)).error == INVALID_TXN_STATE  # the transaction ended
    assert (await hwm(c), await hwm(c, P11), await lso(c, P11)) == (0, 2, 2)


async def test_a_transactional_batch_of_another_epoch_is_invalid_producer_epoch(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.begin(P10)
    for epoch in (p.epoch - 1, p.epoch + 1):
        (r,) = await commit(coordinator, batch(P10, p.pid, epoch, 0))
        assert r.error == INVALID_PRODUCER_EPOCH
    (r,) = await commit(coordinator, batch(P10, p.pid, p.epoch, 0))
    assert r.error == NONE


async def test_non_transactional_batches_open_nothing(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    p = Producer(coordinator)
    await p.begin(P10)
    # The same producer's idempotent, non-transactional batch: no verification, no LSO.
    (r,) = await commit(coordinator, batch(P11, p.pid, p.epoch, 0, transactional=False))
    assert r.error == NONE
    assert await lso(coordinator, P11) == 1


async def test_duplicate_retries_do_not_reopen_a_transaction(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await p.begin(P10)
    first = p.batch(P10)
    assert (await commit(c, first))[0].base_offset == 0
    assert (await p.end(True, P10)).error == NONE  # marker at 1
    # The next transaction of the same epoch; a late retry of the first batch is a
    # duplicate (its original offset) and must not open the transaction back at 0.
    assert await p.add(P10) == NONE
    (dup,) = await commit(c, first)
    assert (dup.error, dup.base_offset) == (NONE, 0)
    assert await lso(c) == 2 == await hwm(c)
    # As on Kafka (its verification keeps the lowest sequence seen, 0), the transaction's
    # own next batch may not come first now: abortable, the producer bumps its epoch.
    assert (await commit(c, p.batch(P10)))[0].error == OUT_OF_ORDER
    assert (await p.end(False, P10)).error == NONE  # marker at 2
    await p.init()
    assert await p.add(P10) == NONE
    # A duplicate within one call, after its original: the transaction opens at 3 once.
    b = p.batch(P10, count=2)
    assert [(r.error, r.base_offset) for r in await commit(c, b, b)] == [(NONE, 3), (NONE, 3)]
    assert await lso(c) == 3
    assert (await p.send(P10)).base_offset == 5
    assert await lso(c) == 3


async def test_several_batches_of_one_call_open_at_the_first(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    c = coordinator
    a, b = Producer(c, "a"), Producer(c, "b")
    await a.begin(P10, P11)
    await b.begin(P10)
    results = await commit(c, plain(P10), b.batch(P10), a.batch(P10), a.batch(P11), a.batch(P10))
    assert [r.base_offset for r in results] == [0, 1, 2, 0, 3]
    assert (await lso(c), await lso(c, P11)) == (1, 0)
    assert (await b.end(False, P10)).offsets == [4]
    assert (await lso(c), await hwm(c)) == (2, 5)
    assert (await a.end(False, P10, P11)).offsets == [5, 1]
    assert await lso(c) == 6
    assert sorted_aborted(await find(c, 0)) == [
        AbortedTransaction(b.pid, 1),
        AbortedTransaction(a.pid, 2),
    ]


# --------------------------------------------------------------------------- LSO / fetch


async def test_last_stable_offset_is_the_smallest_open_first_offset(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    c = coordinator
    a, b = Producer(c, "a"), Producer(c, "b")
    assert await lso(c) == 0  # empty log: the high watermark
    await commit(c, plain(P10, count=2))
    assert await lso(c) == 2
    await a.begin(P10)
    await b.begin(P10)
    assert (await a.send(P10)).base_offset == 2
    assert (await b.send(P10)).base_offset == 3
    await commit(c, plain(P10))  # 4
    assert await lso(c) == 2
    assert (await a.end(True, P10)).offsets == [5]
    assert await lso(c) == 3  # b is still open
    uncommitted = await find(c, 0, read_committed=False)
    assert (uncommitted.high_watermark, uncommitted.last_stable_offset) == (6, 3)
    assert len(uncommitted.batches) == 5 and uncommitted.aborted is None
    committed = await find(c, 0)
    assert offsets_of(committed) == [(0, 1), (2, 2)]
    assert committed.last_stable_offset == 3 and committed.aborted == []
    assert (await b.end(False, P10)).offsets == [6]
    committed = await find(c, 0)
    assert committed.last_stable_offset == 7
    assert offsets_of(committed) == [(0, 1), (2, 2), (3, 3), (4, 4), (5, 5), (6, 6)]
    assert committed.aborted == [AbortedTransaction(b.pid, 3)]


async def test_read_committed_at_or_past_the_lso_answers_nothing(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await commit(c, plain(P10))
    await p.begin(P10)
    await p.send(P10)  # 1
    await commit(c, plain(P10))  # 2
    for offset in (1, 2, 3):  # at the LSO, between it and the high watermark, at the hwm
        r = await find(c, offset)
        assert (r.error, r.batches, r.aborted, r.last_stable_offset) == (NONE, [], [], 1)
    r = await find(c, 4)
    assert (r.error, r.last_stable_offset) == (OUT_OF_RANGE, 1)
    assert offsets_of(await find(c, 0)) == [(0, 0)]
    assert offsets_of(await find(c, 1, read_committed=False)) == [(1, 1), (2, 2)]
    unknown = await find(c, 0, PartitionKey(T2, 7))
    assert unknown.error == UNKNOWN


async def _aborted_txn(c: BatchCoordinator, tid: str, *parts: PartitionKey) -> Producer:
    p = Producer(c, tid)
    await p.begin(*parts)
    for k in parts:
        await p.send(k)
    assert (await p.end(False, *parts)).error == NONE
    return p


async def test_aborted_transactions_are_those_overlapping_the_batches_returned(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    c = coordinator
    a = await _aborted_txn(c, "a", P10)  # batch 0, marker 1
    b = await _aborted_txn(c, "b", P10)  # batch 2, marker 3
    d = await _aborted_txn(c, "d", P10)  # batch 4, marker 5
    A, B, D = (AbortedTransaction(p.pid, f) for p, f in ((a, 0), (b, 2), (d, 4)))
    assert sorted_aborted(await find(c, 0)) == [A, B, D]
    assert sorted_aborted(await find(c, 2)) == [B, D]
    # One batch each (max_bytes 1: the first batch of the answer always goes).
    assert (await find(c, 0, max_bytes=1)).aborted == [A]
    assert (await find(c, 1, max_bytes=1)).aborted == [A]  # marker 1 ends A
    assert (await find(c, 2, max_bytes=1)).aborted == [B]
    assert (await find(c, 3, max_bytes=1)).aborted == [B]
    assert (await find(c, 4, max_bytes=1)).aborted == [D]
    assert (await find(c, 6)).aborted == []  # at the high watermark: no batch, none


async def test_a_long_aborted_transaction_is_found_past_later_ones(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    c = coordinator
    long = Producer(c, "long")
    await long.begin(P10)
    await long.send(P10)  # 0
    short1 = await _aborted_txn(c, "s1", P10)  # batch 1, marker 2
    short2 = await _aborted_txn(c, "s2", P10)  # batch 3, marker 4
    await commit(c, plain(P10))  # 5
    assert (await long.end(False, P10)).offsets == [6]
    L, S1, S2 = (AbortedTransaction(p.pid, f) for p, f in ((long, 0), (short1, 1), (short2, 3)))
    assert (await find(c, 0, max_bytes=1)).aborted == [L]
    assert sorted_aborted(await find(c, 0)) == [L, S1, S2]
    assert sorted_aborted(await find(c, 3, max_bytes=1)) == [L, S2]
    assert (await find(c, 5, max_bytes=1)).aborted == [L]
    assert (await find(c, 6, max_bytes=1)).aborted == [L]
    # Later aborts, after everything was stable again, do not reach back.
    later = await _aborted_txn(c, "later", P10)  # batch 7, marker 8
    assert (await find(c, 6, max_bytes=1)).aborted == [L]
    assert sorted_aborted(await find(c, 6)) == [L, AbortedTransaction(later.pid, 7)]


async def test_several_partitions_in_one_fetch(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await p.begin(P10, P11)
    await commit(c, plain(P11), p.batch(P10), p.batch(P11))
    reqs = [FindRequest(k.topic_id, k.partition, 0, BIG) for k in (P10, P11, P20)]
    got = await c.find_batches(reqs, BIG, read_committed=True)
    assert [(r.last_stable_offset, offsets_of(r), r.aborted) for r in got] == [
        (0, [], []),
        (1, [(0, 0)], []),
        (0, [], []),
    ]
    await p.end(False, P10, P11)
    got = await c.find_batches(reqs, BIG, read_committed=True)
    assert [(r.last_stable_offset, len(r.batches)) for r in got] == [(2, 2), (3, 3), (0, 0)]
    assert [r.aborted for r in got] == [
        [AbortedTransaction(p.pid, 0)],
        [AbortedTransaction(p.pid, 1)],
        [],
    ]
    got = await c.find_batches(reqs, BIG)
    assert [r.aborted for r in got] == [None, None, None]


async def test_a_fetch_of_many_partitions_answers_each_as_alone(
    coordinator: BatchCoordinator,
) -> None:
    # A consumer's fetch names many partitions of a topic (a backend may look them up
    # together): each is answered as a fetch of it alone, open transactions (the last
    # stable offset), a moved log start, unknown and repeated partitions included.
    c = coordinator
    keys = [PartitionKey(T1, i) for i in range(12)]
    await setup_logs(c, *keys, P20)
    rnd = random.Random(7)
    for k in keys:
        await commit(c, *(plain(k) for _ in range(rnd.randrange(4))))
    open_txn = Producer(c, "open")
    await open_txn.begin(keys[2], keys[5])
    await open_txn.send(keys[2])
    await open_txn.send(keys[5])
    await commit(c, plain(keys[2]))
    aborted = await _aborted_txn(c, "gone", keys[7])
    assert aborted.pid >= 0
    await commit(c, plain(keys[9]), plain(keys[9]), plain(keys[9]))
    (moved,) = await c.delete_records([(keys[9], 2)], NOW)
    assert moved.error == NONE
    asked = [(k, o) for k in keys for o in (0, 1, 2)] + [
        (PartitionKey(T1, 13), 0),  # no such log, inside the asked range
        (keys[3], 0),  # asked twice
        (P20, 0),
    ]
    rnd.shuffle(asked)
    reqs = [FindRequest(k.topic_id, k.partition, o, BIG) for k, o in asked]
    for read_committed in (True, False):
        together = await c.find_batches(reqs, BIG, read_committed=read_committed)
        alone = [(await c.find_batches([r], BIG, read_committed))[0] for r in reqs]

        def seen(r: FindResult) -> Any:
            return (
                r.error,
                r.log_start_offset,
                r.high_watermark,
                r.last_stable_offset,
                offsets_of(r),
                r.aborted,
            )

        assert [seen(r) for r in together] == [seen(r) for r in alone]
        # Not all alike: the case covers what a fetch's partitions may differ in.
        assert {r.error for r in together} == {NONE, UNKNOWN, OUT_OF_RANGE}
        assert len({r.last_stable_offset - r.high_watermark for r in together}) > 1


async def test_list_offsets_read_committed(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await commit(c, plain(P10, ts=100))  # 0
    await p.begin(P10)
    await p.send(P10, ts=500)  # 1
    await commit(c, plain(P10, ts=300))  # 2
    assert await list_offset(c, LATEST_TIMESTAMP, True) == ListOffsetsResult(NONE, 1, -1)
    assert await list_offset(c, LATEST_TIMESTAMP, False) == ListOffsetsResult(NONE, 3, -1)
    assert await list_offset(c, EARLIEST_TIMESTAMP, True) == ListOffsetsResult(NONE, 0, -1)
    assert await list_offset(c, 50, True) == ListOffsetsResult(NONE, 0, 100)
    assert await list_offset(c, 200, True) == ListOffsetsResult(NONE, -1, -1)  # offset 1
    assert await list_offset(c, 200, False) == ListOffsetsResult(NONE, 1, 500)
    assert await list_offset(c, MAX_TIMESTAMP, True) == ListOffsetsResult(NONE, -1, -1)
    assert await list_offset(c, MAX_TIMESTAMP, False) == ListOffsetsResult(NONE, 1, 500)
    await p.end(True, P10)
    assert await list_offset(c, LATEST_TIMESTAMP, True) == ListOffsetsResult(NONE, 4, -1)
    assert await list_offset(c, 200, True) == ListOffsetsResult(NONE, 1, 500)
    assert (await list_offset(c, 0, True, PartitionKey(T2, 5))).error == UNKNOWN


async def test_the_lso_is_never_below_the_log_start(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await p.begin(P10)
    await commit(c, plain(P10), p.batch(P10), plain(P10), plain(P10))  # txn opens at 1
    assert await lso(c) == 1
    (r,) = await c.delete_records([(P10, 3)], NOW)
    assert r.low_watermark == 3
    assert await lso(c) == 3
    assert (await list_offset(c, LATEST_TIMESTAMP, True)).offset == 3
    got = await find(c, 3)
    assert (got.error, got.batches, got.last_stable_offset) == (NONE, [], 3)


async def test_moving_the_log_start_drops_aborted_transactions_below_it(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    c = coordinator
    for tid in ("a", "b", "d"):
        await _aborted_txn(c, tid, P10)  # batches 0, 2, 4; markers 1, 3, 5
    await _aborted_txn(c, "e", P11)  # another log keeps its entry
    assert await count_rows(c, "aborted_txns") == 4
    await c.delete_records([(P10, 2)], NOW)  # a's marker (1) is below
    assert await count_rows(c, "aborted_txns") == 3
    await c.delete_records([(P10, 3)], NOW)  # b's marker (3) is not below 3
    assert await count_rows(c, "aborted_txns") == 3
    # Retention moving the start past b's and d's markers (everything is old).
    policy = RetentionPolicy(T1, 0, retention_ms=1, retention_bytes=-1)
    await c.enforce_retention([policy], NOW + 10**9)
    assert (await c.log_info([P10]))[0].log_start_offset == 6
    assert await count_rows(c, "aborted_txns") == 1


async def test_delete_logs_forgets_open_and_aborted_transactions(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    c = coordinator
    await _aborted_txn(c, "a", P20)
    p = Producer(c, "b")
    await p.begin(P20, P10)
    await p.send(P20)
    await p.send(P10)
    await c.delete_logs([T2], NOW)
    assert await count_rows(c, "aborted_txns") == 0
    assert await count_rows(c, "open_txns") == 1  # T1's
    # The topic created again starts clean: no open transaction holds its LSO back.
    await c.create_logs([P20])
    await commit(c, plain(P20))
    assert await lso(c, P20) == 1
    assert (await find(c, 0, P20)).aborted == []
    assert await lso(c, P10) == 0


# --------------------------------------------------------------------------- expiry / list


async def test_expired_transactions_oldest_first(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    c = coordinator
    a, b, e = Producer(c, "a"), Producer(c, "b"), Producer(c, "e")
    await a.init(timeout_ms=1000)
    await b.init(timeout_ms=100)
    await e.init(timeout_ms=1)  # Empty: never expires
    assert await a.add(P10, groups=["g"], now=NOW) == NONE
    assert await b.add(P11, P10, now=NOW + 500) == NONE
    assert await c.txn_expired(NOW + 600, 10) == []  # b ends at 600: not before
    assert [s.transactional_id for s in await c.txn_expired(NOW + 601, 10)] == ["b"]
    got = await c.txn_expired(NOW + 1001, 10)
    assert got == [
        TransactionState("a", a.pid, a.epoch, ONGOING, 1000, NOW, NOW, [P10], ["g"]),
        TransactionState("b", b.pid, b.epoch, ONGOING, 100, NOW + 500, NOW + 500, [P10, P11]),
    ]
    assert [s.transactional_id for s in await c.txn_expired(NOW + 10**6, 1)] == ["a"]
    await a.end(False, P10, bump=True)
    assert [s.transactional_id for s in await c.txn_expired(NOW + 10**6, 10)] == ["b"]


async def test_idle_ids_are_forgotten_but_never_ongoing_ones(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    c = coordinator
    a, b, e = Producer(c, "a"), Producer(c, "b"), Producer(c, "e")
    await a.begin(P10)
    assert (await a.end(True, P10)).error == NONE  # CompleteCommit, last change at NOW
    await b.begin(P11)  # Ongoing since NOW
    await e.init()  # Empty since NOW
    assert await c.txn_forget_idle(NOW, 10) == []  # changed at the cutoff: not before it
    assert await c.txn_forget_idle(NOW + 1, 1) == ["a"]
    assert await c.txn_forget_idle(NOW + 1, 10) == ["e"]
    got = await c.txn_get(["a", "b", "e"])
    assert got[0] is None and got[2] is None
    assert got[1] is not None and got[1].state == ONGOING
    again = await c.txn_init("a", TIMEOUT, -1, -1, NOW + 2)  # starts afresh
    assert again.error == NONE and again.producer_epoch == 0
    assert again.producer_id not in (a.pid, b.pid, e.pid)


async def test_describe_producers_shows_each_producers_newest_batch_and_open_transaction(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    c = coordinator
    # An idempotent producer (id 900): two batches, the newest tells its state.
    await commit(c, batch(P10, 900, 3, 0, count=2, ts=50, transactional=False))
    await commit(c, batch(P10, 900, 3, 2, count=3, ts=70, transactional=False))
    t = Producer(c, "t")
    await t.begin(P10)
    assert (await t.send(P10, count=2, ts=80)).base_offset == 5
    got = await c.describe_producers([P10, P11, PartitionKey(T2, 9)])
    assert got[0] == sorted(
        [
            ActiveProducer(900, 3, 4, 70, -1),
            ActiveProducer(t.pid, t.epoch, 1, 80, 5),  # open since offset 5
        ],
        key=lambda p: p.producer_id,
    )
    assert got[1] == []  # no producer wrote there
    assert got[2] is None  # no such log
    assert (await t.end(True, P10)).error == NONE
    [after] = await c.describe_producers([P10])
    assert after is not None
    assert [p.current_txn_start_offset for p in after] == [-1, -1]


async def test_list_filters_by_state_producer_and_duration(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator)
    c = coordinator
    ps = {tid: Producer(c, tid) for tid in ("d", "b", "a", "c")}
    for p in ps.values():
        await p.init()
    assert await ps["a"].add(P10, now=NOW) == NONE
    assert await ps["b"].add(P11, now=NOW + 100) == NONE
    assert await ps["c"].add(P20, now=NOW) == NONE
    await ps["c"].end(True, P20)

    async def ids(states: Sequence[str] = (), pids: Sequence[int] = (), dur: int = -1) -> list[str]:
        got = await c.txn_list(states, pids, dur, NOW + 1000)
        return [s.transactional_id for s in got]

    assert await ids() == ["a", "b", "c", "d"]
    assert await ids([ONGOING]) == ["a", "b"]
    assert await ids([EMPTY, COMPLETE_COMMIT]) == ["c", "d"]
    assert await ids(pids=[ps["d"].pid, ps["a"].pid, 10**9]) == ["a", "d"]
    assert await ids([ONGOING], [ps["d"].pid]) == []
    assert await ids(dur=950) == ["a"]
    assert await ids(dur=900) == ["a", "b"]
    assert await ids(dur=0) == ["a", "b"]
    full = (await c.txn_list([ONGOING], [ps["b"].pid], -1, NOW))[0]
    assert (full.producer_id, full.producer_epoch, full.state, full.started_ms) == (
        ps["b"].pid,
        0,
        ONGOING,
        NOW + 100,
    )


# --------------------------------------------------------------------------- durability


async def test_state_survives_close_and_reopen(coordinator_factory: CoordinatorFactory) -> None:
    c = await coordinator_factory.open()
    await setup_logs(c)
    a, b = Producer(c, "a"), Producer(c, "b")
    await a.begin(P10, groups=["g"])
    await a.send(P10)  # 0, open
    aborted = await _aborted_txn(c, "b", P11)  # batch 0, marker 1
    before = await c.txn_get(["a", "b"])
    await c.close()

    c = await coordinator_factory.open()
    assert await c.txn_get(["a", "b"]) == before
    assert (await lso(c), await lso(c, P11)) == (0, 2)
    assert (await find(c, 0, P11)).aborted == [AbortedTransaction(aborted.pid, 0)]
    a.c = b.c = c
    assert (await a.send(P10)).base_offset == 1  # the same transaction goes on
    assert (await a.end(True, P10)).offsets == [2]
    assert await lso(c) == 3


async def test_concurrent_commits_and_completions_never_deadlock_and_batches_precede_markers(
    coordinator_factory: CoordinatorFactory,
) -> None:
    """Two coordinators (two brokers) on one database: produce calls mixing the batches
    of several transactional producers race with those producers' EndTxn. Nothing may
    deadlock; every batch is either refused or below its producer's marker."""
    c1 = await coordinator_factory.open()
    c2 = await coordinator_factory.open()
    logs = [PartitionKey(T1, n) for n in range(4)]
    await c1.create_logs(logs)
    rng = random.Random(7)
    producers = [Producer(rng.choice([c1, c2]), f"tx-{i}") for i in range(8)]
    for p in producers:
        await p.begin(*logs)
    done: dict[str, CompleteResult] = {}
    decision = {p.tid: rng.random() < 0.5 for p in producers}
    # (producer, partition) -> accepted base offsets; sequences of a pair stay ordered
    # by sending the pair's batches one call at a time (a lock per pair, taken sorted).
    accepted: dict[tuple[str, PartitionKey], list[int]] = {}
    refused: list[int] = []
    locks = {(p.tid, k): asyncio.Lock() for p in producers for k in logs}

    async def produce(worker: int) -> None:
        wrng = random.Random(worker)
        c = (c1, c2)[worker % 2]
        while len(done) < len(producers):
            pairs = sorted(wrng.sample(sorted(locks, key=str), 3), key=str)
            held = [locks[pair] for pair in pairs]
            for lock in held:
                await lock.acquire()
            try:
                by_tid = {p.tid: p for p in producers}
                batches = [by_tid[tid].batch(k) for tid, k in pairs]
                results = await c.commit_file(key(), 1000, 7, batches, NOW)
                for (tid, k), b, r in zip(pairs, batches, results, strict=True):
                    if r.error == NONE:
                        accepted.setdefault((tid, k), []).append(r.base_offset)
                    else:
                        refused.append(r.error)
                        by_tid[tid].seq[k] = b.base_sequence  # not taken: send it again
            finally:
                for lock in held:
                    lock.release()

    async def end(p: Producer) -> None:
        await asyncio.sleep(random.Random(p.tid).uniform(0.01, 0.3))
        p.c = rng.choice([c1, c2])
        done[p.tid] = await p.end(decision[p.tid], *logs)

    await asyncio.wait_for(
        asyncio.gather(*(produce(w) for w in range(8)), *(end(p) for p in producers)),
        timeout=120,
    )
    assert all(r.error == NONE and r.registered for r in done.values()), done
    assert set(refused) <= {INVALID_TXN_STATE}
    assert accepted, "no batch got in before its marker"
    for (tid, k), bases in accepted.items():
        marker_offset = done[tid].offsets[logs.index(k)]
        assert max(bases) < marker_offset, (tid, k, bases, marker_offset)
    # Everything ended: every log is stable, and the aborted producers are listed where
    # they had batches, from their first one.
    pids = {p.tid: p.pid for p in producers}
    for k in logs:
        r = await find(c1, 0, k)
        assert r.last_stable_offset == r.high_watermark
        want = sorted(
            (pids[tid], min(bases))
            for (tid, kk), bases in accepted.items()
            if kk == k and not decision[tid]
        )
        assert sorted((a.producer_id, a.first_offset) for a in r.aborted or []) == want


# --------------------------------------------------------------- pending classic markers

# Classic partitions: their markers go to the partition leaders, so txn_complete names them
# as pending, not as markers; they are in the transaction like any other. (Every topic has
# logs here, classic ones too: some tests create them.)
C1, C2 = PartitionKey(UUID(int=0xC1), 0), PartitionKey(UUID(int=0xC1), 1)


async def test_pending_markers_are_recorded_with_the_outcome_until_written(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await p.begin(P10, C1, C2)
    await p.send(P10)
    done = await c.txn_complete(
        CompleteRequest(
            "tx", p.pid, p.epoch, True, False, key(), 60, 7, [marker(P10)], NOW, pending=[C2, C1]
        )
    )
    assert done.error == NONE and done.offsets == [1]
    assert (await p.state()).state == COMPLETE_COMMIT
    assert await lso(c) == await hwm(c)  # the diskless marker is written at once
    [pending] = await c.txn_pending_markers(10)
    assert (pending.transactional_id, pending.producer_id, pending.producer_epoch) == (
        "tx",
        p.pid,
        p.epoch,
    )
    assert (pending.state, pending.partitions) == (COMPLETE_COMMIT, [C1, C2])
    # Shown as Kafka shows it while its markers are owed: PrepareCommit.
    [got] = await c.txn_get(["tx"])
    assert got is not None and (got.markers_pending, got.shown_state) == (True, "PrepareCommit")
    [listed] = await c.txn_list([COMPLETE_COMMIT], [], -1, NOW)
    assert (listed.transactional_id, listed.shown_state) == ("tx", "PrepareCommit")

    # Kafka's PrepareCommit: the id takes no new transaction until the markers are written.
    assert (await c.txn_init("tx", TIMEOUT, -1, -1, NOW)).error == CONCURRENT_TRANSACTIONS
    assert (await c.txn_init("tx", TIMEOUT, p.pid, p.epoch + 5, NOW)).error == PRODUCER_FENCED
    assert await p.add(P11) == CONCURRENT_TRANSACTIONS
    assert await p.add() == CONCURRENT_TRANSACTIONS
    assert await c.txn_add("tx", p.pid + 1, p.epoch, [P11], [], NOW) == (
        INVALID_PRODUCER_ID_MAPPING
    )
    assert (await p.end(True)).error == CONCURRENT_TRANSACTIONS  # a retried EndTxn too
    assert (await p.end(True, epoch=p.epoch + 1)).error == CONCURRENT_TRANSACTIONS
    assert await c.txn_forget_idle(BIG, 10) == []
    assert (await p.state()).state == COMPLETE_COMMIT

    # Acknowledgements of another epoch are not these markers'.
    await c.txn_markers_written("tx", p.pid, p.epoch + 1, [C1, C2])
    assert [s.partitions for s in await c.txn_pending_markers(10)] == [[C1, C2]]
    await c.txn_markers_written("tx", p.pid, p.epoch, [C1])
    assert [s.partitions for s in await c.txn_pending_markers(10)] == [[C2]]
    await c.txn_markers_written("tx", p.pid, p.epoch, [C2, C1])  # C1 again: harmless
    assert await c.txn_pending_markers(10) == []
    [got] = await c.txn_get(["tx"])
    assert got is not None and (got.markers_pending, got.shown_state) == (False, "CompleteCommit")
    [listed] = await c.txn_list([], [], -1, NOW)
    assert listed.shown_state == "CompleteCommit"
    # Written: a retried EndTxn is answered as before, and records nothing again.
    retried = await c.txn_complete(
        CompleteRequest("tx", p.pid, p.epoch, True, False, key(), 60, 7, [], NOW, pending=[C1])
    )
    assert retried.error == NONE
    assert await c.txn_pending_markers(10) == []
    await p.init()
    assert await p.add(C1) == NONE


async def test_pending_markers_of_a_coordinator_abort_carry_the_bumped_epoch(
    coordinator: BatchCoordinator,
) -> None:
    c = coordinator
    a, b = Producer(c, "a"), Producer(c, "b")
    await a.begin(C1)
    await b.begin(C2)
    done = await c.txn_complete(
        CompleteRequest("a", a.pid, a.epoch, False, True, key(), 60, 7, [], NOW, pending=[C1])
    )
    assert (done.error, done.registered) == (NONE, False)
    assert (await b.end(False, C2)).error == NONE  # nothing pending: a diskless-only end
    [pending] = await c.txn_pending_markers(10)
    assert (pending.transactional_id, pending.state) == ("a", COMPLETE_ABORT)
    assert (pending.producer_id, pending.producer_epoch) == (a.pid, a.epoch + 1)
    # b is untouched by a's pending markers.
    await b.init()
    assert await b.add(C2) == NONE
    assert await c.txn_pending_markers(0) == []
    await c.txn_markers_written("a", a.pid, a.epoch + 1, [C1])
    assert await c.txn_pending_markers(10) == []


async def test_a_refused_complete_records_no_pending_markers(
    coordinator: BatchCoordinator,
) -> None:
    c = coordinator
    p = Producer(c)
    await p.begin(C1, C2)
    # Names only one of the two partitions: the state moved on since it was read.
    refused = await c.txn_complete(
        CompleteRequest("tx", p.pid, p.epoch, True, False, key(), 60, 7, [], NOW, pending=[C1])
    )
    assert refused.error == CONCURRENT_TRANSACTIONS
    fenced = await c.txn_complete(
        CompleteRequest(
            "tx", p.pid, p.epoch + 1, True, False, key(), 60, 7, [], NOW, pending=[C1, C2]
        )
    )
    assert fenced.error == PRODUCER_FENCED
    assert await c.txn_pending_markers(10) == []
    assert (await p.state()).state == ONGOING


async def test_a_classic_partition_takes_no_marker_in_its_diskless_log(
    coordinator: BatchCoordinator,
) -> None:
    # A transaction over a diskless and a classic partition (both have logs here): the
    # markers name the diskless one, ``pending`` the classic one; its log takes nothing.
    c = coordinator
    await setup_logs(c, P10, C1)
    p = Producer(c)
    await p.begin(P10, C1)
    await p.send(P10)
    done = await c.txn_complete(
        CompleteRequest(
            "tx", p.pid, p.epoch, False, False, key(), 60, 7, [marker(P10)], NOW, pending=[C1]
        )
    )
    assert (done.error, done.offsets, done.registered) == (NONE, [1], True)
    assert await hwm(c, C1) == 0
    assert (await find(c, 0, C1, read_committed=False)).batches == []
    assert await lso(c, C1) == 0
    # The diskless partition's transaction is aborted and closed by its marker.
    assert offsets_of(await find(c, 0, read_committed=False)) == [(0, 0), (1, 1)]
    assert await lso(c) == await hwm(c) == 2
    [pending] = await c.txn_pending_markers(10)
    assert (pending.state, pending.partitions) == (COMPLETE_ABORT, [C1])


async def test_complete_names_each_partition_once_as_marker_or_pending(
    coordinator: BatchCoordinator,
) -> None:
    c = coordinator
    await setup_logs(c, P10, C1)
    p = Producer(c)
    await p.begin(P10, C1)

    async def complete(markers: list[Marker], pending: list[PartitionKey]) -> int:
        done = await c.txn_complete(
            CompleteRequest(
                "tx", p.pid, p.epoch, True, False, key(), 60, 7, markers, NOW, pending=pending
            )
        )
        return done.error

    # A marker twice, a partition left out, or a stranger named: the caller read another
    # state; nothing changes.
    assert await complete([marker(P10), marker(P10)], [C1]) == CONCURRENT_TRANSACTIONS
    assert await complete([marker(P10)], []) == CONCURRENT_TRANSACTIONS
    assert await complete([marker(P10)], [C1, C2]) == CONCURRENT_TRANSACTIONS
    assert await complete([], [P10, C1, C2]) == CONCURRENT_TRANSACTIONS
    assert (await p.state()).state == ONGOING
    assert await c.txn_pending_markers(10) == []
    assert await hwm(c) == await hwm(c, C1) == 0
    assert await complete([marker(P10)], [C1]) == NONE
    assert [s.partitions for s in await c.txn_pending_markers(10)] == [[C1]]


async def test_a_marker_for_a_pending_classic_partition_is_not_written(
    coordinator: BatchCoordinator,
) -> None:
    # A broker from before markers were diskless-only gives one for every partition, and
    # names the classic ones as pending too: the classic one's log still takes nothing.
    c = coordinator
    await setup_logs(c, P10, C1)
    p = Producer(c)
    await p.begin(P10, C1)
    done = await c.txn_complete(CompleteRequest(
        "tx", p.pid, p.epoch, True, False, key(), 120, 7,
        [marker(C1), marker(P10)], NOW, pending=[C1, C1],
    ))  # fmt: skip
    assert (done.error, done.offsets, done.registered) == (NONE, [-1, 0], True)
    assert await hwm(c, C1) == 0 and await hwm(c) == 1
    assert [s.partitions for s in await c.txn_pending_markers(10)] == [[C1]]
    # Only classic partitions: nothing is written, no object registered.
    await c.txn_markers_written("tx", p.pid, p.epoch, [C1])
    await p.begin(C1)
    done = await c.txn_complete(
        CompleteRequest(
            "tx", p.pid, p.epoch, True, False, key(), 60, 7, [marker(C1)], NOW, pending=[C1]
        )
    )
    assert (done.error, done.offsets, done.registered) == (NONE, [-1], False)
    assert await hwm(c, C1) == 0


async def test_a_pending_partition_with_an_open_diskless_transaction_is_refused(
    coordinator: BatchCoordinator,
) -> None:
    # Named classic, but the producer's open transaction is in its diskless log (it
    # migrated to diskless since the caller looked): the caller must read again.
    c = coordinator
    await setup_logs(c, P10, P11)
    p = Producer(c)
    await p.begin(P10, P11)
    await p.send(P11)
    done = await c.txn_complete(
        CompleteRequest(
            "tx", p.pid, p.epoch, False, False, key(), 60, 7, [marker(P10)], NOW, pending=[P11]
        )
    )
    assert done.error == CONCURRENT_TRANSACTIONS
    assert (await p.state()).state == ONGOING
    assert await c.txn_pending_markers(10) == []
    assert await hwm(c) == 0 and await lso(c, P11) == 0
    done = await c.txn_complete(
        CompleteRequest(
            "tx", p.pid, p.epoch, False, False, key(), 120, 7, [marker(P10), marker(P11)], NOW
        )
    )
    assert done.error == NONE and await lso(c, P11) == await hwm(c, P11) == 2


async def test_each_completion_has_the_next_number_and_its_markers_carry_it(
    coordinator: BatchCoordinator,
) -> None:
    """A classic marker names its transaction by the id's completion count, so that a late
    copy of an earlier transaction's marker can be told from the current one's."""
    c = coordinator
    p = Producer(c)
    numbers = []
    for commit_it in (True, False):
        await p.begin(C1)
        done = await c.txn_complete(
            CompleteRequest(
                "tx", p.pid, p.epoch, commit_it, False, key(), 0, 7, [], NOW, pending=[C1]
            )
        )
        assert done.error == NONE
        numbers.append(done.completions)
        [pending] = await c.txn_pending_markers(10)
        assert pending.completions == done.completions
        # A retry while its markers are owed is refused; once written it gets the number of
        # the transaction it repeats, not a new one.
        await c.txn_markers_written("tx", p.pid, p.epoch, [C1])
        retried = await c.txn_complete(
            CompleteRequest(
                "tx", p.pid, p.epoch, commit_it, False, key(), 0, 7, [], NOW, pending=[C1]
            )
        )
        assert (retried.error, retried.completions) == (NONE, done.completions)
    assert numbers == [1, 2]
    # A coordinator abort counts too, and a KIP-360 bump keeps counting.
    await p.begin(C1)
    aborted = await c.txn_complete(
        CompleteRequest("tx", p.pid, p.epoch, False, True, key(), 0, 7, [], NOW, pending=[C1])
    )
    assert aborted.completions == 3


async def test_a_reused_sequence_of_an_aborted_batch_blocks_the_rest_of_the_transaction(
    coordinator: BatchCoordinator,
) -> None:
    """KIP-890's verification (Kafka's VerificationStateEntry): until a batch of a
    transaction is written in a partition, the lowest sequence its batches showed there is
    kept and a higher one is refused. The nemesis found a committed transaction missing
    records without it: librdkafka purged a record whose request had failed in transport
    while aborting, and gave its sequence to the next transaction's first record, which
    was answered as a duplicate of the aborted one (as Kafka answers); the next records
    were then written and committed. Kafka refuses them (OUT_OF_ORDER_SEQUENCE_NUMBER),
    an abortable error: the producer aborts instead of committing without the record."""
    await setup_logs(coordinator)
    c = coordinator
    p = Producer(c)
    await p.begin(P10, P11)
    assert (await commit(c, batch(P10, p.pid, p.epoch, 0)))[0].error == NONE  # offset 0
    assert (await p.end(False, P10, P11)).error == NONE  # aborted: marker at 1
    assert await p.add(P10, P11) == NONE
    # The next transaction's first record reuses sequence 0: the aborted one's duplicate.
    dup = (await commit(c, batch(P10, p.pid, p.epoch, 0)))[0]
    assert (dup.error, dup.base_offset) == (NONE, 0)
    # Its next record is refused, in a later call and in the same call as a lower one.
    assert (await commit(c, batch(P10, p.pid, p.epoch, 1)))[0].error == OUT_OF_ORDER
    both = await commit(c, batch(P10, p.pid, p.epoch, 0), batch(P10, p.pid, p.epoch, 1))
    assert [r.error for r in both] == [NONE, OUT_OF_ORDER]
    assert await hwm(c) == 2
    # A new epoch (librdkafka's bump after the abortable error) starts the partition
    # again at sequence 0, in a new transaction.
    assert (await p.end(False, P10, P11)).error == NONE
    await p.init()
    assert await p.add(P10) == NONE
    assert (await commit(c, batch(P10, p.pid, p.epoch, 0)))[0].base_offset == 3
    assert (await commit(c, batch(P10, p.pid, p.epoch, 1)))[0].base_offset == 4
