"""Contract of BatchCoordinator: every backend must pass this suite unchanged.

The ``coordinator`` / ``coordinator_factory`` fixtures (conftest.py) run each test once
per backend. Tests talk only through the BatchCoordinator interface.
"""

from __future__ import annotations

import asyncio
import itertools
from uuid import UUID

import pytest
from kio.schema.errors import ErrorCode

from storage.coordinator import (
    EARLIEST_TIMESTAMP,
    LATEST_TIMESTAMP,
    MAX_TIMESTAMP,
    BatchCoordinator,
    BatchToCommit,
    BrokerRegistration,
    CommitResult,
    FindRequest,
    FindResult,
    ListOffsetsRequest,
    ListOffsetsResult,
    LogInfo,
    RetentionPolicy,
)
from storage.partition_key import PartitionKey

from .conftest import CoordinatorFactory

NONE = int(ErrorCode.none)
UNKNOWN = int(ErrorCode.unknown_topic_or_partition)
NOT_LEADER = int(ErrorCode.not_leader_or_follower)
OUT_OF_RANGE = int(ErrorCode.offset_out_of_range)
BAD_EPOCH = int(ErrorCode.invalid_producer_epoch)
OUT_OF_ORDER = int(ErrorCode.out_of_order_sequence_number)

CREATE_TIME = 0
LOG_APPEND_TIME = 1
NOW = 1_700_000_000_000
BIG = 1 << 62

T1 = UUID("00000000-0000-0000-0000-000000000001")
T2 = UUID("00000000-0000-0000-0000-000000000002")
_keys = itertools.count()


def batch(
    topic: UUID = T1,
    partition: int = 0,
    count: int = 1,
    size: int = 100,
    byte_offset: int = 0,
    ts: int = 1000,
    ts_type: int = CREATE_TIME,
    pid: int = -1,
    epoch: int = -1,
    seq: int = -1,
) -> BatchToCommit:
    return BatchToCommit(
        topic_id=topic,
        partition=partition,
        byte_offset=byte_offset,
        byte_size=size,
        record_count=count,
        max_timestamp=ts,
        timestamp_type=ts_type,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=seq,
    )


def key() -> str:
    return f"objects/{next(_keys):06d}"


async def commit(
    c: BatchCoordinator, *batches: BatchToCommit, now: int = NOW, object_key: str | None = None
) -> list[CommitResult]:
    return await c.commit_file(object_key or key(), 1000, 7, batches, now)


async def setup_logs(c: BatchCoordinator, *keys: tuple[UUID, int]) -> None:
    await c.create_logs([PartitionKey(t, p) for t, p in keys])


async def info(c: BatchCoordinator, topic: UUID = T1, partition: int = 0) -> LogInfo:
    return (await c.log_info([PartitionKey(topic, partition)]))[0]


async def find(
    c: BatchCoordinator, offset: int, topic: UUID = T1, partition: int = 0, max_bytes: int = BIG
) -> FindResult:
    return (await c.find_batches([FindRequest(topic, partition, offset, max_bytes)], BIG))[0]


async def list_offset(
    c: BatchCoordinator, timestamp: int, topic: UUID = T1, partition: int = 0
) -> ListOffsetsResult:
    return (await c.list_offsets([ListOffsetsRequest(topic, partition, timestamp)]))[0]


async def deleting_keys(c: BatchCoordinator) -> set[str]:
    return {f.object_key for f in await c.files_to_delete(BIG, 10_000)}


def base_offsets(results: list[CommitResult]) -> list[int]:
    return [r.base_offset for r in results]


# --------------------------------------------------------------------------- logs


async def test_new_logs_are_empty_and_create_keeps_existing(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0), (T1, 1))
    await commit(coordinator, batch(count=3, size=50))
    await setup_logs(coordinator, (T1, 0), (T1, 1), (T2, 0))  # again: existing kept
    got = await coordinator.log_info(
        [PartitionKey(T1, 0), PartitionKey(T1, 1), PartitionKey(T2, 0), PartitionKey(T2, 9)]
    )
    assert got == [
        LogInfo(NONE, 0, 3, 50),
        LogInfo(NONE, 0, 0, 0),
        LogInfo(NONE, 0, 0, 0),
        LogInfo(UNKNOWN),
    ]


# --------------------------------------------------------------------------- commit_file


async def test_offsets_are_contiguous_across_partitions_and_files(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator, (T1, 0), (T1, 1), (T2, 0))
    first = await commit(
        coordinator,
        batch(T1, 0, count=3),
        batch(T1, 1, count=2),
        batch(T1, 0, count=4),
        batch(T2, 0, count=1),
    )
    assert [r.error for r in first] == [NONE] * 4
    assert base_offsets(first) == [0, 0, 3, 0]
    second = await commit(coordinator, batch(T1, 1, count=5), batch(T1, 0, count=1))
    assert base_offsets(second) == [2, 7]
    assert (await info(coordinator, T1, 0)).high_watermark == 8
    assert (await info(coordinator, T1, 1)).high_watermark == 7
    assert (await info(coordinator, T2, 0)).high_watermark == 1


async def test_results_are_in_input_order_with_unknown_partitions(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator, (T1, 0), (T1, 1))
    results = await commit(
        coordinator,
        batch(T1, 1, count=2),
        batch(T2, 0),  # topic unknown
        batch(T1, 0, count=1),
        batch(T1, 5),  # partition unknown
        batch(T1, 1, count=1),
    )
    assert [r.error for r in results] == [NONE, UNKNOWN, NONE, UNKNOWN, NONE]
    assert [r.base_offset for r in results] == [0, -1, 0, -1, 2]
    assert (await info(coordinator, T1, 1)).high_watermark == 3


async def test_commit_records_size_log_append_time_and_log_start(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(count=10, size=100))
    await coordinator.delete_records([(PartitionKey(T1, 0), 4)], NOW)
    results = await commit(
        coordinator,
        batch(count=1, size=30, ts=5, ts_type=CREATE_TIME),
        batch(count=1, size=20, ts=5, ts_type=LOG_APPEND_TIME),
        now=NOW + 1,
    )
    assert results == [
        CommitResult(NONE, 10, -1, 4),
        CommitResult(NONE, 11, NOW + 1, 4),
    ]
    assert await info(coordinator) == LogInfo(NONE, 4, 12, 150)


async def test_file_without_accepted_batch_is_marked_deleting_at_once(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(), object_key="kept")
    results = await commit(coordinator, batch(T2, 0), object_key="rejected", now=NOW + 5)
    assert results == [CommitResult(UNKNOWN)]
    deleting = await coordinator.files_to_delete(NOW + 6, 10)
    assert [(f.object_key, f.marked_at_ms) for f in deleting] == [("rejected", NOW + 5)]


