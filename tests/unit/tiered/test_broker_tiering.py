"""The broker's side of tiered storage over a real log, store and metadata: local retention
of tiered segments, the partition's log starts and reads below the local log, and where a
follower restarts after the tiered part."""

from __future__ import annotations

import asyncio
import uuid
from functools import partial
from pathlib import Path

from kio.schema.errors import ErrorCode

from broker.logs.classic.partition import ClassicPartition
from broker.logs.classic.remote_view import RemoteView
from broker.logs.classic.replica_fetcher import leader_histories
from broker.logs.tiered.follower import start_after_tiered
from broker.logs.tiered.snapshot import parse, segment_state
from controller.image import PartitionState
from protocol.records import parse_batches
from storage.classic.epoch_cache import EpochCache
from storage.classic.log import Log, LogConfig
from storage.tiered.copier import history_of
from storage.tiered.lineage import History, follower_start, history_floor, lineage
from storage.tiered.metadata import RemoteSegment, SegmentState
from storage.tiered.reader import RemoteReader
from tests.e2e._batches import Record, build_batch, build_raw_batch, encode_record
from tests.fixtures.tiered_env import NOW, TOPIC, Env

from .test_copier_reader import fill
from .test_lineage import Replica

TIERED = LogConfig(
    segment_bytes=2000,
    index_interval_bytes=300,
    remote_storage=True,
    local_retention_ms=-1,
    local_retention_bytes=1,  # keep only the active segment, once tiered
)


def tiered_env(e: Env, tmp: Path) -> None:
    e.log.close()
    e.log = Log(str(tmp / "tiered-log"), TIERED)


async def test_local_retention_deletes_only_tiered_segments_and_keeps_their_epochs(
    tiered_storage: Env, tmp_path: Path
) -> None:
    tiered_env(tiered_storage, tmp_path)
    fill(tiered_storage.log, 30, epoch=0)
    fill(tiered_storage.log, 30, epoch=2)
    epochs = tiered_storage.log.epochs.entries
    assert tiered_storage.log.enforce_retention(None) == 0  # nothing tiered: nothing goes
    rolled = tiered_storage.log.segments[:-1]
    upto = rolled[2].next_offset
    copied = await tiered_storage.copier.copy_rolled(tiered_storage.log, TOPIC, 0, 2, upto)
    assert copied[-1].end_offset + 1 == upto
    assert tiered_storage.log.enforce_retention(upto) == 3
    assert tiered_storage.log.log_start_offset == upto
    # The tiered offsets' epochs stay: they are this replica's lineage.
    assert tiered_storage.log.epochs.entries == epochs
    # Retention moved the whole log's start: then they go.
    tiered_storage.log.forget_epochs_before(upto)
    assert tiered_storage.log.epochs.entries[0][1] == upto


async def test_a_partition_serves_below_its_local_log_from_remote(
    tiered_storage: Env, tmp_path: Path
) -> None:
    tiered_env(tiered_storage, tmp_path)
    fill(tiered_storage.log, 40, epoch=1)
    p = ClassicPartition(uuid.UUID(int=1), "t", 0, tiered_storage.log, 1, lag_max_ms=1000)
    p.apply(PartitionState((1, 2), (1, 2), 1, 1, 1), lambda _p: None)
    p.read(
        tiered_storage.log.log_end_offset, 1 << 20, 2
    )  # the follower has everything: HW at the end
    copied = await tiered_storage.copier.copy_rolled(
        tiered_storage.log, TOPIC, 0, 1, tiered_storage.log.log_end_offset
    )
    tiered_storage.log.enforce_retention(copied[-1].end_offset + 1)
    local_start = tiered_storage.log.log_start_offset
    assert local_start > 0
    assert p.log_start_offset == local_start  # nothing known of the remote part yet
    segments = await tiered_storage.meta.list_segments(TOPIC, 0)
    p.remote = RemoteView(lineage(history_of(tiered_storage.log), segments, 0, 1), 0)
    assert p.log_start_offset == 0
    assert p.is_remote(0) and p.is_remote(local_start - 1) and not p.is_remote(local_start)
    # A follower below the local log is told to start after the tiered part.
    assert p.read(0, 1 << 20, 2) == (int(ErrorCode.offset_moved_to_tiered_storage), b"")
    # A consumer's remote read is done by the fetch path, not the local log.
    assert p.read(0, 1 << 20, -1) == (0, b"")
    assert p.list_offset(-2)[1] == 0
    assert p.list_offset(-4)[1] == local_start
    assert p.list_offset(-5)[1] == copied[-1].end_offset


