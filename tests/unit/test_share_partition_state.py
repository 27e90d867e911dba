"""The share-partition state machine (KIP-932): acquisition, locks running out, delivery
count limit and archiving, accept / release / reject / renew, the start offset moving."""

from __future__ import annotations

import json

import pytest

from broker.groups.share.partition_state import (
    ACK_ACCEPT,
    ACK_GAP,
    ACK_REJECT,
    ACK_RELEASE,
    ACK_RENEW,
    ACKNOWLEDGED,
    ACQUIRED,
    ARCHIVED,
    AVAILABLE,
    Acquired,
    InvalidRecordState,
    Limits,
    LogBatch,
    SharePartitionState,
)

LIMITS = Limits(lock_ms=1000, delivery_count_limit=3, max_window=100)
T0 = 1_000_000


def batches(*ranges: tuple[int, int]) -> list[LogBatch]:
    return [LogBatch(a, b, True) for a, b in ranges]


def state_of(s: SharePartitionState, offset: int) -> int:
    return s.records[offset].state


def test_acquire_takes_whole_batches_until_max_records() -> None:
    s = SharePartitionState(0, 0)
    got, sent = s.acquire("m1", batches((0, 2), (3, 5), (6, 8)), 4, T0, LIMITS)
    # 4 records asked: the second batch is taken whole (batch-optimized), the third not.
    assert got == [Acquired(0, 5, 1)]
    assert sent == [0, 1]
    assert s.next == 6 and s.start == 0
    assert all(state_of(s, o) == ACQUIRED and s.records[o].owner == "m1" for o in range(6))


def test_record_limit_mode_stops_inside_a_batch() -> None:
    s = SharePartitionState(0, 0)
    got, sent = s.acquire("m1", batches((0, 2), (3, 5)), 4, T0, LIMITS, record_limit=True)
    assert got == [Acquired(0, 3, 1)] and sent == [0, 1]
    assert s.next == 4  # 4 and 5 were never acquired: the next fetch starts there
    got, _ = s.acquire("m2", batches((3, 5)), 10, T0, LIMITS)
    assert got == [Acquired(4, 5, 1)]


def test_acquired_records_are_not_acquired_again() -> None:
    s = SharePartitionState(0, 0)
    s.acquire("m1", batches((0, 4)), 10, T0, LIMITS)
    got, sent = s.acquire("m2", batches((0, 4), (5, 6)), 10, T0 + 10, LIMITS)
    assert got == [Acquired(5, 6, 1)] and sent == [1]


def test_accept_moves_the_start_offset_past_done_records() -> None:
    s = SharePartitionState(0, 0)
    s.acquire("m1", batches((0, 4)), 10, T0, LIMITS)
    s.acknowledge("m1", 1, 2, [ACK_ACCEPT], T0, LIMITS)
    assert s.start == 0  # 0 is still in flight
    s.acknowledge("m1", 0, 0, [ACK_REJECT], T0, LIMITS)
    assert s.start == 3  # 0 archived, 1-2 acknowledged
    assert 0 not in s.records and state_of(s, 3) == ACQUIRED
    s.acknowledge("m1", 3, 4, [ACK_ACCEPT, ACK_ACCEPT], T0, LIMITS)
    assert s.start == s.next == 5 and not s.records


def test_release_makes_a_record_available_with_its_delivery_count() -> None:
    s = SharePartitionState(0, 0)
    s.acquire("m1", batches((0, 1)), 10, T0, LIMITS)
    s.acknowledge("m1", 0, 1, [ACK_RELEASE, ACK_ACCEPT], T0, LIMITS)
    assert state_of(s, 0) == AVAILABLE and s.start == 0
    assert s.fetch_offset(T0, LIMITS) == 0  # read again from the released record
    got, _ = s.acquire("m2", batches((0, 1)), 10, T0, LIMITS)
    assert got == [Acquired(0, 0, 2)]
    assert s.records[0].owner == "m2"


def test_a_lock_running_out_gives_the_record_back() -> None:
    s = SharePartitionState(0, 0)
    s.acquire("m1", batches((0, 1)), 10, T0, LIMITS)
    assert s.fetch_offset(T0 + 999, LIMITS) == 2
    assert s.fetch_offset(T0 + 1000, LIMITS) == 0
    got, _ = s.acquire("m2", batches((0, 1)), 10, T0 + 1000, LIMITS)
    assert got == [Acquired(0, 1, 2)]
    # The first member's acknowledgement comes too late: it no longer holds them.
    with pytest.raises(InvalidRecordState):
        s.acknowledge("m1", 0, 1, [ACK_ACCEPT], T0 + 1001, LIMITS)


def test_renew_extends_the_lock() -> None:
    s = SharePartitionState(0, 0)
    s.acquire("m1", batches((0, 0)), 10, T0, LIMITS)
    s.acknowledge("m1", 0, 0, [ACK_RENEW], T0 + 900, LIMITS)
    s.expire_locks(T0 + 1500, LIMITS)
    assert state_of(s, 0) == ACQUIRED
    s.expire_locks(T0 + 1900, LIMITS)
    assert state_of(s, 0) == AVAILABLE


