"""The classic log cleaner: the latest record per key survives with its offset, superseded
ones, aborted transactions' records and old tombstones go, the dirty ratio and the stable
offset bound what is cleaned, the active segment is never touched, a swap interrupted by a
crash is finished when the log opens, and a follower copies a cleaned (gapped) log."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

from broker.logs.classic.partition import ClassicPartition
from protocol.records import TRANSACTIONAL_BIT
from storage.classic import cleaner
from storage.classic.batches import walk
from storage.classic.log import Log, LogConfig
from storage.classic.record_filter import batch_records
from storage.classic.segment import file_name
from tests.e2e._batches import Record, build_batch, build_raw_batch, encode_record

from .test_partition import TOPIC_ID, lead, produce

SMALL = LogConfig(segment_bytes=400, cleanup_compact=True, cleanup_delete=False)
NOW = 10_000_000


def keyed(key: bytes, value: bytes | None, ts: int = 1_000) -> bytes:
    return build_batch([Record(key, value)], base_timestamp_ms=ts)


def transactional(record: Record) -> bytes:
    """One record in producer 9's transaction (epoch 0, sequence 0)."""
    return build_raw_batch(
        encode_record(record, 0),
        records_count=1,
        base_timestamp_ms=1_000,
        attributes=TRANSACTIONAL_BIT,
        producer_id=9,
        producer_epoch=0,
        base_sequence=0,
    )


def open_partition(path: Path, config: LogConfig = SMALL, me: int = 1) -> ClassicPartition:
    return ClassicPartition(TOPIC_ID, "t", 0, Log(str(path), config), me, lag_max_ms=1000)


def replicate(p: ClassicPartition) -> None:
    for follower in (2, 3):
        p.read(p.log.log_end_offset, 1 << 20, follower)


def contents(p: ClassicPartition) -> list[tuple[int, bytes | None, bool]]:
    """(offset, key, tombstone) of every record, as a consumer from offset 0 gets them."""
    out = []
    offset = p.log.log_start_offset
    while offset < p.log.log_end_offset:
        data = p.log.read(offset, 1 << 30, p.log.log_end_offset)
        for b in walk(data):
            batch = memoryview(data)[b.position : b.position + b.size]
            _section, records = batch_records(batch)
            out += [(b.base_offset + r.offset_delta, r.key, r.tombstone) for r in records]
            offset = b.last_offset + 1
    return out


def clean_now(p: ClassicPartition, config: cleaner.CleanerConfig, now: int = NOW) -> int:
    plan = cleaner.plan(
        p.log.segments,
        p.log.dir,
        p.log.config.index_interval_bytes,
        p.last_stable_offset,
        now,
        config,
        list(p.txns.aborted),
        p.producers.last_batch_offsets(),
    )
    if plan is None:
        return 0
    built = cleaner.build(plan)
    return cleaner.swap(built, p.log.segments, p.log.log_end_offset)


def test_latest_value_per_key_with_offsets_preserved(tmp_path: Path) -> None:
    p = open_partition(tmp_path / "p")
    lead(p)
    for i in range(60):
        produce(p, keyed(b"k%d" % (i % 3), b"v%d" % i), acks=1)
        replicate(p)
    assert len(p.log.segments) > 3
    active_before = p.log.segments[-1]
    assert clean_now(p, cleaner.CleanerConfig(min_dirty_ratio=0.5)) > 0
    got = contents(p)
    stable = [o for o, _k, _t in got if o < active_before.base_offset]
    # Only the latest of each key below the active segment; everything in the active one.
    assert len(stable) <= 3
    assert [o for o, _k, _t in got if o >= active_before.base_offset] == list(
        range(active_before.base_offset, 60)
    )
    assert got[-1][0] == 59
    # The offsets kept are the latest per key overall (a key not rewritten since keeps its).
    latest = {}
    for o, k, _t in got:
        latest[k] = o
    assert sorted(latest.values()) == [57, 58, 59]
    # Nothing dirty any more: a second round does nothing.
    assert clean_now(p, cleaner.CleanerConfig(min_dirty_ratio=0.5)) == 0
    # Reopened, the cleaned segments are read back the same.
    p.close()
    again = open_partition(tmp_path / "p")
    assert contents(again) == got
    again.close()


def test_dirty_ratio_and_compaction_lag_hold_cleaning_back(tmp_path: Path) -> None:
    p = open_partition(tmp_path / "p")
    lead(p)
    for i in range(30):
        produce(p, keyed(b"k", b"v%d" % i, ts=NOW - 1000), acks=1)
        replicate(p)
    assert clean_now(p, cleaner.CleanerConfig(min_dirty_ratio=1.1)) == 0
    lag = cleaner.CleanerConfig(min_dirty_ratio=0.0, min_compaction_lag_ms=60_000)
    assert clean_now(p, lag) == 0
    assert clean_now(p, cleaner.CleanerConfig(min_dirty_ratio=0.0)) > 0
    p.close()