async def test_commit_file_is_atomic(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(count=2), object_key="same")
    with pytest.raises(Exception):  # noqa: B017 - any backend error; what matters is the state
        await commit(coordinator, batch(count=5), object_key="same")
    assert await info(coordinator) == LogInfo(NONE, 0, 2, 100)
    assert (await commit(coordinator, batch()))[0].base_offset == 2


async def test_concurrent_commits_never_share_offsets(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    results = await asyncio.gather(
        *(commit(coordinator, batch(count=3), batch(count=2)) for _ in range(20))
    )
    bases = sorted(r.base_offset for rs in results for r in rs)
    # Batches of 3 and 2 records tile [0, 100) with no gap and no overlap.
    covered = []
    for rs in results:
        covered += list(range(rs[0].base_offset, rs[0].base_offset + 3))
        covered += list(range(rs[1].base_offset, rs[1].base_offset + 2))
    assert sorted(covered) == list(range(100))
    assert len(bases) == 40
    assert (await info(coordinator)).high_watermark == 100


# --------------------------------------------------------------------------- idempotence

PID = 1000


async def test_duplicate_returns_original_offset_and_appends_nothing(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(count=2))  # offsets 0-1 from another producer
    first = await commit(
        coordinator, batch(count=3, pid=PID, epoch=0, seq=0, ts_type=LOG_APPEND_TIME), now=NOW
    )
    assert first == [CommitResult(NONE, 2, NOW, 0)]
    retry = await commit(
        coordinator,
        batch(count=3, pid=PID, epoch=0, seq=0, ts_type=LOG_APPEND_TIME),
        object_key="retry",
        now=NOW + 99,
    )
    # The original offset and append time: the producer must see the same answer.
    assert retry == [CommitResult(NONE, 2, NOW, 0)]
    assert await info(coordinator) == LogInfo(NONE, 0, 5, 200)
    assert [b.base_offset for b in (await find(coordinator, 0)).batches] == [0, 2]
    assert "retry" in await deleting_keys(coordinator)


async def test_sequence_gap_is_out_of_order(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(count=3, pid=PID, epoch=0, seq=0))
    results = await commit(
        coordinator,
        batch(count=1, pid=PID, epoch=0, seq=4),  # expected 3
        batch(count=1, pid=PID, epoch=0, seq=3),
        batch(count=1, pid=PID, epoch=0, seq=3),  # a retry of the one just accepted
    )
    assert [r.error for r in results] == [OUT_OF_ORDER, NONE, NONE]
    # The third is a duplicate of the second (same range) -> the second's offset.
    assert results[1].base_offset == results[2].base_offset == 3
    assert (await info(coordinator)).high_watermark == 4


async def test_stale_epoch_is_fenced(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(pid=PID, epoch=3, seq=0))
    results = await commit(coordinator, batch(pid=PID, epoch=2, seq=1))
    assert [r.error for r in results] == [BAD_EPOCH]
    assert (await info(coordinator)).high_watermark == 1


async def test_refusals_carry_the_log_start_offset(coordinator: BatchCoordinator) -> None:
    """As Kafka answers a sequence or epoch refusal (the differential test compares them)."""
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(count=3, pid=PID, epoch=2, seq=0))
    results = await commit(
        coordinator,
        batch(pid=PID, epoch=2, seq=7),  # a gap
        batch(pid=PID, epoch=1, seq=3),  # an old epoch
        batch(pid=PID, epoch=3, seq=1),  # a new epoch not starting at 0
    )
    assert [(r.error, r.log_start_offset) for r in results] == [
        (OUT_OF_ORDER, 0),
        (BAD_EPOCH, 0),
        (OUT_OF_ORDER, 0),
    ]


async def test_epoch_bump_restarts_sequences_at_zero(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(count=5, pid=PID, epoch=0, seq=0))
    rejected = await commit(coordinator, batch(pid=PID, epoch=1, seq=5))
    assert [r.error for r in rejected] == [OUT_OF_ORDER]
    accepted = await commit(coordinator, batch(count=2, pid=PID, epoch=1, seq=0))
    assert accepted[0].error == NONE and accepted[0].base_offset == 5
    after = await commit(
        coordinator,
        batch(pid=PID, epoch=0, seq=5),  # the old epoch is now fenced
        batch(pid=PID, epoch=1, seq=2),  # continues the new epoch
        batch(count=5, pid=PID, epoch=1, seq=0),  # not a duplicate: seq 0-4, stored 0-1
    )
    assert [r.error for r in after] == [BAD_EPOCH, NONE, OUT_OF_ORDER]
    assert (await info(coordinator)).high_watermark == 8