def _segment(start: int, end: int, epochs: tuple[tuple[int, int], ...], by: int) -> RemoteSegment:
    return RemoteSegment(
        TOPIC,
        0,
        uuid.uuid4(),
        start,
        end,
        NOW,
        by,
        epochs,
        100,
        1,
        SegmentState.COPY_SEGMENT_FINISHED,
    )


class LeaderEpochs:
    """A leader answering OffsetForLeaderEpoch from its epoch cache, as the broker does
    (``ClassicPartition.end_offset_for``), counting the rounds asked."""

    def __init__(self, entries: list[tuple[int, int]], log_end: int) -> None:
        self.cache = EpochCache(None)
        for epoch, start in entries:
            self.cache.assign(epoch, start)
        self.log_end = log_end
        self.rounds = 0

    async def ask(
        self, asks: list[tuple[ClassicPartition, int]]
    ) -> dict[tuple[str, int], tuple[int, int, int]]:
        self.rounds += 1
        out = {}
        for p, epoch in asks:
            found, end = self.cache.end_offset_for(epoch, self.log_end)
            out[(p.topic, p.index)] = (0, found, end)
        return out


def _follower(tmp_path: Path, leader_epoch: int) -> ClassicPartition:
    p = ClassicPartition(TOPIC, "t", 0, Log(str(tmp_path / "follower"), LogConfig()), 2, 1000)
    p.apply(PartitionState((1, 2), (1, 2), 1, leader_epoch, 1), lambda _p: None)
    return p


async def test_a_follower_learns_its_leaders_history_with_offset_for_leader_epoch(
    tmp_path: Path,
) -> None:
    p = _follower(tmp_path, 7)
    leader = LeaderEpochs([(0, 0), (2, 100), (3, 150), (7, 400)], 500)
    [history] = await leader_histories(leader.ask, [(p, 0)])
    assert history == History(((0, 0), (2, 100), (3, 150), (7, 400)), 500)
    # From the floor on only (one older epoch first, whose start is not checked).
    leader.rounds = 0
    [history] = await leader_histories(leader.ask, [(p, 3)])
    assert history == History(((2, 100), (3, 150), (7, 400)), 500)
    assert leader.rounds == 4  # the current epoch, then one below each of 7, 3 and 2
    # A leader whose cache lost its oldest epochs to retention: the walk stops at its
    # oldest (asked below it, a leader answers the asked epoch with the oldest's start).
    p.log.close()
    p = _follower(tmp_path, 9)
    trimmed = LeaderEpochs([(4, 300), (6, 320), (9, 410)], 450)
    [history] = await leader_histories(trimmed.ask, [(p, 0)])
    assert history == History(((4, 300), (6, 320), (9, 410)), 450)
    # A leader that does not know the epoch asked (it is newer than ours): no history.
    [history] = await leader_histories(LeaderEpochs([(1, 0)], 10).ask, [(p, 0)])
    assert history is None
    p.log.close()