def test_tombstones_go_after_delete_retention_once_cleaned(tmp_path: Path) -> None:
    p = open_partition(tmp_path / "p")
    lead(p)
    produce(p, keyed(b"gone", b"x"), acks=1)
    produce(p, keyed(b"gone", None), acks=1)  # tombstone at offset 1
    for i in range(40):
        produce(p, keyed(b"k", b"v%d" % i), acks=1)
        replicate(p)
    config = cleaner.CleanerConfig(min_dirty_ratio=0.0, delete_retention_ms=1000)
    clean_now(p, config)
    assert (1, b"gone", True) in contents(p)  # first round: kept, consumers may see it
    for i in range(40):
        produce(p, keyed(b"k", b"w%d" % i), acks=1)
        replicate(p)
    clean_now(p, config)
    assert all(k != b"gone" for _o, k, _t in contents(p))
    p.close()


def test_aborted_transactions_records_are_removed_markers_kept(tmp_path: Path) -> None:
    async def run() -> None:
        p = open_partition(tmp_path / "p")
        lead(p)
        txn = transactional(Record(b"t", b"aborted"))
        produce(p, txn, acks=1)  # offset 0
        p.append_marker(9, 0, False, 0)  # offset 1
        for i in range(40):
            produce(p, keyed(b"k", b"v%d" % i), acks=1)
            replicate(p)
        clean_now(p, cleaner.CleanerConfig(min_dirty_ratio=0.0))
        data = p.log.read(0, 1 << 30, p.log.log_end_offset)
        bases = [b.base_offset for b in walk(data)]
        # The data went, the marker stayed; the aborted batch was producer 9's last, so it
        # stays as an empty batch (its sequence state), as Kafka keeps it.
        assert bases[:2] == [0, 1]
        assert all(o != 0 for o, _k, _t in contents(p))
        p.close()

    asyncio.run(run())


def test_open_transactions_bound_the_cleanable_range(tmp_path: Path) -> None:
    p = open_partition(tmp_path / "p")
    lead(p)
    txn = transactional(Record(b"k", b"open"))
    produce(p, txn, acks=1)  # offset 0 stays open: nothing is stable
    for i in range(40):
        produce(p, keyed(b"k", b"v%d" % i), acks=1)
        replicate(p)
    assert p.last_stable_offset == 0
    assert clean_now(p, cleaner.CleanerConfig(min_dirty_ratio=0.0)) == 0
    p.close()


def test_interrupted_swap_is_finished_at_open(tmp_path: Path) -> None:
    p = open_partition(tmp_path / "p")
    lead(p)
    for i in range(40):
        produce(p, keyed(b"k", b"v%d" % i), acks=1)
        replicate(p)
    plan = cleaner.plan(
        p.log.segments, p.log.dir, 4096, p.last_stable_offset, NOW, cleaner.CleanerConfig(0.0), []
    )
    assert plan is not None
    built = cleaner.build(plan)
    # The first segment with records left (an emptied one has no index to move).
    expected_first = next(
        b
        for b in built.bases
        if os.path.exists(os.path.join(p.log.dir, cleaner.SCRATCH, file_name(b, ".index")))
    )
    # A crash after the swap file was written and the first index moved, before the .log.
    cleaner._write_swap_file(p.log.dir, built.bases)
    scratch = os.path.join(p.log.dir, cleaner.SCRATCH)
    name = file_name(expected_first, ".index")
    os.replace(os.path.join(scratch, name), os.path.join(p.log.dir, name))
    p.close()
    again = open_partition(tmp_path / "p")
    assert not os.path.exists(os.path.join(again.log.dir, cleaner.SWAP_FILE))
    got = contents(again)
    assert got[-1][0] == 39 and len(got) < 40
    # Every offset kept is readable at its own position (the indexes were rebuilt).
    for offset, _k, _t in got:
        first = next(walk(again.log.read(offset, 1, again.log.log_end_offset)))
        assert first.base_offset <= offset <= first.last_offset
    # A new replica copies the cleaned log, gaps included.
    follower = open_partition(tmp_path / "f", me=2)
    for _ in range(20):  # fetch after fetch, as the replica fetcher does
        start = follower.log.log_end_offset
        if start >= again.log.log_end_offset:
            break
        data = again.log.read(start, 1 << 30, again.log.log_end_offset)
        follower.append_fetched(data, again.high_watermark, 0)
    assert follower.log.log_end_offset == 40
    assert contents(follower) == got
    again.close()
    follower.close()