async def test_duplicate_within_one_commit(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    results = await commit(
        coordinator,
        batch(count=2, pid=PID, epoch=0, seq=0),
        batch(count=2, pid=PID, epoch=0, seq=2),
        batch(count=2, pid=PID, epoch=0, seq=0),
        batch(count=2, pid=PID, epoch=0, seq=6),
    )
    assert [(r.error, r.base_offset) for r in results] == [
        (NONE, 0),
        (NONE, 2),
        (NONE, 0),
        (OUT_OF_ORDER, -1),
    ]
    assert await info(coordinator) == LogInfo(NONE, 0, 4, 200)


async def test_sequence_wraps_around_after_int32_max(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    top = 2**31 - 1
    results = await commit(
        coordinator,
        batch(count=2, pid=PID, epoch=0, seq=top - 1),  # sequences top-1, top
        batch(count=3, pid=PID, epoch=0, seq=0),  # wraps: 0, 1, 2
        batch(count=2, pid=PID, epoch=0, seq=top - 1),  # duplicate of the first
    )
    assert [(r.error, r.base_offset) for r in results] == [(NONE, 0), (NONE, 2), (NONE, 0)]
    # A batch whose own range wraps: top-1, top, 0 -> the next must be 1.
    other = PID + 1
    results = await commit(
        coordinator,
        batch(count=3, pid=other, epoch=0, seq=top - 1),
        batch(count=1, pid=other, epoch=0, seq=top + 1),  # no such sequence
        batch(count=1, pid=other, epoch=0, seq=1),
        batch(count=3, pid=other, epoch=0, seq=top - 1),  # duplicate of the wrapping batch
    )
    assert [(r.error, r.base_offset) for r in results] == [
        (NONE, 5),
        (OUT_OF_ORDER, -1),
        (NONE, 8),
        (NONE, 5),
    ]


async def test_only_the_last_five_batches_are_recognised(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, *(batch(pid=PID, epoch=0, seq=s) for s in range(6)))
    # seq 0 fell out of the retained five: not a duplicate, and out of sequence.
    oldest = await commit(coordinator, batch(pid=PID, epoch=0, seq=0))
    assert oldest[0].error == OUT_OF_ORDER
    # seq 1..5 are still known.
    retained = await commit(coordinator, *(batch(pid=PID, epoch=0, seq=s) for s in range(1, 6)))
    assert [(r.error, r.base_offset) for r in retained] == [(NONE, s) for s in range(1, 6)]
    assert (await info(coordinator)).high_watermark == 6


async def test_unknown_producer_may_start_at_any_sequence(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0), (T1, 1))
    results = await commit(
        coordinator,
        batch(T1, 0, pid=PID, epoch=4, seq=42),
        batch(T1, 1, pid=PID, epoch=4, seq=7),  # state is per partition
        batch(T1, 0, pid=PID + 1, epoch=0, seq=9),  # and per producer
        batch(T1, 0, pid=PID, epoch=4, seq=43),
    )
    assert [(r.error, r.base_offset) for r in results] == [
        (NONE, 0),
        (NONE, 0),
        (NONE, 1),
        (NONE, 2),
    ]


async def test_rejected_batches_do_not_change_producer_state(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(pid=PID, epoch=2, seq=0))
    await commit(
        coordinator,
        batch(pid=PID, epoch=3, seq=4),  # rejected bump must not move the epoch
        batch(pid=PID, epoch=2, seq=9),  # rejected gap must not move the sequence
    )
    results = await commit(coordinator, batch(pid=PID, epoch=2, seq=1))
    assert [(r.error, r.base_offset) for r in results] == [(NONE, 1)]


# --------------------------------------------------------------------------- find_batches


async def filled(coordinator: BatchCoordinator) -> None:
    """T1/0: five 100-byte batches of 2 records (offsets 0..9) in two files;
    T1/1: three 100-byte batches of 1 record; T2/0: one 1000-byte batch."""
    await setup_logs(coordinator, (T1, 0), (T1, 1), (T2, 0))
    await commit(
        coordinator,
        batch(T1, 0, count=2, byte_offset=0),
        batch(T1, 1, count=1, byte_offset=100),
        batch(T1, 0, count=2, byte_offset=200),
        object_key="f1",
    )
    await commit(
        coordinator,
        batch(T1, 0, count=2, byte_offset=0),
        batch(T1, 0, count=2, byte_offset=100),
        batch(T1, 0, count=2, byte_offset=200),
        batch(T1, 1, count=1, byte_offset=300),
        batch(T1, 1, count=1, byte_offset=400),
        batch(T2, 0, count=1, size=1000, byte_offset=500),
        object_key="f2",
    )


async def test_find_batches_returns_locations_in_offset_order(
    coordinator: BatchCoordinator,
) -> None:
    await filled(coordinator)
    result = await find(coordinator, 3)  # inside the second batch (2-3)
    assert result.error == NONE
    assert (result.log_start_offset, result.high_watermark) == (0, 10)
    got = [
        (b.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset)
        for b in result.batches
    ]
    assert got == [
        ("f1", 200, 100, 2, 3),
        ("f2", 0, 100, 4, 5),
        ("f2", 100, 100, 6, 7),
        ("f2", 200, 100, 8, 9),
    ]


async def test_find_batches_partition_budget(coordinator: BatchCoordinator) -> None:
    await filled(coordinator)
    results = await coordinator.find_batches(
        [FindRequest(T1, 0, 0, 250), FindRequest(T1, 1, 0, 200)], BIG
    )
    assert [b.base_offset for b in results[0].batches] == [0, 2]
    assert [b.base_offset for b in results[1].batches] == [0, 1]


async def test_find_batches_total_budget(coordinator: BatchCoordinator) -> None:
    await filled(coordinator)
    results = await coordinator.find_batches(
        [FindRequest(T1, 0, 0, BIG), FindRequest(T1, 1, 0, BIG), FindRequest(T2, 0, 0, BIG)],
        400,
    )
    assert [b.base_offset for b in results[0].batches] == [0, 2, 4, 6]
    # The total is used up: later partitions answer NONE with their offsets, no batches.
    assert results[1] == FindResult(NONE, 0, 3, [], 3)
    assert results[2] == FindResult(NONE, 0, 1, [], 1)


async def test_find_batches_later_partitions_use_what_is_left_of_the_total(
    coordinator: BatchCoordinator,
) -> None:
    await filled(coordinator)
    results = await coordinator.find_batches(
        [FindRequest(T1, 0, 0, 200), FindRequest(T2, 0, 0, BIG), FindRequest(T1, 1, 0, BIG)],
        450,
    )
    assert [b.base_offset for b in results[0].batches] == [0, 2]
    assert results[1].batches == []  # 1000 bytes do not fit in the 250 left
    assert [b.base_offset for b in results[2].batches] == [0, 1]


async def test_find_batches_first_batch_of_the_answer_is_always_included(
    coordinator: BatchCoordinator,
) -> None:
    await filled(coordinator)
    results = await coordinator.find_batches(
        [
            FindRequest(T1, 0, 10, 1),  # at the high watermark: nothing, not "first"
            FindRequest(T2, 0, 0, 1),  # 1000 bytes > both limits, yet included
            FindRequest(T1, 1, 0, BIG),
        ],
        10,
    )
    assert results[0] == FindResult(NONE, 0, 10, [], 10)
    assert [b.byte_size for b in results[1].batches] == [1000]
    assert results[2] == FindResult(NONE, 0, 3, [], 3)


async def test_find_batches_out_of_range_and_at_high_watermark(
    coordinator: BatchCoordinator,
) -> None:
    await filled(coordinator)
    await coordinator.delete_records([(PartitionKey(T1, 0), 4)], NOW)
    results = await coordinator.find_batches(
        [
            FindRequest(T1, 0, 3, BIG),
            FindRequest(T1, 0, 11, BIG),
            FindRequest(T1, 0, 10, BIG),
            FindRequest(T1, 9, 0, BIG),
            FindRequest(T1, 0, 4, BIG),
        ],
        BIG,
    )
    assert results[0] == FindResult(OUT_OF_RANGE, 4, 10, [], 10)
    assert results[1] == FindResult(OUT_OF_RANGE, 4, 10, [], 10)
    assert results[2] == FindResult(NONE, 4, 10, [], 10)
    assert results[3].error == UNKNOWN and results[3].batches == []
    assert [b.base_offset for b in results[4].batches] == [4, 6, 8]


# --------------------------------------------------------------------------- list_offsets


async def test_list_offsets_earliest_latest(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(count=5), batch(count=5))
    await coordinator.delete_records([(PartitionKey(T1, 0), 3)], NOW)
    results = await coordinator.list_offsets(
        [
            ListOffsetsRequest(T1, 0, EARLIEST_TIMESTAMP),
            ListOffsetsRequest(T1, 0, LATEST_TIMESTAMP),
            ListOffsetsRequest(T2, 0, LATEST_TIMESTAMP),
        ]
    )
    assert results == [
        ListOffsetsResult(NONE, 3, -1),
        ListOffsetsResult(NONE, 10, -1),
        ListOffsetsResult(UNKNOWN),
    ]


async def test_list_offsets_max_timestamp(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0), (T1, 1))
    assert await list_offset(coordinator, MAX_TIMESTAMP) == ListOffsetsResult(NONE, -1, -1)
    await commit(
        coordinator,
        batch(count=2, ts=500),
        batch(count=3, ts=900),  # offsets 2-4: the first with the greatest
        batch(count=1, ts=100),
        batch(count=2, ts=900),  # a tie: the earlier wins
        batch(T1, 1, count=2, ts=10**12),
        batch(T1, 1, count=2, ts=5, ts_type=LOG_APPEND_TIME),  # appended at NOW: greater
    )
    assert await list_offset(coordinator, MAX_TIMESTAMP) == ListOffsetsResult(NONE, 4, 900)
    assert await list_offset(coordinator, MAX_TIMESTAMP, T1, 1) == ListOffsetsResult(NONE, 3, NOW)