async def test_the_documents_scenario_through_the_brokers_follower(tmp_path: Path) -> None:
    """Seeds/002's scenario (tests/unit/tiered/test_lineage.py replays it on histories):
    the returning replicas start after the lineage's tiered end (239 here, "θ6"), not after
    the largest tiered offset (249, an orphan's: "θ5"), nor at the leader's local start
    (0: the leader keeps its tiered segments locally here), learning the leader's history
    as a broker does."""
    r1, r2, r3 = Replica(1), Replica(2), Replica(3)
    r1.write(1, 99)
    r2.follow(r1, 99)
    r3.follow(r1, 99)
    r1.write(2, 199)
    a = r1.tier(0, 149, 2)
    r3.write(3, 179)
    r2.follow(r3, 179)
    b = r3.tier(0, 179, 3)
    r3.write(3, 189)
    r2.follow(r3, 189)
    r3.write(4, 251)
    c = r3.tier(180, 249, 4)
    r2.write(5, 299)
    r2.write(6, 299)
    r3.follow(r2, 299)
    d = r2.tier(180, 239, 6)
    r2.write(6, 320)
    segments = [a, b, c, d]
    leader = LeaderEpochs(r2.epochs.entries, len(r2.log))
    p = _follower(tmp_path, 6)
    floor = history_floor(segments)
    assert floor == 1
    [history] = await leader_histories(leader.ask, [(p, floor)])
    assert history == r2.history
    start = follower_start(history, segments)
    assert start.offset == 240 and start.last == d
    assert start.epochs == ((1, 0), (3, 100), (5, 190))
    assert max(s.end_offset for s in segments) == 249
    p.log.close()


async def test_a_wiped_follower_restarts_at_the_leaders_local_start(
    tiered_storage: Env, tmp_path: Path
) -> None:
    fill(tiered_storage.log, 40, epoch=1)
    copied = await tiered_storage.copier.copy_rolled(
        tiered_storage.log, TOPIC, 0, 1, tiered_storage.log.log_end_offset
    )
    follower_log = Log(str(tmp_path / "follower"), LogConfig())
    p = ClassicPartition(TOPIC, "t", 0, follower_log, 2, lag_max_ms=1000)
    p.apply(PartitionState((1, 2), (1, 2), 1, 1, 1), lambda _p: None)
    start = copied[-1].end_offset + 1
    reader = RemoteReader(tiered_storage.store)
    segments = await tiered_storage.meta.list_segments(TOPIC, 0)
    resolved = follower_start(history_of(tiered_storage.log), segments)
    assert resolved.offset == start
    assert await start_after_tiered(p, resolved, reader)
    assert follower_log.log_start_offset == follower_log.log_end_offset == start
    assert follower_log.epochs.entries == [(1, 0)]
    assert not await start_after_tiered(p, resolved, reader)  # already there
    follower_log.close()


async def test_producer_state_travels_with_the_tiered_segments(
    tiered_storage: Env, tmp_path: Path
) -> None:
    """An idempotent producer whose batches are all tiered is still known to a follower that
    started after the tiered part: its retry is recognised, not appended twice."""
    leader = ClassicPartition(TOPIC, "t", 0, tiered_storage.log, 1, lag_max_ms=1000)
    leader.apply(PartitionState((1, 2), (1,), 1, 1, 1), lambda _p: None)
    for seq in range(0, 30, 3):
        data = build_batch(
            [Record(b"k", b"v" * 300) for _ in range(3)],
            base_timestamp_ms=NOW,
            producer_id=77,
            producer_epoch=0,
            base_sequence=seq,
        )
        view = memoryview(data)
        leader.append(view, parse_batches(view, 1 << 20), False, 1, 1000)
    copied = await tiered_storage.copier.copy_rolled(
        tiered_storage.log,
        TOPIC,
        0,
        1,
        tiered_storage.log.log_end_offset,
        partial(segment_state, leader),
    )
    start = copied[-1].end_offset + 1
    follower = ClassicPartition(
        TOPIC, "t", 0, Log(str(tmp_path / "f"), LogConfig()), 2, lag_max_ms=1000
    )
    follower.apply(PartitionState((1, 2), (1, 2), 1, 1, 1), lambda _p: None)
    resolved = follower_start(
        history_of(tiered_storage.log), await tiered_storage.meta.list_segments(TOPIC, 0)
    )
    assert resolved.offset == start
    assert await start_after_tiered(follower, resolved, RemoteReader(tiered_storage.store))
    # The last batch wholly tiered, sent again: a duplicate at its original offset.
    seq_last_tiered = max((s for s in range(0, 30, 3) if s + 2 < start), default=None)
    assert seq_last_tiered is not None
    error, duplicate = follower.producers.check(77, 0, seq_last_tiered, seq_last_tiered + 2)
    assert error is None and duplicate == (seq_last_tiered, seq_last_tiered + 2)
    follower.log.close()


