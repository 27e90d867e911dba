"""MarkerWriter (broker/transactions/txn_marker_writer.py) on each batch coordinator backend: a
transaction's diskless partitions get their markers in the diskless logs, its classic ones
only from their leaders (recorded as pending until written)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from types import SimpleNamespace
from typing import Any
from uuid import UUID

import pytest

from broker.logs.classic.classic_markers import ClassicMarkerSender
from broker.node import Broker
from broker.transactions.txn_coordinator import TransactionCoordinator
from broker.transactions.txn_marker_writer import MarkerWriter
from protocol.control_batch import marker_batch, parse_marker
from protocol.records import parse_batches
from storage.coordinator import (
    BatchCoordinator,
    BatchToCommit,
    CoordinatorUnavailable,
    FindRequest,
)
from storage.objects import Chunks
from storage.objects.block_cache import BlockCache
from storage.objects.local import LocalObjectStore
from storage.objects.marker_objects import is_marker_key
from storage.partition_key import PartitionKey
from storage.transactions import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    CONCURRENT_TRANSACTIONS,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TXN_STATE,
    NONE,
    ONGOING,
    PRODUCER_FENCED,
    CompleteRequest,
    CompleteResult,
    TransactionState,
)

NOW = 1_700_000_000_000
BIG = 1 << 62
COORDINATOR_NOT_AVAILABLE = 15

DISKLESS = PartitionKey(UUID(int=0xD1), 0)
# Every topic has logs in the batch coordinator, classic ones too (broker/metadata/topics.py).
CLASSIC = PartitionKey(UUID(int=0xC1), 0)


class FakeClassic(ClassicMarkerSender):
    """The classic partitions and their leaders: markers are recorded, and acknowledged
    only when the test says so."""

    def __init__(self, classic: set[PartitionKey]) -> None:
        self.classic = classic
        # (partitions, commit, the transaction's number)
        self.sent: list[tuple[list[PartitionKey], bool, int]] = []
        self.acknowledge: list[Callable[[], Awaitable[None]]] = []

    def goes_to_leader(self, key: PartitionKey) -> bool:
        return key in self.classic

    async def write(
        self,
        partitions: Sequence[PartitionKey],
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        number: int,
        deadline_s: float | None = None,
        on_written: Callable[[], Awaitable[None]] | None = None,
    ) -> bool:
        self.sent.append((sorted(partitions, key=str), commit, number))
        if on_written is not None:
            self.acknowledge.append(on_written)
        return False


async def objects(store: LocalObjectStore) -> list[str]:
    return [o.key async for page in store.list_objects() for o in page]


async def batches(c: BatchCoordinator, key: PartitionKey) -> list[int]:
    req = FindRequest(key.topic_id, key.partition, 0, BIG)
    [found] = await c.find_batches([req], BIG, read_committed=False)
    return [b.base_offset for b in found.batches]


async def marker_at(
    c: BatchCoordinator, store: LocalObjectStore, key: PartitionKey, offset: int
) -> bytes:
    """The batch at ``offset`` as the fetch path reads it (another broker's cache)."""
    req = FindRequest(key.topic_id, key.partition, offset, BIG)
    [found] = await c.find_batches([req], BIG, read_committed=False)
    [batch] = [b for b in found.batches if b.base_offset == offset]
    views = await BlockCache(store).read(batch.object_key, batch.byte_offset, batch.byte_size)
    return b"".join(views)


async def hwm(c: BatchCoordinator, key: PartitionKey) -> int:
    return (await c.log_info([key]))[0].high_watermark


async def begin(c: BatchCoordinator, *parts: PartitionKey) -> TransactionState:
    init = await c.txn_init("tx", 60_000, -1, -1, NOW)
    assert init.error == NONE
    assert await c.txn_add("tx", init.producer_id, init.producer_epoch, parts, [], NOW) == NONE
    [state] = await c.txn_get(["tx"])
    assert state is not None
    return state


def writer(
    c: BatchCoordinator, tmp_path: Path, classic: set[PartitionKey]
) -> tuple[MarkerWriter, LocalObjectStore, FakeClassic]:
    store = LocalObjectStore(str(tmp_path / "objects"))
    w = MarkerWriter(store, c, BlockCache(store), 7, lambda _advanced: None)
    sender = FakeClassic(classic)
    w.classic = sender
    return w, store, sender


async def test_a_classic_partition_gets_no_marker_in_its_diskless_log(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    c = coordinator
    await c.create_logs([DISKLESS, CLASSIC])
    w, store, sender = writer(c, tmp_path, {CLASSIC})
    state = await begin(c, DISKLESS, CLASSIC)

    assert await w.end(state, commit=True, bump_epoch=False) == NONE
    # The diskless partition's marker is in its log; the classic one's log took nothing
    # (its marker goes to its leader).
    assert await batches(c, DISKLESS) == [0]
    assert await batches(c, CLASSIC) == []
    assert await hwm(c, CLASSIC) == 0
    assert sender.sent == [([CLASSIC], True, 1)]
    # No object: the marker is made from its file's key (storage/objects/marker_objects.py).
    assert await objects(store) == []
    assert parse_marker(await marker_at(c, store, DISKLESS, 0)) == (
        state.producer_id,
        state.producer_epoch,
        True,
    )
    # PrepareCommit until the leader acknowledges, then CompleteCommit.
    [got] = await c.txn_get(["tx"])
    assert got is not None and (got.state, got.shown_state) == (COMPLETE_COMMIT, "PrepareCommit")
    [pending] = await c.txn_pending_markers(10)
    assert pending.partitions == [CLASSIC]
    await sender.acknowledge.pop()()
    [got] = await c.txn_get(["tx"])
    assert got is not None and got.shown_state == "CompleteCommit"
    assert await c.txn_pending_markers(10) == []


async def test_an_all_classic_transaction_uploads_nothing(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    c = coordinator
    other = PartitionKey(CLASSIC.topic_id, 1)
    await c.create_logs([CLASSIC, other])
    w, store, sender = writer(c, tmp_path, {CLASSIC, other})
    state = await begin(c, CLASSIC, other)

    assert await w.end(state, commit=False, bump_epoch=True) == NONE
    assert await objects(store) == []
    assert await batches(c, CLASSIC) == await batches(c, other) == []
    assert sender.sent == [(sorted([CLASSIC, other], key=str), False, 1)]
    [pending] = await c.txn_pending_markers(10)
    assert (pending.state, pending.producer_epoch) == (COMPLETE_ABORT, state.producer_epoch + 1)
    assert sorted(pending.partitions, key=str) == sorted([CLASSIC, other], key=str)


async def test_a_marker_for_a_sealed_log_is_refused_until_the_partition_is_seen_classic(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    # Migrating to classic: the log is sealed, but this broker's image still shows the
    # partition diskless. Its marker must not land past the boundary: the end fails
    # retriably, changes nothing, and leaves no object behind.
    c = coordinator
    await c.create_logs([DISKLESS, CLASSIC])
    assert (await c.seal_log(CLASSIC)).boundary == 0
    w, store, sender = writer(c, tmp_path, set())
    state = await begin(c, DISKLESS, CLASSIC)

    assert await w.end(state, commit=True, bump_epoch=False) == COORDINATOR_NOT_AVAILABLE
    assert await batches(c, DISKLESS) == await batches(c, CLASSIC) == []
    assert await objects(store) == []
    [got] = await c.txn_get(["tx"])
    assert got is not None and got.state == ONGOING
    # Once it sees the seal, the partition's marker goes to its classic leader.
    sender.classic.add(CLASSIC)
    assert await w.end(state, commit=True, bump_epoch=False) == NONE
    assert await batches(c, DISKLESS) == [0]
    assert await batches(c, CLASSIC) == []
    assert sender.sent == [([CLASSIC], True, 1)]


async def test_a_partition_seen_classic_with_an_open_diskless_transaction_is_read_again(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    # Migrated to diskless: the producer's records went to the diskless log, but this
    # broker's image still shows the partition classic. Its leader would refuse the marker
    # and the diskless transaction would never close: the end is refused, nothing changes.
    c = coordinator
    await c.create_logs([DISKLESS])
    w, store, sender = writer(c, tmp_path, {DISKLESS})
    state = await begin(c, DISKLESS)
    record = BatchToCommit(
        topic_id=DISKLESS.topic_id,
        partition=DISKLESS.partition,
        byte_offset=0,
        byte_size=100,
        record_count=1,
        max_timestamp=1000,
        timestamp_type=0,
        producer_id=state.producer_id,
        producer_epoch=state.producer_epoch,
        base_sequence=0,
        transactional=True,
    )
    [done] = await c.commit_file("records", 100, 7, [record], NOW)
    assert done.error == NONE

    assert await w.end(state, commit=True, bump_epoch=False) == CONCURRENT_TRANSACTIONS
    assert sender.sent == []
    assert await objects(store) == []  # all seen classic: no marker object
    [got] = await c.txn_get(["tx"])
    assert got is not None and got.state == ONGOING
    assert await c.txn_pending_markers(10) == []
    # Once it sees the partition diskless, the marker closes the transaction there.
    sender.classic.clear()
    assert await w.end(state, commit=True, bump_epoch=False) == NONE
    assert await batches(c, DISKLESS) == [0, 1]
    req = FindRequest(DISKLESS.topic_id, DISKLESS.partition, 0, BIG)
    [found] = await c.find_batches([req], BIG, read_committed=True)
    assert found.last_stable_offset == found.high_watermark == 2


async def test_a_sweep_never_resends_markers_that_were_written_meanwhile(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    """The nemesis found a COMMIT marker written twice, the second one after the
    producer's next transaction had begun in the partition: it committed the first
    records of a transaction the producer then aborted. A sweep had read the markers as
    pending just before the first sender recorded them written, and sent them again.
    A resend now checks, while holding the id, that they are still pending; and the
    first sender holds the id until the database has recorded them."""
    import asyncio

    c = coordinator
    await c.create_logs([CLASSIC])
    w, _store, sender = writer(c, tmp_path, {CLASSIC})
    state = await begin(c, CLASSIC)
    assert await w.end(state, commit=True, bump_epoch=False) == NONE
    [listed] = await c.txn_pending_markers(10)  # what a sweep read: still pending
    # While the first sender records the markers written, a resend is left to it.
    recording = asyncio.ensure_future(sender.acknowledge.pop()())
    w.resend(listed)
    await recording
    await asyncio.gather(*w._tasks)
    assert sender.sent == [([CLASSIC], True, 1)]
    # Afterwards the sweep's stale list changes nothing either: the next transaction of
    # the producer may already be writing to the partition.
    assert await c.txn_pending_markers(10) == []
    w.resend(listed)
    await asyncio.gather(*w._tasks)
    assert sender.sent == [([CLASSIC], True, 1)]


async def test_markers_carry_their_transactions_number_and_a_resend_the_same_one(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    """Each transaction's classic markers carry the id's completion count, so a leader can
    refuse a late copy of an earlier transaction's marker (the nemesis found one ABORT
    that reached a leader after the producer's next transaction had begun there). A
    resend by another coordinator (the first died before the leaders acknowledged) must
    carry the same number: it is the same marker."""
    import asyncio

    c = coordinator
    await c.create_logs([CLASSIC])
    w, _store, sender = writer(c, tmp_path, {CLASSIC})
    for expected in (1, 2):
        state = await begin(c, CLASSIC)
        assert await w.end(state, commit=expected == 1, bump_epoch=False) == NONE
        assert sender.sent[-1] == ([CLASSIC], expected == 1, expected)
        if expected == 1:
            await sender.acknowledge.pop()()
    # The first sender never hears back; another broker's sweep resends.
    [listed] = await c.txn_pending_markers(10)
    other, _store2, resender = writer(c, tmp_path / "other", {CLASSIC})
    other.resend(listed)
    await asyncio.gather(*other._tasks)
    assert resender.sent == [([CLASSIC], False, 2)]


async def test_ending_with_the_other_outcome_while_markers_are_pending_is_refused_at_once(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    """Kafka's PrepareCommit (transaction version 1, TransactionCoordinator.endTransaction):
    EndTxn of the same outcome is CONCURRENT_TRANSACTIONS, retried until the markers are
    written (then NONE); of the other outcome INVALID_TXN_STATE at once, as after."""
    c = coordinator
    await c.create_logs([CLASSIC])
    w, _, sender = writer(c, tmp_path, {CLASSIC})
    state = await begin(c, CLASSIC)
    tc = TransactionCoordinator(c, w, 7, lambda: [], 900_000, 10_000)
    pid, epoch = state.producer_id, state.producer_epoch
    assert await tc.end("tx", pid, epoch, True) == NONE
    assert await tc.end("tx", pid, epoch, False) == INVALID_TXN_STATE
    assert await tc.end("tx", pid, epoch, True) == CONCURRENT_TRANSACTIONS
    await sender.acknowledge.pop()()
    assert await tc.end("tx", pid, epoch, True) == NONE
    assert await tc.end("tx", pid, epoch, False) == INVALID_TXN_STATE


async def test_tv2_end_bumps_the_epoch_its_markers_carry_and_answers_retries_as_kafka(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    """KIP-890 part 2 (EndTxn v5, Kafka's TransactionCoordinator.endTransaction under
    transaction version 2): the end bumps the epoch, the diskless marker and the classic
    leaders' markers carry the bumped one; a retry with the old epoch gets NONE and the new
    epoch (the other outcome INVALID_TXN_STATE, CONCURRENT_TRANSACTIONS while the classic
    markers are pending); a commit with the new epoch and nothing ongoing is
    INVALID_TXN_STATE, an abort ends an empty transaction; older epochs are fenced."""
    c = coordinator
    await c.create_logs([DISKLESS, CLASSIC])
    w, store, sender = writer(c, tmp_path, {CLASSIC})
    state = await begin(c, DISKLESS, CLASSIC)
    tc = TransactionCoordinator(c, w, 7, lambda: [], 900_000, 10_000)
    pid, e = state.producer_id, state.producer_epoch
    assert await tc.end_tv2("tx", pid, e + 1, True) == (PRODUCER_FENCED, -1, -1)
    assert await tc.end_tv2("tx", pid + 1, e, True) == (INVALID_PRODUCER_ID_MAPPING, -1, -1)
    assert await tc.end_tv2("tx", pid, e, True) == (NONE, pid, e + 1)
    assert await objects(store) == []  # made from its file's key
    assert parse_marker(await marker_at(c, store, DISKLESS, 0)) == (pid, e + 1, True)
    # Classic markers pending: the retry waits, the other outcome is refused at once.
    assert await tc.end_tv2("tx", pid, e, True) == (CONCURRENT_TRANSACTIONS, -1, -1)
    assert await tc.end_tv2("tx", pid, e, False) == (INVALID_TXN_STATE, -1, -1)
    assert await tc.end_tv2("tx", pid, e + 1, False) == (PRODUCER_FENCED, -1, -1)
    await sender.acknowledge.pop()()
    assert await tc.end_tv2("tx", pid, e, True) == (NONE, pid, e + 1)
    assert await tc.end_tv2("tx", pid, e, False) == (INVALID_TXN_STATE, -1, -1)
    assert await tc.end_tv2("tx", pid, e - 1, True) == (PRODUCER_FENCED, -1, -1)
    assert await tc.end_tv2("tx", pid, e + 1, True) == (INVALID_TXN_STATE, -1, -1)
    assert await tc.end_tv2("tx", pid, e + 1, False) == (NONE, pid, e + 2)
    assert await tc.end_tv2("tx", pid, e + 1, False) == (NONE, pid, e + 2)  # its retry
    [got] = await c.txn_get(["tx"])
    assert got is not None and (got.state, got.producer_epoch) == (COMPLETE_ABORT, e + 2)
    # The next transaction at the new epoch ends with the next bump.
    assert await c.txn_add("tx", pid, e + 2, [DISKLESS], [], NOW) == NONE
    assert await tc.end_tv2("tx", pid, e + 2, True) == (NONE, pid, e + 3)
    assert await batches(c, DISKLESS) == [0, 1]


class CountingStore(LocalObjectStore):
    """A local store that counts PUTs and refuses to be asked about marker objects."""

    def __init__(self, root: str) -> None:
        super().__init__(root)
        self.puts = 0

    async def put(self, key: str, chunks: Chunks) -> None:
        self.puts += 1
        await super().put(key, chunks)

    async def get_range(self, key: str, offset: int, length: int) -> bytes:
        assert not is_marker_key(key), "a marker object is made from its key, never read"
        return await super().get_range(key, offset, length)

    async def delete_many(self, keys: Sequence[str]) -> None:
        assert not any(is_marker_key(k) for k in keys), "a marker object is never deleted"
        await super().delete_many(keys)


class LostAnswer:
    """A coordinator whose txn_complete fails (after committing, or not at all)."""

    def __init__(self, inner: BatchCoordinator, commits: bool) -> None:
        self._inner = inner
        self._commits = commits

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    async def txn_complete(self, request: CompleteRequest) -> CompleteResult:
        if self._commits:
            await self._inner.txn_complete(request)
        raise CoordinatorUnavailable("connection lost", outcome_unknown=self._commits)


THREE = [PartitionKey(UUID(int=0xD2), p) for p in range(3)]


async def test_a_diskless_end_costs_no_put_and_its_markers_read_as_the_uploaded_ones(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    """Issue 29: a diskless transaction end uploads nothing. Each partition's marker is
    the batch an upload would have held (byte for byte, CRC included), read through any
    broker's cache; its file is one like any other to the coordinator."""
    c = coordinator
    await c.create_logs([*THREE, CLASSIC])
    store = CountingStore(str(tmp_path / "objects"))
    w = MarkerWriter(store, c, BlockCache(store), 7, lambda _advanced: None)
    w.classic = sender = FakeClassic({CLASSIC})
    state = await begin(c, *THREE, CLASSIC)
    pid, e = state.producer_id, state.producer_epoch
    assert await w.end(state, commit=True, bump_epoch=False) == NONE
    await sender.acknowledge.pop()()
    aborted = await begin(c, *THREE[:2])
    assert await w.end(aborted, commit=False, bump_epoch=True) == NONE
    assert store.puts == 0 and await objects(store) == []
    for key in THREE:
        got = await marker_at(c, store, key, 0)
        assert parse_marker(got) == (pid, e, True)
        ts = int.from_bytes(got[27:35], "big")  # base timestamp
        assert got == marker_batch(pid, e, True, ts)
        [header] = parse_batches(got, 1 << 20)  # CRC and framing checked as on produce
        assert (header.producer_id, header.records_count) == (pid, 1)
    for key in THREE[:2]:
        assert parse_marker(await marker_at(c, store, key, 1)) == (
            aborted.producer_id,
            aborted.producer_epoch + 1,
            False,
        )
    req = FindRequest(THREE[0].topic_id, 0, 0, BIG)
    [found] = await c.find_batches([req], BIG, read_committed=True)
    assert found.last_stable_offset == found.high_watermark == 2
    # Retention past the markers leaves their files deleting; the cleaner forgets them
    # without asking the store (CountingStore refuses).
    await c.delete_records([(k, -1) for k in THREE], NOW)
    files = await c.files_to_delete(BIG, 100)
    assert len(files) == 2 and all(is_marker_key(f.object_key) for f in files)
    broker = SimpleNamespace(
        coordinator=c, store=store, config=SimpleNamespace(file_delete_delay_ms=-BIG)
    )
    assert await Broker.delete_marked_files(broker) == 2  # type: ignore[arg-type]
    assert await c.files_to_delete(BIG, 100) == []


async def test_upload_mode_writes_one_object_per_end_as_before(
    coordinator: BatchCoordinator, tmp_path: Path
) -> None:
    """diskless.txn.marker.objects=true (a rolling upgrade from a version that cannot
    read marker objects): one real object per end, as before."""
    c = coordinator
    await c.create_logs(THREE)
    store = LocalObjectStore(str(tmp_path / "objects"))
    w = MarkerWriter(store, c, BlockCache(store), 7, lambda _advanced: None, upload=True)
    state = await begin(c, *THREE)
    assert await w.end(state, commit=True, bump_epoch=False) == NONE
    [key] = await objects(store)
    assert not is_marker_key(key)
    for i, part in enumerate(THREE):
        got = await marker_at(c, store, part, 0)
        assert got == (await store.get_range(key, 0, 1 << 20))[i * len(got) : (i + 1) * len(got)]
        assert parse_marker(got) == (state.producer_id, state.producer_epoch, True)


@pytest.mark.parametrize("commits", [False, True])
async def test_an_end_whose_answer_is_lost_leaves_no_object(
    coordinator: BatchCoordinator, tmp_path: Path, commits: bool
) -> None:
    """Without an upload there is nothing to discard or for the orphan sweep to find:
    whether the call committed (all markers there) or not (none, still ongoing)."""
    c = coordinator
    await c.create_logs(THREE)
    store = CountingStore(str(tmp_path / "objects"))
    lost: Any = LostAnswer(c, commits)
    w = MarkerWriter(store, lost, BlockCache(store), 7, lambda _advanced: None)
    state = await begin(c, *THREE)
    assert await w.end(state, commit=True, bump_epoch=False) == COORDINATOR_NOT_AVAILABLE
    assert store.puts == 0 and await objects(store) == []
    [got] = await c.txn_get(["tx"])
    assert got is not None
    if commits:
        assert got.state == COMPLETE_COMMIT
        assert [await batches(c, k) for k in THREE] == [[0], [0], [0]]
        assert parse_marker(await marker_at(c, store, THREE[2], 0))[2] is True
    else:
        assert got.state == ONGOING
        assert [await batches(c, k) for k in THREE] == [[], [], []]


async def test_a_background_resend_that_finds_the_database_down_leaves_no_stray_error(
    coordinator: BatchCoordinator, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A sweep's resend runs in a task of its own; when PostgreSQL goes away under it (a
    restart: long run #6) the markers stay pending and the next sweep sends them. It was
    logged as asyncio's "Task exception was never retrieved" with a traceback at ERROR."""
    import asyncio
    import gc
    import logging

    c = coordinator
    await c.create_logs([CLASSIC])
    w, _store, _sender = writer(c, tmp_path, {CLASSIC})
    state = await begin(c, CLASSIC)
    assert await w.end(state, commit=True, bump_epoch=False) == NONE
    [listed] = await c.txn_pending_markers(10)

    class DatabaseDown:
        def __getattr__(self, name: str) -> Any:
            async def unreachable(*_a: Any, **_k: Any) -> Any:
                raise CoordinatorUnavailable("PostgreSQL unavailable: connection reset")

            return unreachable

    other, _store2, resender = writer(DatabaseDown(), tmp_path / "other", {CLASSIC})  # type: ignore[arg-type]
    caplog.set_level(logging.INFO)
    other.resend(listed)
    while other._tasks:
        await asyncio.sleep(0.01)
    gc.collect()
    await asyncio.sleep(0)
    assert resender.sent == []
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert any("the sweep sends them again" in r.getMessage() for r in caplog.records)
    # Still pending: the first writer's sender acknowledges, or a later sweep resends.
    assert await c.txn_pending_markers(10) == [listed]