async def test_list_offsets_by_timestamp(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    await commit(
        coordinator,
        batch(count=4, ts=100),  # 0-3
        batch(count=4, ts=300),  # 4-7
        batch(count=4, ts=200),  # 8-11
        batch(count=4, ts=5, ts_type=LOG_APPEND_TIME),  # 12-15 at NOW
    )
    await coordinator.delete_records([(PartitionKey(T1, 0), 2)], NOW)
    cases = {
        0: ListOffsetsResult(NONE, 2, 100),  # first batch, clamped to the log start
        150: ListOffsetsResult(NONE, 4, 300),
        300: ListOffsetsResult(NONE, 4, 300),
        301: ListOffsetsResult(NONE, 12, NOW),  # by its append time, not its 5
        NOW + 1: ListOffsetsResult(NONE, -1, -1),
    }
    for ts, expected in cases.items():
        assert await list_offset(coordinator, ts) == expected, ts


# --------------------------------------------------------------------------- deletion


async def test_delete_records(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(count=5, size=10), object_key="a")  # 0-4
    await commit(coordinator, batch(count=5, size=20), batch(count=5, size=30), object_key="b")
    results = await coordinator.delete_records(
        [
            (PartitionKey(T1, 0), 7),
            (PartitionKey(T1, 0), 3),  # backwards: no-op
            (PartitionKey(T1, 0), 16),  # beyond the high watermark
            (PartitionKey(T2, 0), 1),
        ],
        NOW,
    )
    assert [(r.error, r.low_watermark) for r in results] == [
        (NONE, 7),
        (NONE, 7),
        (OUT_OF_RANGE, -1),
        (UNKNOWN, -1),
    ]
    # The batch 5-9 straddles the new start and stays; only file "a" is now empty.
    assert await info(coordinator) == LogInfo(NONE, 7, 15, 50)
    assert await deleting_keys(coordinator) == {"a"}
    assert [b.base_offset for b in (await find(coordinator, 7)).batches] == [5, 10]

    results = await coordinator.delete_records([(PartitionKey(T1, 0), -1)], NOW + 1)
    assert [(r.error, r.low_watermark) for r in results] == [(NONE, 15)]
    assert await info(coordinator) == LogInfo(NONE, 15, 15, 0)
    assert await deleting_keys(coordinator) == {"a", "b"}


async def test_retention_by_time_drops_only_an_old_prefix(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0), (T1, 1))
    await commit(
        coordinator,
        batch(count=2, size=10, ts=NOW - 5000),
        batch(count=2, size=10, ts=NOW - 4000),
        batch(count=2, size=10, ts=NOW - 100),
        batch(count=2, size=10, ts=NOW - 9000),  # old, but after a recent one: kept
        batch(T1, 1, count=3, size=10, ts=1, ts_type=LOG_APPEND_TIME),
        object_key="f",
        now=NOW - 50,
    )
    results = await coordinator.enforce_retention(
        [
            RetentionPolicy(T1, 0, 1000, -1),
            RetentionPolicy(T1, 1, 1000, -1),  # appended 50 ms ago: kept despite ts=1
            RetentionPolicy(T2, 0, 1000, -1),
        ],
        NOW,
    )
    assert results == [LogInfo(NONE, 4, 8, 20), LogInfo(NONE, 0, 3, 10), LogInfo(UNKNOWN)]
    # Later everything is old: the log start reaches the high watermark, no further.
    results = await coordinator.enforce_retention(
        [RetentionPolicy(T1, 0, 1000, -1), RetentionPolicy(T1, 1, 1000, -1)], NOW + 10_000
    )
    assert results == [LogInfo(NONE, 8, 8, 0), LogInfo(NONE, 3, 3, 0)]
    assert await deleting_keys(coordinator) == {"f"}


async def test_retention_by_bytes_follows_kafka(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, *(batch(count=1, size=100) for _ in range(5)))  # 500 bytes
    unlimited = await coordinator.enforce_retention([RetentionPolicy(T1, 0, -1, -1)], NOW)
    assert unlimited == [LogInfo(NONE, 0, 5, 500)]
    # Kafka drops the oldest while size - its size >= retention.bytes: 500-100 >= 250,
    # 400-100 >= 250, then 300-100 < 250 stops.
    results = await coordinator.enforce_retention([RetentionPolicy(T1, 0, -1, 250)], NOW)
    assert results == [LogInfo(NONE, 2, 5, 300)]
    exact = await coordinator.enforce_retention([RetentionPolicy(T1, 0, -1, 200)], NOW)
    assert exact == [LogInfo(NONE, 3, 5, 200)]
    assert [b.base_offset for b in (await find(coordinator, 3)).batches] == [3, 4]