def test_the_delivery_count_limit_archives_the_record() -> None:
    s = SharePartitionState(0, 0)
    now = T0
    for delivery in range(1, LIMITS.delivery_count_limit + 1):
        got, _ = s.acquire("m1", batches((0, 0), (1, 1)), 1, now, LIMITS)
        assert got == [Acquired(0, 0, delivery)]
        now += LIMITS.lock_ms  # never acknowledged: the lock runs out
    s.expire_locks(now, LIMITS)
    # Delivered as often as allowed: archived, and the start offset moves past it.
    assert s.start == 1 and 0 not in s.records
    got, _ = s.acquire("m1", batches((0, 0), (1, 1)), 1, now, LIMITS)
    assert got == [Acquired(1, 1, 1)]


def test_release_at_the_delivery_limit_archives() -> None:
    s = SharePartitionState(0, 0)
    for _ in range(LIMITS.delivery_count_limit):
        s.acquire("m1", batches((0, 0)), 1, T0, LIMITS)
        if s.records:
            s.acknowledge("m1", 0, 0, [ACK_RELEASE], T0, LIMITS)
    assert s.start == 1 and not s.records


def test_acknowledging_what_another_member_holds_changes_nothing() -> None:
    s = SharePartitionState(0, 0)
    s.acquire("m1", batches((0, 2)), 10, T0, LIMITS)
    before = s.to_json()
    for member, first, last in (("m2", 0, 2), ("m2", 1, 1), ("m1", 2, 3), ("m1", -1, 0)):
        with pytest.raises(InvalidRecordState):
            s.acknowledge(member, first, last, [ACK_ACCEPT], T0, LIMITS)
    with pytest.raises(InvalidRecordState):  # one type per offset, but too few
        s.acknowledge("m1", 0, 2, [ACK_ACCEPT, ACK_ACCEPT], T0, LIMITS)
    assert s.to_json() == before


def test_control_and_aborted_batches_and_gaps_are_archived() -> None:
    s = SharePartitionState(0, 0)
    got, sent = s.acquire(
        "m1",
        [LogBatch(0, 1, False), LogBatch(2, 3, True), LogBatch(6, 6, True)],
        10,
        T0,
        LIMITS,
    )
    assert got == [Acquired(2, 3, 1), Acquired(6, 6, 1)]
    assert sent == [1, 2]
    assert s.start == 2  # 0-1 never delivered
    assert state_of(s, 4) == ARCHIVED and state_of(s, 5) == ARCHIVED  # not in the log
    s.acknowledge("m1", 4, 5, [ACK_GAP], T0, LIMITS)  # a client may name gaps
    s.acknowledge("m1", 2, 3, [ACK_ACCEPT], T0, LIMITS)
    assert s.start == 6


def test_the_window_stops_new_acquisitions_when_full() -> None:
    limits = Limits(lock_ms=1000, delivery_count_limit=3, max_window=4)
    s = SharePartitionState(0, 0)
    got, _ = s.acquire("m1", batches((0, 1), (2, 3), (4, 5)), 100, T0, limits)
    assert got == [Acquired(0, 3, 1)]
    assert s.fetch_offset(T0, limits) is None
    s.acknowledge("m1", 0, 1, [ACK_ACCEPT], T0, limits)
    assert s.fetch_offset(T0, limits) == 4


def test_release_member_gives_back_only_its_records() -> None:
    s = SharePartitionState(0, 0)
    s.acquire("m1", batches((0, 1)), 10, T0, LIMITS)
    s.acquire("m2", batches((2, 3)), 10, T0, LIMITS)
    assert s.release_member("m1", LIMITS)
    assert [state_of(s, o) for o in range(4)] == [AVAILABLE, AVAILABLE, ACQUIRED, ACQUIRED]
    assert not s.release_member("m1", LIMITS)


def test_move_start_drops_records_the_log_lost() -> None:
    s = SharePartitionState(0, 0)
    s.acquire("m1", batches((0, 3)), 10, T0, LIMITS)
    s.move_start(2)
    assert s.start == 2 and sorted(s.records) == [2, 3]
    s.move_start(10)
    assert s.start == s.next == 10 and not s.records


def test_json_round_trip_keeps_every_record() -> None:
    s = SharePartitionState(5, 5)
    s.acquire("m1", batches((5, 9)), 10, T0, LIMITS)
    s.acknowledge("m1", 6, 6, [ACK_ACCEPT], T0, LIMITS)
    s.acknowledge("m1", 8, 8, [ACK_RELEASE], T0, LIMITS)
    again = SharePartitionState.from_json(s.to_json())
    assert again == s
    assert state_of(again, 6) == ACKNOWLEDGED
    assert len(json.loads(s.to_json())["runs"]) == 5  # 5 to 9 each differ from the next
