"""The classic log: segments, indexes, recovery after a torn tail, truncation, retention."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from protocol.records import parse_batches
from storage.classic.batches import walk
from storage.classic.log import Log, LogConfig, NotContiguous, OffsetOutOfRange
from tests.e2e._batches import Record, build_batch


def batch(n: int = 1, ts: int = 1_000, value: bytes = b"v" * 100) -> bytes:
    return build_batch([Record(b"k", value) for _ in range(n)], base_timestamp_ms=ts)


def append(log: Log, *batches: bytes, epoch: int = 0) -> tuple[int, int]:
    data = memoryview(b"".join(batches))
    return log.append_as_leader(data, parse_batches(data, 1 << 30), epoch)


def offsets(data: bytes) -> list[tuple[int, int]]:
    return [(b.base_offset, b.last_offset) for b in walk(data)]


class Clock:
    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def test_leader_appends_assign_offsets_and_reads_return_whole_batches(tmp_path: Path) -> None:
    log = Log(str(tmp_path), LogConfig(index_interval_bytes=256))
    assert append(log, batch(3), batch(2)) == (0, 4)
    assert append(log, batch(1), epoch=1) == (5, 5)
    assert log.log_end_offset == 6
    everything = log.read(0, 1 << 20)
    assert offsets(everything) == [(0, 2), (3, 4), (5, 5)]
    assert [b.leader_epoch for b in walk(everything)] == [0, 0, 1]
    # An offset inside a batch gives that whole batch; the high watermark bounds reads.
    assert offsets(log.read(4, 1 << 20)) == [(3, 4), (5, 5)]
    assert offsets(log.read(0, 1 << 20, max_offset=3)) == [(0, 2)]
    # max_bytes smaller than the first batch: the first batch still comes (minOneMessage).
    assert offsets(log.read(0, 10)) == [(0, 2)]
    assert log.read(6, 1 << 20) == b""
    with pytest.raises(OffsetOutOfRange):
        log.read(7, 100)
    assert log.epochs.entries == [(0, 0), (1, 5)]


def test_a_read_at_or_past_the_high_watermark_is_empty(tmp_path: Path) -> None:
    # A consumer at the high watermark (or inside a batch that straddles it) gets nothing,
    # whichever segment holds it; offsets outside the log are still out of range.
    one = batch(1, value=b"x" * 200)
    log = Log(str(tmp_path), LogConfig(segment_bytes=len(one) * 3, index_interval_bytes=64))
    append(log, batch(3), batch(2))
    for _ in range(5):
        append(log, one)
    assert log.log_end_offset == 10 and len(log.segments) > 1
    for hwm, at in ((3, 3), (3, 4), (4, 4), (6, 6), (6, 9), (10, 10)):
        assert log.read(at, 1 << 20, max_offset=hwm) == b"", (hwm, at)
    assert offsets(log.read(2, 1 << 20, max_offset=3)) == [(0, 2)]
    assert offsets(log.read(5, 1 << 20, max_offset=7)) == [(5, 5), (6, 6)]
    with pytest.raises(OffsetOutOfRange):
        log.read(11, 100, max_offset=5)


def test_many_batches_use_the_sparse_index_and_roll_segments(tmp_path: Path) -> None:
    one = batch(1, value=b"x" * 200)
    log = Log(str(tmp_path), LogConfig(segment_bytes=len(one) * 10, index_interval_bytes=500))
    for i in range(100):
        append(log, batch(1, ts=1_000 + i, value=b"x" * 200))
    assert len(log.segments) == 10
    assert [s.base_offset for s in log.segments] == list(range(0, 100, 10))
    assert len(log.segments[0].index) < 10  # sparse: not every batch
    for offset in (0, 9, 10, 55, 99):
        assert offsets(log.read(offset, 1))[0] == (offset, offset)
    assert log.offset_for_timestamp(1_057) == (57, 1_057)
    assert log.offset_for_timestamp(5_000) is None
    assert offsets(log.read(8, len(one) * 3)) == [(8, 8), (9, 9)]  # a read stays in a segment


def test_a_batch_that_does_not_fit_ends_the_read_without_min_one(tmp_path: Path) -> None:
    """A fetch's later partitions read without minOneMessage: a batch larger than what is
    left gives nothing, never the batches of a later segment (a gap in what the consumer
    gets), and max_bytes 0 gives nothing at all."""
    small, big = batch(1, value=b"x" * 100), batch(1, value=b"x" * 1000)
    log = Log(str(tmp_path), LogConfig(segment_bytes=len(small) + len(big)))
    append(log, small)
    append(log, big)
    append(log, small)
    assert [s.base_offset for s in log.segments] == [0, 2]
    assert log.read(1, len(small), min_one=False) == b""
    assert log.read(0, 0, min_one=False) == b""
    assert offsets(log.read(1, len(big), min_one=False)) == [(1, 1)]
    assert offsets(log.read(1, len(small))) == [(1, 1)]  # min_one: the batch whole
    assert offsets(log.read(2, len(small), min_one=False)) == [(2, 2)]


def test_reopen_after_a_clean_close_trusts_the_indexes(tmp_path: Path) -> None:
    log = Log(str(tmp_path), LogConfig(index_interval_bytes=128))
    for i in range(20):
        append(log, batch(2, ts=i))
    log.close()
    again = Log(str(tmp_path), LogConfig(index_interval_bytes=128))
    assert again.recovered_bytes == 0
    assert again.log_end_offset == 40
    assert offsets(again.read(37, 1 << 20)) == [(36, 37), (38, 39)]
    assert append(again, batch(1)) == (40, 40)


@pytest.mark.parametrize("damage", ["torn", "garbage", "bad_crc"])
def test_recovery_cuts_a_torn_or_corrupt_tail(tmp_path: Path, damage: str) -> None:
    log = Log(str(tmp_path), LogConfig(index_interval_bytes=64))
    for _ in range(5):
        append(log, batch(2))
    # No close: as after a crash (no clean-shutdown marker).
    path = log.active.path
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        if damage == "torn":  # the last batch half written
            f.truncate(size - 7)
        elif damage == "garbage":  # a header claiming more than follows, after 5 good batches
            f.seek(size)
            f.write(b"\x00" * 8 + b"\x00\x00\x10\x00" + b"junk" * 10)
        else:  # the last batch's last byte flipped: its CRC no longer matches
            f.seek(size - 1)
            last = f.read(1)[0]
            f.seek(size - 1)
            f.write(bytes([last ^ 0xFF]))
    recovered = Log(str(tmp_path), LogConfig(index_interval_bytes=64))
    kept = 4 if damage in ("torn", "bad_crc") else 5  # whole, valid batches
    assert recovered.log_end_offset == kept * 2
    assert recovered.recovered_bytes > 0
    assert os.path.getsize(path) == kept * len(batch(2))
    assert offsets(recovered.read(0, 1 << 20)) == [(2 * i, 2 * i + 1) for i in range(kept)]
    # The log goes on exactly where it ends now.
    assert append(recovered, batch(1)) == (kept * 2, kept * 2)


def test_recovery_forgets_epochs_past_the_recovered_end(tmp_path: Path) -> None:
    log = Log(str(tmp_path), LogConfig())
    append(log, batch(2), epoch=1)
    append(log, batch(2), epoch=2)
    path = log.active.path
    with open(path, "r+b") as f:
        f.truncate(os.path.getsize(path) - 3)  # the epoch-2 batch is torn
    recovered = Log(str(tmp_path), LogConfig())
    assert recovered.log_end_offset == 2
    assert recovered.epochs.entries == [(1, 0)]


def test_truncate_to_removes_whole_batches_and_later_segments(tmp_path: Path) -> None:
    one = batch(2)
    log = Log(str(tmp_path), LogConfig(segment_bytes=len(one) * 3))
    for epoch in range(4):
        append(log, one, one, one, epoch=epoch)  # 6 offsets per epoch, 3 batches/segment
    assert log.log_end_offset == 24 and len(log.segments) == 4
    log.truncate_to(13)  # inside the batch [12, 13]: that whole batch goes
    assert log.log_end_offset == 12
    # The segment that held it stays, empty, as the active one at 12; the one after goes.
    assert [s.base_offset for s in log.segments] == [0, 6, 12] and log.active.size == 0
    assert log.epochs.entries == [(0, 0), (1, 6)]
    assert append(log, one, epoch=5) == (12, 13)
    assert offsets(log.read(10, 1 << 20)) == [(10, 11)]  # a read ends with its segment
    assert offsets(log.read(12, 1 << 20)) == [(12, 13)]
    log.truncate_to(6)  # a segment boundary
    assert log.log_end_offset == 6 and log.epochs.entries == [(0, 0)]


def test_follower_appends_must_continue_the_log(tmp_path: Path) -> None:
    leader = Log(str(tmp_path / "leader"), LogConfig())
    append(leader, batch(2), batch(3), epoch=4)
    follower = Log(str(tmp_path / "follower"), LogConfig())
    data = leader.read(0, 1 << 20)
    assert follower.append_as_follower(data[: len(data) - 5]) == 2  # a partial last batch waits
    assert follower.append_as_follower(leader.read(2, 1 << 20)) == 5
    assert follower.read(0, 1 << 20) == leader.read(0, 1 << 20)
    assert follower.epochs.entries == [(4, 0)]
    with pytest.raises(NotContiguous):
        follower.append_as_follower(leader.read(0, 1 << 20))


def test_delete_records_and_retention_delete_whole_segments(tmp_path: Path) -> None:
    one = batch(1)
    clock = Clock()
    config = LogConfig(segment_bytes=len(one) * 2, retention_ms=50_000, retention_bytes=-1)
    log = Log(str(tmp_path), config, clock)
    now_ms = int(clock.now * 1000)
    for i in range(10):
        append(log, batch(1, ts=now_ms - 120_000 + i * 20_000))  # offset i: i*20 s - 120 s
    assert len(log.segments) == 5
    assert log.delete_records(3) == 3
    assert [s.base_offset for s in log.segments] == [2, 4, 6, 8]
    with pytest.raises(OffsetOutOfRange):
        log.read(2, 100)
    assert offsets(log.read(3, 1))[0] == (3, 3)
    # Segments whose newest record is older than retention.ms go, oldest first.
    assert log.enforce_retention() == 1  # [2, 3]: newest 60 s old, goes; [4, 5]: 20 s, stays
    assert log.log_start_offset == 4
    bytes_cap = Log(
        str(tmp_path), LogConfig(segment_bytes=len(one) * 2, retention_bytes=len(one) * 3), clock
    )
    assert bytes_cap.enforce_retention() >= 1
    assert bytes_cap.size - bytes_cap.segments[0].size < len(one) * 3


def test_segment_ms_rolls_by_age(tmp_path: Path) -> None:
    clock = Clock()
    log = Log(str(tmp_path), LogConfig(segment_ms=1_000), clock)
    append(log, batch(1))
    append(log, batch(1))
    assert len(log.segments) == 1
    clock.now += 2
    append(log, batch(1))
    assert [s.base_offset for s in log.segments] == [0, 2]


def test_batches_larger_than_a_lookup_chunk_are_found_by_their_headers(tmp_path: Path) -> None:
    """Batches of 40 KiB (above the 16 KiB a lookup reads first) and a sparse index: reads
    at any offset return the batch holding it, and a read cut by max_bytes returns whole
    batches, without the copy (a view of what was read)."""
    big = [batch(4, value=bytes([i]) * 10_000) for i in range(5)]
    log = Log(str(tmp_path), LogConfig(index_interval_bytes=100_000))
    for b in big:
        append(log, b)
    assert log.log_end_offset == 20
    for offset in range(20):
        got = log.read(offset, 1 << 20)
        assert offsets(got)[0] == (offset - offset % 4, offset - offset % 4 + 3)
    cut = log.read(5, 2 * len(big[0]) + 100)
    assert isinstance(cut, memoryview) and offsets(cut) == [(4, 7), (8, 11)]
    assert len(cut) == 2 * len(big[0])
    # A header that is not a batch's ends the lookup: nothing is found past it.
    segment = log.segments[0]
    with open(segment.path, "r+b") as f:
        f.seek(2 * len(big[0]) + 16)  # the third batch's magic byte
        f.write(b"\x07")
    assert segment.position_of(9) is None