async def test_retention_by_time_and_bytes_takes_the_longer_prefix(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator, (T1, 0), (T1, 1))
    old, new = NOW - 5000, NOW
    await commit(
        coordinator,
        *(batch(T1, 0, size=100, ts=ts) for ts in (old, new, old, new)),
        *(batch(T1, 1, size=100, ts=ts) for ts in (old, old, new)),
    )
    results = await coordinator.enforce_retention(
        [RetentionPolicy(T1, 0, 1000, 150), RetentionPolicy(T1, 1, 1000, 150)], NOW
    )
    assert results == [
        LogInfo(NONE, 2, 4, 200),  # time drops one batch, bytes two
        LogInfo(NONE, 2, 3, 100),  # bytes drop one batch, time two
    ]


async def test_delete_logs(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0), (T1, 1), (T2, 0))
    await commit(coordinator, batch(T1, 0, pid=PID, epoch=0, seq=0), batch(T1, 1), object_key="t1")
    await commit(coordinator, batch(T1, 0), batch(T2, 0), object_key="shared")
    await coordinator.delete_logs([T1], NOW + 3)
    got = await coordinator.log_info(
        [PartitionKey(T1, 0), PartitionKey(T1, 1), PartitionKey(T2, 0)]
    )
    assert [r.error for r in got] == [UNKNOWN, UNKNOWN, NONE]
    deleting = await coordinator.files_to_delete(BIG, 10)
    assert [(f.object_key, f.marked_at_ms) for f in deleting] == [("t1", NOW + 3)]
    # A topic re-created under the same id starts afresh, producer state included.
    await setup_logs(coordinator, (T1, 0))
    assert await info(coordinator) == LogInfo(NONE, 0, 0, 0)
    results = await commit(coordinator, batch(T1, 0, pid=PID, epoch=0, seq=7))
    assert [(r.error, r.base_offset) for r in results] == [(NONE, 0)]