async def test_aborted_transactions_travel_with_the_tiered_segments(tiered_storage: Env) -> None:
    """A replica that knows only the local log learns the tiered part's aborted
    transactions from the segments' snapshots (read_committed consumers drop them)."""
    leader = ClassicPartition(TOPIC, "t", 0, tiered_storage.log, 1, lag_max_ms=1000)
    leader.apply(PartitionState((1,), (1,), 1, 1, 1), lambda _p: None)
    payload = b"".join(encode_record(Record(b"k", b"v" * 300), i) for i in range(3))
    for txn in range(6):
        data = build_raw_batch(
            payload,
            records_count=3,
            base_timestamp_ms=NOW,
            attributes=0x10,  # transactional
            producer_id=9,
            producer_epoch=0,
            base_sequence=3 * txn,
        )
        view = memoryview(data)
        leader.append(view, parse_batches(view, 1 << 20), False, 1, 1000)
        leader.append_marker(9, 0, txn % 2 == 0, 0)  # odd transactions are aborted
    fill(tiered_storage.log, 20, epoch=1)  # roll past the markers
    aborted = list(leader.txns.aborted)
    assert len(aborted) == 3
    copied = await tiered_storage.copier.copy_rolled(
        tiered_storage.log,
        TOPIC,
        0,
        1,
        tiered_storage.log.log_end_offset,
        partial(segment_state, leader),
    )
    reader = RemoteReader(tiered_storage.store)
    found = []
    for segment in copied:
        in_segment = parse(await reader.producer_snapshot(segment)).aborted
        assert all(segment.start_offset <= a.last_offset <= segment.end_offset for a in in_segment)
        found += in_segment
    assert found == aborted
    fresh = ClassicPartition(TOPIC, "t", 0, tiered_storage.log, 1, lag_max_ms=1000)
    fresh.txns.clear()  # as a replica that never held these batches
    assert fresh.txns.merge_aborted(found) == 3
    assert fresh.txns.merge_aborted(found) == 0  # known already: not twice
    assert fresh.txns.aborted_between(0, tiered_storage.log.log_end_offset) == aborted


async def test_a_transaction_open_across_the_tiered_boundary_is_aborted_on_a_new_follower(
    tiered_storage: Env, tmp_path: Path
) -> None:
    leader = ClassicPartition(TOPIC, "t", 0, tiered_storage.log, 1, lag_max_ms=1000)
    leader.apply(PartitionState((1,), (1,), 1, 1, 1), lambda _p: None)
    payload = b"".join(encode_record(Record(b"k", b"v" * 300), i) for i in range(3))
    data = build_raw_batch(
        payload,
        records_count=3,
        base_timestamp_ms=NOW,
        attributes=0x10,  # transactional
        producer_id=9,
        producer_epoch=0,
        base_sequence=0,
    )
    view = memoryview(data)
    leader.append(view, parse_batches(view, 1 << 20), False, 1, 1000)
    fill(tiered_storage.log, 10, epoch=1)  # the transaction's first segment rolls
    first = tiered_storage.log.segments[0]
    copied = await tiered_storage.copier.copy_segment(
        tiered_storage.log, first, TOPIC, 0, 1, partial(segment_state, leader)
    )
    start = copied.end_offset + 1
    leader.append_marker(9, 0, False, 0)  # aborted, in a later (local) segment
    follower = ClassicPartition(
        TOPIC, "t", 0, Log(str(tmp_path / "f"), LogConfig()), 2, lag_max_ms=1000
    )
    follower.apply(PartitionState((1, 2), (1, 2), 1, 1, 1), lambda _p: None)
    resolved = follower_start(
        history_of(tiered_storage.log), await tiered_storage.meta.list_segments(TOPIC, 0)
    )
    assert resolved.offset == start
    assert await start_after_tiered(follower, resolved, RemoteReader(tiered_storage.store))
    assert follower.txns.ongoing == {9: 0}  # open where its log starts
    while (
        follower.log.log_end_offset < tiered_storage.log.log_end_offset
    ):  # fetches, one segment each
        chunk = tiered_storage.log.read(follower.log.log_end_offset, 1 << 20)
        follower.append_fetched(chunk, tiered_storage.log.log_end_offset, 0)
    assert [(a.producer_id, a.first_offset) for a in follower.txns.aborted] == [(9, 0)]
    follower.log.close()


