"""Copier, deleter and reader over a real classic Log, the local-directory object store
and the SQLite metadata store."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from protocol.records import parse_batches
from storage.classic.batches import walk
from storage.classic.log import Log, LogConfig
from storage.objects import ObjectStoreError
from storage.objects.block_cache import BlockCache
from storage.objects.local import LocalObjectStore
from storage.tiered import layout
from storage.tiered.copier import CopyFenced, LocalGap, SegmentCopier, history_of
from storage.tiered.deleter import SegmentDeleter, retention_plan
from storage.tiered.follower import start_from_remote
from storage.tiered.lineage import follower_start, lineage, segment_for
from storage.tiered.metadata import RemoteSegment, SegmentState
from storage.tiered.metadata.sqlite import SqliteRemoteLogMetadata
from storage.tiered.reader import RemoteReader
from tests.e2e._batches import Record, build_batch
from tests.fixtures.tiered_env import NOW, TOPIC, Env


def batch(n: int, ts: int, size: int = 100) -> bytes:
    return build_batch([Record(b"k", b"v" * size) for _ in range(n)], base_timestamp_ms=ts)


def append(log: Log, data: bytes, epoch: int) -> None:
    view = memoryview(data)
    log.append_as_leader(view, parse_batches(view, 1 << 30), epoch)


def fill(log: Log, batches: int, epoch: int, first_ts: int = NOW) -> None:
    for i in range(batches):
        append(log, batch(1 + i % 3, first_ts + i, 80 + 37 * (i % 5)), epoch)


async def test_copy_resumes_after_the_lineage_and_stops_at_upto(tiered_storage: Env) -> None:
    fill(tiered_storage.log, 40, epoch=0)
    fill(tiered_storage.log, 40, epoch=3)
    rolled = tiered_storage.log.segments[:-1]
    assert len(rolled) >= 4
    upto = rolled[2].next_offset  # only the first three segments are below it
    copied = await tiered_storage.copier.copy_rolled(tiered_storage.log, TOPIC, 0, 3, upto)
    assert [(s.start_offset, s.end_offset) for s in copied] == [
        (s.base_offset, s.next_offset - 1) for s in rolled[:3]
    ]
    assert await tiered_storage.finished() == copied
    for s, local in zip(copied, rolled, strict=False):
        assert s.size == local.size and s.max_timestamp == local.max_timestamp
        assert s.broker_id == 1 and s.leader_epoch == 3
        assert set(layout.keys(s)) <= await tiered_storage.objects()
    # Everything now: only what was not tiered is copied, the chain has no gap.
    more = await tiered_storage.copier.copy_rolled(
        tiered_storage.log, TOPIC, 0, 3, tiered_storage.log.log_end_offset
    )
    assert more[0].start_offset == copied[-1].end_offset + 1
    assert (
        await tiered_storage.copier.copy_rolled(
            tiered_storage.log, TOPIC, 0, 3, tiered_storage.log.log_end_offset
        )
        == []
    )
    line = lineage(history_of(tiered_storage.log), await tiered_storage.finished())
    assert line.end == tiered_storage.log.active.base_offset - 1 and not line.orphans
    # The epoch vectors: the segment where epoch 3 began says so.
    switch = tiered_storage.log.epochs.entries[1][1]
    holding = segment_for(line, switch)
    assert holding is not None and (3, switch) in holding.epochs


async def test_reads_from_remote_equal_local_reads(tiered_storage: Env, tmp_path: Path) -> None:
    fill(tiered_storage.log, 60, epoch=0)
    copied = await tiered_storage.copier.copy_rolled(
        tiered_storage.log, TOPIC, 0, 0, tiered_storage.log.log_end_offset
    )
    cache = BlockCache(tiered_storage.store, block_size=512, max_bytes=1 << 20)
    for reader in (RemoteReader(tiered_storage.store), RemoteReader(tiered_storage.store, cache)):
        for s in copied:
            local = next(x for x in tiered_storage.log.segments if x.base_offset == s.start_offset)
            for offset in range(s.start_offset, s.end_offset + 1):
                for max_bytes in (1, 300, 5000):
                    want = local.read(offset, max_bytes, s.end_offset + 1, True)
                    assert await reader.read(s, offset, max_bytes) == want
            # A bound inside the segment (a consumer's high watermark).
            mid = (s.start_offset + s.end_offset) // 2
            got = await reader.read(s, s.start_offset, 1 << 20, max_offset=mid)
            assert all(b.base_offset < mid for b in walk(got))
            for ts in (0, NOW + 5, NOW + 30, NOW + 59, NOW + 10_000):
                assert await reader.offset_for_timestamp(s, ts) == local.offset_for_timestamp(ts)
    assert cache.misses > 0 and cache.hits > 0


async def test_a_batch_larger_than_the_read_ahead_is_read_whole(tiered_storage: Env) -> None:
    big = Log(str(tiered_storage.log.dir) + "-big", LogConfig(segment_bytes=100_000))
    append(big, batch(1, NOW, 150_000), 0)
    append(big, batch(1, NOW + 1, 10), 0)
    [s] = await tiered_storage.copier.copy_rolled(big, TOPIC, 1, 0, big.log_end_offset)
    got = await RemoteReader(tiered_storage.store).read(s, 0, 10)
    assert got == big.segments[0].read(0, 10, 1, True) and len(got) > 150_000
    big.close()


class FailingStore(LocalObjectStore):
    fail = True

    async def put(self, key: str, chunks: Any) -> None:
        if self.fail and key.endswith("/" + layout.LOG):
            raise ObjectStoreError("injected")
        await super().put(key, chunks)


async def test_a_crashed_copy_is_cleaned_up_and_retried(
    tiered_storage: Env, tmp_path: Path
) -> None:
    failing = FailingStore(str(tmp_path / "bucket"))
    tiered_storage.copier = SegmentCopier(
        failing, tiered_storage.meta, broker_id=1, clock_ms=lambda: NOW
    )
    fill(tiered_storage.log, 30, epoch=0)
    with pytest.raises(ObjectStoreError):
        await tiered_storage.copier.copy_rolled(
            tiered_storage.log, TOPIC, 0, 0, tiered_storage.log.log_end_offset
        )
    [started] = await tiered_storage.meta.list_segments(TOPIC, 0)
    assert started.state is SegmentState.COPY_SEGMENT_STARTED
    assert lineage(history_of(tiered_storage.log), [started]).end == -1  # never served
    leftovers = await tiered_storage.objects()
    assert leftovers and leftovers <= set(layout.keys(started))
    failing.fail = False
    copied = await tiered_storage.copier.copy_rolled(
        tiered_storage.log, TOPIC, 0, 0, tiered_storage.log.log_end_offset
    )
    assert copied[0].start_offset == 0 and copied[0].segment_id != started.segment_id
    assert started.segment_id not in {
        s.segment_id for s in await tiered_storage.meta.list_segments(TOPIC, 0)
    }
    assert not (await tiered_storage.objects()) & set(layout.keys(started))


async def test_a_deposed_copier_cannot_finish(tiered_storage: Env) -> None:
    fill(tiered_storage.log, 30, epoch=0)

    class Deposing(SqliteRemoteLogMetadata):
        async def update_state(
            self, segment_id: uuid.UUID, state: SegmentState, event_ms: int
        ) -> RemoteSegment | None:
            if state is SegmentState.COPY_SEGMENT_FINISHED:
                # The new leader cleaned up this STARTED entry meanwhile.
                await super().update_state(segment_id, SegmentState.DELETE_SEGMENT_STARTED, 0)
            return await super().update_state(segment_id, state, event_ms)

    meta = Deposing(tiered_storage.db_path)
    await meta.start()
    try:
        copier = SegmentCopier(tiered_storage.store, meta, broker_id=2, clock_ms=lambda: NOW)
        with pytest.raises(CopyFenced):
            await copier.copy_segment(
                tiered_storage.log, tiered_storage.log.segments[0], TOPIC, 0, 0
            )
    finally:
        await meta.close()


async def test_local_gap_is_refused(tiered_storage: Env) -> None:
    fill(tiered_storage.log, 60, epoch=0)
    first = tiered_storage.log.segments[0]
    await tiered_storage.copier.copy_rolled(tiered_storage.log, TOPIC, 0, 0, first.next_offset)
    # Local retention runs ahead of tiering: offsets never tiered are gone.
    tiered_storage.log.delete_records(tiered_storage.log.segments[2].base_offset)
    with pytest.raises(LocalGap):
        await tiered_storage.copier.copy_rolled(
            tiered_storage.log, TOPIC, 0, 0, tiered_storage.log.log_end_offset
        )


async def test_nothing_below_the_shared_log_start_is_tiered_again(tiered_storage: Env) -> None:
    fill(tiered_storage.log, 60, epoch=0)
    # Retention by another leader moved the remote log start past this replica's start.
    second = tiered_storage.log.segments[1]
    await tiered_storage.meta.advance_log_start(TOPIC, 0, second.base_offset)
    copied = await tiered_storage.copier.copy_rolled(
        tiered_storage.log, TOPIC, 0, 0, tiered_storage.log.log_end_offset
    )
    assert copied[0].start_offset == second.base_offset


async def test_enforce_moves_the_log_start_then_deletes(tiered_storage: Env) -> None:
    fill(tiered_storage.log, 60, epoch=2)
    copied = await tiered_storage.copier.copy_rolled(
        tiered_storage.log, TOPIC, 0, 2, tiered_storage.log.log_end_offset
    )
    orphan = RemoteSegment(
        TOPIC, 0, uuid.uuid4(), 0, 5, NOW, 1, ((1, 0),), 10, 9, SegmentState.COPY_SEGMENT_STARTED
    )
    newer = RemoteSegment(
        TOPIC, 0, uuid.uuid4(), 0, 5, NOW, 7, ((7, 0),), 10, 9, SegmentState.COPY_SEGMENT_STARTED
    )
    for s in (orphan, newer):
        await tiered_storage.meta.add_segment(s)
        await tiered_storage.meta.update_state(
            s.segment_id, SegmentState.COPY_SEGMENT_FINISHED, NOW
        )
    deleter = SegmentDeleter(tiered_storage.store, tiered_storage.meta, clock_ms=lambda: NOW)
    # retention.bytes: keep the last two segments.
    keep = copied[-1].size + copied[-2].size
    run = await deleter.enforce(history_of(tiered_storage.log), 2, TOPIC, 0, -1, keep)
    assert run.orphans == 1 and run.expired == len(copied) - 2
    assert run.log_start == copied[-2].start_offset == await tiered_storage.meta.log_start(TOPIC, 0)
    left = {s.segment_id for s in await tiered_storage.meta.list_segments(TOPIC, 0)}
    # The segment of a newer leader is left alone: this one may be deposed.
    assert left == {copied[-2].segment_id, copied[-1].segment_id, newer.segment_id}


async def test_orphans_and_retention_are_deleted(tiered_storage: Env) -> None:
    fill(tiered_storage.log, 60, epoch=0)
    copied = await tiered_storage.copier.copy_rolled(
        tiered_storage.log, TOPIC, 0, 0, tiered_storage.log.log_end_offset
    )
    # An orphan: copied by an old leader at epoch 1, which this history never had.
    orphan = RemoteSegment(
        TOPIC, 0, uuid.uuid4(), 10, 20, NOW, 1, ((1, 10),), 10, 9, SegmentState.COPY_SEGMENT_STARTED
    )
    await tiered_storage.meta.add_segment(orphan)
    await tiered_storage.meta.update_state(
        orphan.segment_id, SegmentState.COPY_SEGMENT_FINISHED, NOW
    )
    line = lineage(history_of(tiered_storage.log), await tiered_storage.finished())
    assert [s.segment_id for s in line.orphans] == [orphan.segment_id]
    deleter = SegmentDeleter(tiered_storage.store, tiered_storage.meta, clock_ms=lambda: NOW)
    assert await deleter.delete_all(line.orphans) == 1
    # Retention by time: the first two segments' newest records are older than the limit.
    cutoff = copied[1].max_timestamp
    plan = retention_plan(line, cutoff + 1000, 999, -1)
    assert plan.delete == copied[:2] and plan.log_start == copied[1].end_offset + 1
    assert await deleter.delete_all(plan.delete) == 2
    remaining = await tiered_storage.finished()
    assert remaining == copied[2:]
    assert {k for s in [*copied[:2], orphan] for k in layout.keys(s)}.isdisjoint(
        await tiered_storage.objects()
    )
    # Retention by size: keep at most the last segment's bytes (plus nothing local).
    line = lineage(history_of(tiered_storage.log), remaining)
    plan = retention_plan(line, NOW, -1, copied[-1].size)
    assert plan.delete == copied[2:-1]
    assert retention_plan(line, NOW, -1, -1).delete == []


async def test_an_interrupted_deletion_is_finished(tiered_storage: Env) -> None:
    fill(tiered_storage.log, 30, epoch=0)
    copied = await tiered_storage.copier.copy_rolled(
        tiered_storage.log, TOPIC, 0, 0, tiered_storage.log.log_end_offset
    )
    await tiered_storage.meta.update_state(
        copied[0].segment_id, SegmentState.DELETE_SEGMENT_STARTED, NOW
    )
    deleter = SegmentDeleter(tiered_storage.store, tiered_storage.meta, clock_ms=lambda: NOW)
    assert await deleter.finish_pending(TOPIC, 0) == 1
    assert await tiered_storage.meta.list_segments(TOPIC, 0) == copied[1:]
    assert set(layout.keys(copied[0])).isdisjoint(await tiered_storage.objects())


async def test_a_follower_starts_after_the_tiered_lineage(
    tiered_storage: Env, tmp_path: Path
) -> None:
    fill(tiered_storage.log, 30, epoch=0)
    fill(tiered_storage.log, 30, epoch=4)
    copied = await tiered_storage.copier.copy_rolled(
        tiered_storage.log, TOPIC, 0, 4, tiered_storage.log.log_end_offset
    )
    follower = Log(str(tmp_path / "follower"), LogConfig(segment_bytes=2000))
    start = follower_start(history_of(tiered_storage.log), copied)
    assert start_from_remote(follower, start)
    assert follower.log_start_offset == follower.log_end_offset == copied[-1].end_offset + 1
    assert follower.epochs.entries == [
        e for e in tiered_storage.log.epochs.entries if e[1] < start.offset
    ]
    # It replicates the rest from the leader; as a leader later, the tiered segments are
    # its lineage and it copies after them.
    follower.append_as_follower(tiered_storage.log.read(start.offset, 1 << 30))
    assert follower.log_end_offset == tiered_storage.log.log_end_offset
    line = lineage(history_of(follower), copied)
    assert line.segments == copied and line.copy_from(follower.log_start_offset) == start.offset
    assert not start_from_remote(follower, start)  # already there
    follower.close()