async def test_files_to_delete_and_forget_files(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    for i, now in enumerate([NOW + 30, NOW + 10, NOW + 20]):
        await commit(coordinator, batch(T2, 0), object_key=f"empty-{i}", now=now)
    await commit(coordinator, batch(), object_key="live")
    listed = await coordinator.files_to_delete(NOW + 25, 10)
    assert [(f.object_key, f.marked_at_ms) for f in listed] == [
        ("empty-1", NOW + 10),
        ("empty-2", NOW + 20),
    ]
    assert [f.object_key for f in await coordinator.files_to_delete(BIG, 1)] == ["empty-1"]
    await coordinator.forget_files(["empty-1", "live", "never-existed"])
    assert await deleting_keys(coordinator) == {"empty-0", "empty-2"}
    # A file that still holds live batches is never forgotten.
    assert [b.object_key for b in (await find(coordinator, 0)).batches] == ["live"]


async def test_unknown_objects_are_those_no_file_names(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(), object_key="live")
    await commit(coordinator, batch(T2, 0), object_key="deleting")  # unknown log: marked at once
    keys = ["orphan-1", "live", "deleting", "orphan-2"]
    assert await coordinator.unknown_objects(keys) == ["orphan-1", "orphan-2"]
    assert await coordinator.unknown_objects([]) == []
    many = [f"k{i}" for i in range(1200)]
    assert await coordinator.unknown_objects([*many, "live"]) == many


async def test_state_survives_close_and_reopen(coordinator_factory: CoordinatorFactory) -> None:
    first = await coordinator_factory.open()
    await setup_logs(first, (T1, 0))
    await commit(first, batch(count=4, size=70, pid=PID, epoch=1, seq=0), object_key="f")
    await commit(first, batch(T2, 0), object_key="gone", now=NOW + 1)
    await first.close()

    second = await coordinator_factory.open()
    assert await info(second) == LogInfo(NONE, 0, 4, 70)
    assert [b.object_key for b in (await find(second, 0)).batches] == ["f"]
    assert await deleting_keys(second) == {"gone"}
    # Producer state persisted too: the retry is a duplicate, the next is in sequence.
    results = await commit(
        second,
        batch(count=4, pid=PID, epoch=1, seq=0),
        batch(count=1, pid=PID, epoch=1, seq=4),
    )
    assert [(r.error, r.base_offset) for r in results] == [(NONE, 0), (NONE, 4)]


async def test_producer_id_blocks_are_disjoint_and_durable(
    coordinator_factory: CoordinatorFactory,
) -> None:
    first_coordinator = await coordinator_factory.open()
    first = await first_coordinator.allocate_producer_ids(1000)
    second = await first_coordinator.allocate_producer_ids(10)
    assert second >= first + 1000
    await first_coordinator.close()
    # Another coordinator on the same storage (a restarted or second broker).
    other = await coordinator_factory.open()
    third = await other.allocate_producer_ids(5)
    assert third >= second + 10


async def test_cluster_id_is_the_first_proposal(coordinator_factory: CoordinatorFactory) -> None:
    first = await coordinator_factory.open()
    assert await first.cluster_id("abc") == "abc"
    other = await coordinator_factory.open()
    assert await other.cluster_id("xyz") == "abc"


def registration(node_id: int, incarnation: int, port: int = 9092) -> BrokerRegistration:
    return BrokerRegistration(node_id, "h", port, f"az-{node_id}", UUID(int=incarnation))


async def test_broker_heartbeats_list_live_brokers(coordinator: BatchCoordinator) -> None:
    one, two = registration(1, 1), registration(2, 2)
    assert await coordinator.broker_heartbeat(one, 60_000, starting=True) == [one]
    assert await coordinator.broker_heartbeat(two, 60_000, starting=True) == [one, two]
    # A new incarnation of node 1 (a restart) replaces the old one once it is past its session.
    await asyncio.sleep(0.05)
    restarted = registration(1, 3, port=9093)
    assert await coordinator.broker_heartbeat(restarted, 30, starting=True) == [restarted]
    # A clean leave is seen at once; the other broker's heartbeat brings it back.
    await coordinator.broker_leave(restarted)
    assert await coordinator.broker_heartbeat(two, 60_000, starting=False) == [two]


async def test_a_live_node_id_is_not_taken_over(coordinator: BatchCoordinator) -> None:
    holder, intruder = registration(1, 1), registration(1, 2, port=9999)
    await coordinator.broker_heartbeat(holder, 60_000, starting=True)
    assert await coordinator.broker_heartbeat(intruder, 60_000, starting=True) == [holder]
    # A leave by the intruder's incarnation does not remove the holder.
    await coordinator.broker_leave(intruder)
    assert await coordinator.broker_heartbeat(holder, 60_000, starting=False) == [holder]


# --------------------------------------------------------------------------- jobs: list/replace


async def test_list_batches_is_a_snapshot_with_objects_and_times(
    coordinator: BatchCoordinator,
) -> None:
    from storage.coordinator import ListBatchesRequest

    await setup_logs(coordinator, (T1, 0), (T1, 1))
    await commit(
        coordinator,
        batch(count=2, size=10, byte_offset=0, ts=5),
        batch(T1, 1, count=1, size=20, byte_offset=10, ts=6),
        object_key="f1",
        now=NOW,
    )
    await commit(
        coordinator, batch(count=3, size=30, ts=7, ts_type=LOG_APPEND_TIME), object_key="f2"
    )
    listed = await coordinator.list_batches(
        [
            ListBatchesRequest(T1, 0),
            ListBatchesRequest(T1, 0, 2, -1),
            ListBatchesRequest(T1, 0, 0, 2),  # base_offset < 2: only the first batch
            ListBatchesRequest(T1, 1),
            ListBatchesRequest(T2, 0),
        ]
    )
    whole = listed[0]
    assert (whole.error, whole.log_start_offset, whole.high_watermark) == (NONE, 0, 5)
    assert [
        (b.object_key, b.byte_offset, b.byte_size, b.base_offset, b.last_offset)
        for b in whole.batches
    ] == [("f1", 0, 10, 0, 1), ("f2", 0, 30, 2, 4)]
    first, second = whole.batches
    assert (first.object_size, first.reason, first.committed_at) == (1000, "produce", NOW)
    assert (first.timestamp_type, first.timestamp) == (CREATE_TIME, 5)
    assert (second.timestamp_type, second.timestamp) == (LOG_APPEND_TIME, NOW)
    assert [b.base_offset for b in listed[1].batches] == [2]
    assert [b.base_offset for b in listed[2].batches] == [0]
    assert [b.object_key for b in listed[3].batches] == ["f1"]
    assert listed[4].error == UNKNOWN and listed[4].batches == []


def _old(*specs: tuple[int, int, str]) -> list:
    from storage.coordinator import ReplacedBatch

    return [ReplacedBatch(base, last, k) for base, last, k in specs]


def _new(*specs: tuple[int, int, int, int]) -> list:
    from storage.coordinator import NewBatch

    return [
        NewBatch(off, size, base, last, CREATE_TIME, 1000, -1) for off, size, base, last in specs
    ]


async def test_replace_batches_swaps_pointers_and_frees_files(
    coordinator: BatchCoordinator,
) -> None:
    from storage.coordinator import BatchReplacement

    await setup_logs(coordinator, (T1, 0), (T1, 1))
    await commit(coordinator, batch(count=2, size=10), batch(T1, 1, size=5), object_key="a")
    await commit(coordinator, batch(count=3, size=20), object_key="b")  # 2-4
    await commit(coordinator, batch(count=1, size=30), object_key="c")  # 5
    results = await coordinator.replace_batches(
        "merged",
        30,
        [
            BatchReplacement(
                T1, 0, _old((0, 1, "a"), (2, 4, "b")), _new((0, 10, 0, 1), (10, 20, 2, 4))
            )
        ],
        NOW + 7,
    )
    assert results == [NONE]
    got = await find(coordinator, 0)
    assert [(b.object_key, b.byte_offset, b.base_offset, b.last_offset) for b in got.batches] == [
        ("merged", 0, 0, 1),
        ("merged", 10, 2, 4),
        ("c", 0, 5, 5),
    ]
    # Offsets and sizes unchanged; "b" is empty now, "a" still holds partition 1.
    assert await info(coordinator) == LogInfo(NONE, 0, 6, 60)
    deleting = await coordinator.files_to_delete(BIG, 10)
    assert [(f.object_key, f.marked_at_ms) for f in deleting] == [("b", NOW + 7)]
    # Reading from the middle of a merged batch still starts at that batch.
    assert [b.base_offset for b in (await find(coordinator, 3)).batches] == [2, 5]
    # Commits go on at the high watermark after a swap.
    assert base_offsets(await commit(coordinator, batch(count=2))) == [6]


async def test_replace_batches_with_gaps_keeps_offsets(coordinator: BatchCoordinator) -> None:
    """Key compaction: fewer, smaller batches with their original offsets; none is fine."""
    from storage.coordinator import BatchReplacement, ListBatchesRequest

    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(count=4, size=40), batch(count=4, size=40), object_key="a")
    await commit(coordinator, batch(count=4, size=40), object_key="b")  # 8-11
    results = await coordinator.replace_batches(
        "compacted",
        25,
        [BatchReplacement(T1, 0, _old((0, 3, "a"), (4, 7, "a")), _new((0, 25, 4, 7)))],
        NOW,
    )
    assert results == [NONE]
    assert await info(coordinator) == LogInfo(NONE, 0, 12, 65)
    # Fetching at an offset inside the gap answers the next batch, which starts later.
    assert [(b.base_offset, b.last_offset) for b in (await find(coordinator, 1)).batches] == [
        (4, 7),
        (8, 11),
    ]
    assert await deleting_keys(coordinator) == {"a"}
    # A range compacted away entirely: no batch left, the log keeps its offsets.
    results = await coordinator.replace_batches(
        "empty", 0, [BatchReplacement(T1, 0, _old((8, 11, "b")), [])], NOW
    )
    assert results == [NONE]
    listing = (await coordinator.list_batches([ListBatchesRequest(T1, 0)]))[0]
    assert [(b.base_offset, b.object_key) for b in listing.batches] == [(4, "compacted")]
    assert (listing.log_start_offset, listing.high_watermark) == (0, 12)
    assert await info(coordinator) == LogInfo(NONE, 0, 12, 25)
    # "empty" holds nothing: marked deleting at once, like "b".
    assert await deleting_keys(coordinator) == {"a", "b", "empty"}


