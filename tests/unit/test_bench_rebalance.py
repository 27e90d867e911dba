"""bench.rebalance's arithmetic on hand-made logs: when a step settles, when consumption
resumed everywhere, which partitions paused (had no owner) or stalled (a long gap)."""

from __future__ import annotations

import sys
import time
import types

import pytest

from bench.rebalance import (
    Log,
    SteadyProducer,
    Step,
    analyse_step,
    is_settled,
    quiet_gap,
    stall_threshold,
)

P = 4


def consumed_every(log: Log, member_of: dict[int, list[tuple[float, float, int]]]) -> None:
    """Records every 0.1 s on each partition, by the member owning it in each (start, end)."""
    for p, spans in member_of.items():
        offset = 0
        for start, end, member in spans:
            t = start
            while t < end:
                log.consumed[p].append((t, member, offset))
                offset += 1
                t = round(t + 0.1, 6)


def test_is_settled_wants_one_owner_each_live_members_only_and_balance() -> None:
    live = frozenset({1, 2})
    assert is_settled({1: frozenset({0, 1}), 2: frozenset({2, 3})}, live, P)
    assert not is_settled({1: frozenset({0, 1, 2}), 2: frozenset({2, 3})}, live, P)  # twice
    assert not is_settled({1: frozenset({0, 1, 2}), 2: frozenset()}, live, P)  # 3 missing
    assert not is_settled({1: frozenset({0, 1, 2, 3}), 2: frozenset()}, live, P)  # unbalanced
    assert not is_settled({1: frozenset({0, 1}), 3: frozenset({2, 3})}, live, P)  # 3 left


def test_an_eager_join_pauses_every_partition() -> None:
    log = Log(P)
    # Member 1 holds everything; member 2 joins at 10; at 11 member 1 revokes all, at 11.5
    # both get two partitions; they consume from 11.6.
    log.assignments += [
        (0.0, 1, frozenset(range(P))),
        (11.0, 1, frozenset()),
        (11.5, 1, frozenset({0, 1})),
        (11.5, 2, frozenset({2, 3})),
    ]
    consumed_every(
        log,
        {p: [(0.0, 11.0, 1), (11.6, 14.0, 1 if p < 2 else 2)] for p in range(P)},
    )
    r = analyse_step(log, Step(10.0, "join", 2, frozenset({1, 2})), 14.0, stall_s=0.5)
    assert r.settled_s == 1.5
    assert r.consuming_s is not None and abs(r.consuming_s - 1.6) < 1e-9
    assert (r.moved, r.paused, r.stalled) == (2, 4, 4)
    assert abs(r.paused_s - 4 * 0.5) < 1e-9
    assert abs(r.longest_gap_s - 0.7) < 1e-6


def test_an_incremental_join_pauses_only_what_moves() -> None:
    log = Log(P)
    log.assignments += [
        (0.0, 1, frozenset(range(P))),
        (12.0, 1, frozenset({0, 1})),  # revokes 2 and 3 only
        (14.0, 2, frozenset({2, 3})),  # the new member gets them two seconds later
    ]
    consumed_every(log, {0: [(0.0, 20.0, 1)], 1: [(0.0, 20.0, 1)]})
    consumed_every(
        log, {2: [(0.0, 12.0, 1), (14.2, 20.0, 2)], 3: [(0.0, 12.0, 1), (14.2, 20.0, 2)]}
    )
    r = analyse_step(log, Step(10.0, "join", 2, frozenset({1, 2})), 20.0, stall_s=1.0)
    assert r.settled_s == 4.0
    assert r.consuming_s is not None and abs(r.consuming_s - 4.2) < 1e-9
    assert (r.moved, r.paused, r.stalled) == (2, 2, 2)
    assert abs(r.paused_s - 4.0) < 1e-9


def test_a_step_that_never_settles_and_re_reads() -> None:
    log = Log(P)
    # Member 2 left at 10 (its close seen at 10.2); nobody takes 2 and 3.
    log.assignments += [
        (0.0, 1, frozenset({0, 1})),
        (0.0, 2, frozenset({2, 3})),
        (10.2, 2, frozenset()),
    ]
    consumed_every(log, {0: [(0.0, 20.0, 1)], 1: [(0.0, 20.0, 1)], 2: [(0.0, 10.0, 2)]})
    log.consumed[3] += [(5.0, 2, 0), (15.0, 1, 0)]  # offset 0 of partition 3 read twice
    r = analyse_step(log, Step(10.0, "leave", 1, frozenset({1})), 20.0, stall_s=1.0)
    assert r.settled_s is None and r.consuming_s is None
    assert (r.paused, r.stalled, r.reread) == (2, 2, 1)
    assert abs(r.paused_s - 2 * 9.8) < 1e-9


def test_the_quiet_gap_is_the_longest_of_any_partition() -> None:
    log = Log(2)
    consumed_every(log, {0: [(0.0, 20.0, 1)], 1: [(0.0, 10.0, 1), (10.7, 20.0, 1)]})
    assert abs(quiet_gap(log, 1.0, 2.0) - 0.1) < 1e-6
    assert abs(quiet_gap(log, 9.0, 12.0) - 0.8) < 1e-6
    assert abs(quiet_gap(log, 10.0, 10.5) - 0.5) < 1e-6  # silent to the window's end


def test_the_stall_threshold_follows_the_quiet_gaps() -> None:
    assert stall_threshold(0, 0.3) == 1.0
    assert stall_threshold(0, 0.8) == 1.6
    assert stall_threshold(2500, 0.8) == 2.5


class AckingProducer:
    """confluent_kafka.Producer as a broker that acknowledges at once makes it look: every
    poll() serves a delivery report and returns without waiting out its timeout."""

    def __init__(self, _conf: dict[str, object]) -> None:
        self.produced = 0

    def produce(self, *_args: object, **_kwargs: object) -> None:
        self.produced += 1

    def poll(self, _timeout: float) -> int:
        time.sleep(0.0005)  # a delivery report's worth of work, then back
        return 1

    def flush(self, _timeout: float) -> int:
        return 0


def test_the_steady_producer_keeps_its_rate_when_acknowledged_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A classic topic acknowledges within milliseconds, a diskless one after an upload:
    # the producer must write one record per partition per interval on both, or the topic
    # kinds are compared under different loads (issue 30: 14x the rate on classic).
    monkeypatch.setitem(
        sys.modules, "confluent_kafka", types.SimpleNamespace(Producer=AckingProducer)
    )
    producer = SteadyProducer("unused:9092", "t", partitions=10, interval=0.05)
    start = time.perf_counter()
    producer.start()
    time.sleep(0.5)
    producer.stop.set()
    elapsed = time.perf_counter() - start
    producer.join(5)
    assert not producer.is_alive()
    # 10 records each 50 ms while it ran (one round ahead at most, and one more for the
    # clock read after stop was set); the unpaced producer wrote thousands.
    assert 10 <= producer.sent <= 10 * (elapsed / 0.05 + 2)