def test_the_view_finds_the_segment_of_an_offset_as_the_lineage_does() -> None:
    import random

    from storage.tiered.lineage import segment_for

    rng = random.Random(7)
    for _case in range(50):
        segments, start = [], 0
        for _ in range(rng.randint(1, 30)):
            end = start + rng.randint(0, 20)
            segments.append(_segment(start, end, ((1, start),), 1))
            # The next copy starts right after, or overlaps (a retried or re-led copy).
            start = end + 1 - rng.choice([0, 0, 0, rng.randint(0, end - start + 1)])
        history = History(((1, 0),), max(s.end_offset for s in segments) + 1)
        view = RemoteView(lineage(history, segments), 0)
        for offset in range(0, history.log_end + 2):
            assert view.segment(offset) == segment_for(view.line, offset)


async def test_a_leader_disables_at_the_controllers_request_only_at_its_epoch(
    tiered_storage: Env,
) -> None:
    """KIP-950 on the broker: DisableRemoteTopic is acted on at once (delete: the tiered
    data goes) by the partition's leader at the request's leader epoch only; the answer
    waits for a heartbeat, which is asked for at once."""
    from types import SimpleNamespace

    from broker.logs.tiered.manager import TieringManager
    from controller.requests import DisableRemoteTopic

    fill(tiered_storage.log, 40, epoch=3)
    leader = ClassicPartition(TOPIC, "t", 0, tiered_storage.log, 1, lag_max_ms=1000)
    leader.apply(PartitionState((1, 2), (1, 2), 1, 3, 1), lambda _p: None)
    leader.read(
        tiered_storage.log.log_end_offset, 1 << 20, 2
    )  # the follower has it all: HW at the end
    assert await tiered_storage.copier.copy_rolled(
        tiered_storage.log, TOPIC, 0, 3, tiered_storage.log.log_end_offset
    )
    config = SimpleNamespace(
        remote_log_manager_task_interval_ms=30_000, remote_log_storage_system_enable=True
    )
    replicas = SimpleNamespace(
        broker=SimpleNamespace(store=tiered_storage.store, cache=None, config=config),
        me=1,
        partitions={(TOPIC, 0): leader},
    )
    manager = TieringManager(replicas, tiered_storage.meta)  # type: ignore[arg-type]
    beats: list[int] = []
    manager.heartbeat_soon = lambda: beats.append(1)
    for epoch, error in (
        (2, ErrorCode.fenced_leader_epoch),  # a deposed leader's request
        (4, ErrorCode.unknown_leader_epoch),  # newer than this broker knows
    ):
        stale = DisableRemoteTopic(TOPIC, 0, epoch, 0, "delete")
        assert await manager.disable_remote(stale) == error
    assert await tiered_storage.finished()  # nothing deleted
    request = DisableRemoteTopic(TOPIC, 0, 3, 0, "delete")
    manager.on_disable_remote([request])
    manager.on_disable_remote([request])  # the same request again: not run twice
    while not manager.answers():
        await asyncio.sleep(0.01)
    [answer] = manager.answers()
    assert (answer.leader_epoch, answer.error_code) == (3, ErrorCode.none)
    assert beats == [1]
    assert await tiered_storage.finished() == []
    assert await tiered_storage.meta.log_start(TOPIC, 0) == tiered_storage.log.log_start_offset
    manager.answered([answer])
    assert manager.answers() == []
    # Not a leader here: refused.
    leader.apply(PartitionState((1, 2), (1, 2), 2, 4, 2), lambda _p: None)
    again = DisableRemoteTopic(TOPIC, 0, 4, 0, "delete")
    assert await manager.disable_remote(again) == ErrorCode.not_leader_or_follower