async def test_replace_batches_conflicts_leave_everything_unchanged(
    coordinator: BatchCoordinator,
) -> None:
    from storage.coordinator import INVALID_REQUEST, REPLACE_CONFLICT, BatchReplacement

    await setup_logs(coordinator, (T1, 0), (T1, 1))
    await commit(coordinator, batch(count=2, size=10), batch(T1, 1, count=2), object_key="a")
    await commit(coordinator, batch(count=2, size=10), batch(T1, 1, count=2), object_key="b")
    await commit(coordinator, batch(count=2, size=10), object_key="c")  # 4-5
    # Retention (here DeleteRecords) dropped batch 0-1 after the job planned.
    await coordinator.delete_records([(PartitionKey(T1, 0), 2)], NOW)
    results = await coordinator.replace_batches(
        "m1",
        40,
        [
            BatchReplacement(
                T1, 0, _old((0, 1, "a"), (2, 3, "b")), _new((0, 10, 0, 1), (10, 10, 2, 3))
            ),
            # Not all batches of the range listed (4-5 in "c" is missing).
            BatchReplacement(T1, 0, _old((2, 3, "b"), (4, 5, "x")), _new((20, 10, 2, 3))),
            # The expected object is another one (someone merged first).
            BatchReplacement(T1, 1, _old((0, 1, "zzz")), _new((30, 5, 0, 1))),
            # Malformed: a new batch outside the range; old empty.
            BatchReplacement(T1, 1, _old((2, 3, "b")), _new((30, 5, 2, 9))),
            BatchReplacement(T1, 1, [], []),
            BatchReplacement(T2, 0, _old((0, 0, "a")), []),
        ],
        NOW + 1,
    )
    assert results == [
        REPLACE_CONFLICT,
        REPLACE_CONFLICT,
        REPLACE_CONFLICT,
        INVALID_REQUEST,
        INVALID_REQUEST,
        UNKNOWN,
    ]
    assert [b.object_key for b in (await find(coordinator, 2)).batches] == ["b", "c"]
    assert [b.object_key for b in (await find(coordinator, 0, T1, 1)).batches] == ["a", "b"]
    # Nothing applied: the new object is deleting at once; "a" still serves partition 1.
    assert await deleting_keys(coordinator) == {"m1"}
    # A range whose end cuts a batch is a conflict too (the batch 2-3 reaches past 2).
    results = await coordinator.replace_batches(
        "m2", 5, [BatchReplacement(T1, 1, _old((0, 1, "a"), (2, 2, "b")), [])], NOW
    )
    assert results == [REPLACE_CONFLICT]


async def test_replace_batches_retry_of_a_registered_key_changes_nothing(
    coordinator: BatchCoordinator,
) -> None:
    from storage.coordinator import REPLACE_CONFLICT, BatchReplacement

    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(count=2, size=10), object_key="a")
    swap = [BatchReplacement(T1, 0, _old((0, 1, "a")), _new((0, 10, 0, 1)))]
    assert await coordinator.replace_batches("m", 10, swap, NOW) == [NONE]
    # The same call again (its first outcome was unknown): refused, nothing marked.
    assert await coordinator.replace_batches("m", 10, swap, NOW) == [REPLACE_CONFLICT]
    assert [b.object_key for b in (await find(coordinator, 0)).batches] == ["m"]
    assert await deleting_keys(coordinator) == {"a"}
    assert await info(coordinator) == LogInfo(NONE, 0, 2, 10)


async def test_concurrent_replacements_of_one_range_apply_once(
    coordinator_factory: CoordinatorFactory,
) -> None:
    from storage.coordinator import REPLACE_CONFLICT, BatchReplacement

    c1 = await coordinator_factory.open()
    c2 = await coordinator_factory.open()
    await setup_logs(c1, (T1, 0))
    await commit(c1, batch(count=2, size=10), object_key="a")
    await commit(c1, batch(count=2, size=10), object_key="b")
    old = _old((0, 1, "a"), (2, 3, "b"))
    results = await asyncio.gather(
        c1.replace_batches(
            "x", 20, [BatchReplacement(T1, 0, old, _new((0, 10, 0, 1), (10, 10, 2, 3)))], NOW
        ),
        c2.replace_batches(
            "y", 20, [BatchReplacement(T1, 0, old, _new((0, 10, 0, 1), (10, 10, 2, 3)))], NOW
        ),
        commit(c2, batch(count=1, size=10), object_key="c"),
    )
    assert sorted([results[0][0], results[1][0]]) == [NONE, REPLACE_CONFLICT]
    winner = "x" if results[0] == [NONE] else "y"
    assert [b.object_key for b in (await find(c1, 0)).batches] == [winner, winner, "c"]
    assert await deleting_keys(c1) == {"a", "b", "y" if winner == "x" else "x"}
    assert await info(c1) == LogInfo(NONE, 0, 5, 30)


# --------------------------------------------------------------------------- migration


async def test_seeded_log_starts_at_the_boundary_with_producer_state(
    coordinator: BatchCoordinator,
) -> None:
    from storage.coordinator import SeededProducerBatch

    await setup_logs(coordinator, (T1, 0))
    # A classic log sealed at 40: PID's last batches were seq 0-9 at 20-29 and 10-19 at 30-39.
    seeded = [
        SeededProducerBatch(PID, 2, 0, 9, 20, 29),
        SeededProducerBatch(PID, 2, 10, 19, 30, 39),
    ]
    assert await coordinator.seed_log(PartitionKey(T1, 0), 40, seeded) == (40, 40)
    # Again, later (a new leader sealed after more appends): still empty, so it moves.
    assert await coordinator.seed_log(PartitionKey(T1, 0), 41, seeded) == (41, 41)
    assert await info(coordinator) == LogInfo(NONE, 41, 41, 0)
    # A retry of the last classic batch is a duplicate at its classic offset; the next
    # sequence continues at the boundary; a gap or an old epoch is refused as before.
    results = await commit(
        coordinator,
        batch(count=10, pid=PID, epoch=2, seq=10),
        batch(count=2, pid=PID, epoch=2, seq=20),
        batch(count=1, pid=PID, epoch=2, seq=30),
        batch(count=1, pid=PID, epoch=1, seq=22),
    )
    assert [(r.error, r.base_offset) for r in results[:2]] == [(NONE, 30), (NONE, 41)]
    assert [r.error for r in results[2:]] == [OUT_OF_ORDER, BAD_EPOCH]
    assert await info(coordinator) == LogInfo(NONE, 41, 43, 100)
    # Below the boundary there is nothing here (the classic log serves it).
    assert (await find(coordinator, 41)).batches[0].base_offset == 41
    # A log that took batches past the start asked for is left alone.
    assert await coordinator.seed_log(PartitionKey(T1, 0), 42, []) == (41, 43)
    assert await info(coordinator) == LogInfo(NONE, 41, 43, 100)


async def test_seeding_drops_the_markers_a_classic_partition_log_holds(
    coordinator: BatchCoordinator,
) -> None:
    # A transaction's outcome is recorded for each of its partitions, classic ones too:
    # their logs here hold those markers only (as batches below the classic boundary).
    await setup_logs(coordinator, (T1, 0))
    await commit(coordinator, batch(), batch())
    assert await coordinator.seed_log(PartitionKey(T1, 0), 10, []) == (10, 10)
    assert await info(coordinator) == LogInfo(NONE, 10, 10, 0)
    assert (await find(coordinator, 10)).batches == []
    assert "objects/" in "".join(await deleting_keys(coordinator))