def test_compact_delete_retention_passes_emptied_segments(tmp_path: Path) -> None:
    config = LogConfig(segment_bytes=400, cleanup_compact=True, cleanup_delete=True)
    p = open_partition(tmp_path / "p", config)
    lead(p)
    for i in range(40):
        produce(p, keyed(b"k", b"v%d" % i, ts=NOW), acks=1)
        replicate(p)
    clean_now(p, cleaner.CleanerConfig(min_dirty_ratio=0.0))
    assert p.log.segments[0].size == 0  # its only key was overwritten later
    p.log.enforce_retention()
    assert p.log.segments[0].size > 0
    assert contents(p)[-1][0] == 39
    # compact alone: retention never deletes.
    q = open_partition(
        tmp_path / "q",
        LogConfig(segment_bytes=400, cleanup_compact=True, cleanup_delete=False, retention_ms=0),
    )
    lead(q)
    for i in range(20):
        produce(q, keyed(b"k%d" % i, b"v", ts=1), acks=1)
    before = len(q.log.segments)
    assert q.log.enforce_retention() == 0 and len(q.log.segments) == before
    p.close()
    q.close()


def test_a_producers_last_batch_stays_so_a_restart_still_knows_its_retries(
    tmp_path: Path,
) -> None:
    p = open_partition(tmp_path / "p")
    lead(p)
    pid = 4242

    def idempotent(seq: int, value: bytes) -> bytes:
        return build_batch(
            [Record(b"k", value)],
            base_timestamp_ms=1_000,
            producer_id=pid,
            producer_epoch=0,
            base_sequence=seq,
        )

    first = produce(p, idempotent(0, b"p0"), acks=1)
    second = produce(p, idempotent(1, b"p1"), acks=1)
    assert not isinstance(second, asyncio.Future) and second.base_offset == 1
    # Everything after overwrites key k: the producer's records are all superseded.
    for i in range(40):
        produce(p, keyed(b"k", b"v%d" % i), acks=1)
        replicate(p)
    assert clean_now(p, cleaner.CleanerConfig(min_dirty_ratio=0.0)) > 0
    assert all(o >= 2 for o, _k, _t in contents(p))  # no record of the producer is left
    p.close()
    # Reopened, the state is rebuilt from the log: the emptied last batch still carries the
    # producer's sequence, so its retry of sequence 1 is a duplicate, answered with the
    # original offset, not a second copy (nor OUT_OF_ORDER_SEQUENCE).
    again = open_partition(tmp_path / "p")
    lead(again, epoch=2)
    retry = produce(again, idempotent(1, b"p1"), acks=1)
    assert not isinstance(retry, asyncio.Future)
    assert (retry.error, retry.base_offset) == (0, 1)
    nxt = produce(again, idempotent(2, b"p2"), acks=1)
    assert not isinstance(nxt, asyncio.Future) and nxt.error == 0
    assert not isinstance(first, asyncio.Future) and first.base_offset == 0
    again.close()


def test_max_compaction_lag_cleans_whatever_the_dirty_ratio(tmp_path: Path) -> None:
    p = open_partition(tmp_path / "p")
    lead(p)
    for i in range(30):
        produce(p, keyed(b"k", b"v%d" % i, ts=NOW - 10_000), acks=1)
        replicate(p)
    never = cleaner.CleanerConfig(min_dirty_ratio=1.1)
    assert clean_now(p, never) == 0
    # The oldest dirty record (10 s old) waited longer than a 60 s lag allows? No.
    assert (
        clean_now(p, cleaner.CleanerConfig(min_dirty_ratio=1.1, max_compaction_lag_ms=60_000)) == 0
    )
    # Longer than 5 s: cleaned although the ratio would never allow it.
    overdue = cleaner.CleanerConfig(min_dirty_ratio=1.1, max_compaction_lag_ms=5_000)
    assert clean_now(p, overdue) > 0
    assert clean_now(p, overdue) == 0  # nothing dirty left below the active segment
    p.close()


def test_a_compacted_log_rolls_by_max_compaction_lag(tmp_path: Path) -> None:
    clock = [1_000.0]
    hour = 3_600_000

    def log_with(**over: int | bool) -> ClassicPartition:
        config = LogConfig(cleanup_delete=False, segment_ms=hour, **over)  # type: ignore[arg-type]
        plog = Log(
            str(tmp_path / f"p{len(over)}{over.get('cleanup_compact')}"),
            config,
            clock=lambda: clock[0],
        )
        p = ClassicPartition(TOPIC_ID, "t", 0, plog, 1, lag_max_ms=1000)
        lead(p)
        return p

    compacted = log_with(cleanup_compact=True, max_compaction_lag_ms=5_000)
    deleted = log_with(cleanup_compact=False, max_compaction_lag_ms=5_000)
    for p in (compacted, deleted):
        produce(p, keyed(b"k", b"a"), acks=1)
    clock[0] += 10  # seconds: past the 5 s lag, far from segment.ms
    for p in (compacted, deleted):
        produce(p, keyed(b"k", b"b"), acks=1)
    assert len(compacted.log.segments) == 2  # rolled: the first record can be cleaned
    assert len(deleted.log.segments) == 1  # the lag means nothing without compaction
    compacted.close()
    deleted.close()