async def test_sealed_log_takes_no_batch_at_or_after_its_boundary(
    coordinator: BatchCoordinator,
) -> None:
    await setup_logs(coordinator, (T1, 0), (T1, 1))
    await commit(coordinator, batch(count=3, pid=PID, epoch=1, seq=0), batch(partition=1))
    sealed = await coordinator.seal_log(PartitionKey(T1, 0))
    assert (sealed.error, sealed.log_start_offset, sealed.boundary) == (NONE, 0, 3)
    assert [tuple(p) for p in sealed.producers] == [(PID, 1, 0, 2, 0, 2)]
    # A broker that has not seen the migration yet: the sealed log's batch is refused
    # NOT_LEADER_OR_FOLLOWER (its producer finds the classic leader), nothing stored there;
    # the object's batch for another partition is committed (long run #5: the whole
    # commit failed, a traceback and KAFKA_STORAGE_ERROR for every producer in the object).
    results = await commit(coordinator, batch(partition=1), batch(pid=PID, epoch=1, seq=3))
    assert [r.error for r in results] == [NONE, NOT_LEADER]
    assert (await info(coordinator)).high_watermark == 3
    assert (await info(coordinator, partition=1)).high_watermark == 2
    # Its retry too, and a retry of a batch written before the seal (the classic leader
    # answers it, holding the producer's state from the seal).
    results = await commit(
        coordinator, batch(pid=PID, epoch=1, seq=3), batch(pid=PID, epoch=1, seq=0, count=3)
    )
    assert [r.error for r in results] == [NOT_LEADER, NOT_LEADER]
    # Other partitions go on; reads of the sealed log too; sealing again answers the same.
    assert [r.error for r in await commit(coordinator, batch(partition=1))] == [NONE]
    assert (await info(coordinator, partition=1)).high_watermark == 3
    assert [b.base_offset for b in (await find(coordinator, 0)).batches] == [0]
    again = await coordinator.seal_log(PartitionKey(T1, 0))
    assert (again.error, again.boundary) == (NONE, 3)
    assert (await coordinator.seal_log(PartitionKey(T2, 0))).error == UNKNOWN


async def test_a_sealed_log_takes_no_marker_past_its_boundary(
    coordinator: BatchCoordinator,
) -> None:
    # Migrated to classic: the partition's markers are its classic leader's. A broker that
    # still sees it diskless is refused whole (retriably), nothing changes; named as
    # pending (classic), the transaction ends without touching the sealed log.
    from storage.coordinator import SealedLogRefused
    from storage.transactions import ONGOING, CompleteRequest, Marker

    await setup_logs(coordinator, (T1, 0), (T1, 1))
    await commit(coordinator, batch())
    assert (await coordinator.seal_log(PartitionKey(T1, 0))).boundary == 1
    init = await coordinator.txn_init("tx", 60_000, -1, -1, NOW)
    assert init.error == NONE
    both = [PartitionKey(T1, 0), PartitionKey(T1, 1)]
    added = await coordinator.txn_add("tx", init.producer_id, init.producer_epoch, both, [], NOW)
    assert added == NONE

    async def complete(markers: list[Marker], pending: list[PartitionKey]) -> int:
        done = await coordinator.txn_complete(CompleteRequest(
            "tx", init.producer_id, init.producer_epoch, True, False, key(), 100, 7,
            markers, NOW, pending=pending,
        ))  # fmt: skip
        return done.error

    with pytest.raises(SealedLogRefused):
        await complete([Marker(T1, 1, 0, 50, NOW), Marker(T1, 0, 50, 50, NOW)], [])
    assert (await info(coordinator)).high_watermark == 1
    assert (await info(coordinator, partition=1)).high_watermark == 0
    [state] = await coordinator.txn_get(["tx"])
    assert state is not None and state.state == ONGOING
    assert await complete([Marker(T1, 1, 0, 50, NOW)], [PartitionKey(T1, 0)]) == NONE
    assert [b.base_offset for b in (await find(coordinator, 0)).batches] == [0]
    assert (await info(coordinator)).high_watermark == 1
    assert (await info(coordinator, partition=1)).high_watermark == 1


async def test_deleting_a_topic_forgets_its_seals(coordinator: BatchCoordinator) -> None:
    await setup_logs(coordinator, (T1, 0))
    await coordinator.seal_log(PartitionKey(T1, 0))
    await coordinator.delete_logs([T1], NOW)
    # The same id again (only tests reuse ids): a fresh, unsealed log.
    await setup_logs(coordinator, (T1, 0))
    assert [r.error for r in await commit(coordinator, batch())] == [NONE]


# --------------------------------------------------------------------------- lost answers


async def test_commit_outcome_recovers_every_answer_of_a_commit_whose_answer_was_lost(
    coordinator: BatchCoordinator,
) -> None:
    """A commit whose answer was lost (the connection died after it was sent) is looked up
    before anything else is committed: the broker must answer the producers what that
    commit decided, or know it never happened and commit it now (see
    broker/logs/diskless/diskless_append.Appender._resolve)."""
    await setup_logs(coordinator, (T1, 0), (T2, 0))
    assert await coordinator.commit_outcome("never-committed", [batch()]) is None
    await commit(coordinator, batch(count=2, pid=PID, epoch=0, seq=0))  # offsets 0-1
    lost = [
        batch(count=1, byte_offset=0),  # appended: offset 2
        batch(count=2, byte_offset=100, pid=PID, epoch=0, seq=0),  # a duplicate of 0-1
        batch(count=1, byte_offset=200, pid=PID, epoch=0, seq=9),  # refused: out of order
        batch(topic=T2, count=3, byte_offset=300, ts_type=LOG_APPEND_TIME),  # T2 offset 0
    ]
    answered = await commit(coordinator, *lost, object_key="lost", now=NOW + 5)
    assert [r.error for r in answered] == [NONE, NONE, OUT_OF_ORDER, NONE]
    recovered = await coordinator.commit_outcome("lost", lost)
    # The refusal's error is not kept: a retriable one the producer retries instead.
    timed_out = CommitResult(int(ErrorCode.request_timed_out), -1, -1, 0)
    assert recovered == [answered[0], answered[1], timed_out, answered[3]]
    assert recovered[3] == CommitResult(NONE, 0, NOW + 5, 0)
