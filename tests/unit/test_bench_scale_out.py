"""bench.scale_out's bookkeeping: alternating layouts and paired speed-ups."""

from __future__ import annotations

import math
import os

from bench.scale_out import Run, order, paired_speedups


def _run(brokers: int, mib_s: float) -> Run:
    return Run(
        brokers=brokers,
        mib=100.0,
        seconds=100.0 / mib_s,
        mib_s=mib_s,
        broker_cpu_ms=4.0,
        broker_cores=[0.3] * brokers,
        cpu_split={"brokers": 4.0, "store": 10.0, "coordinator": 1.0, "clients": 5.0},
        machine_busy=0.9,
        background_busy=0.05,
        background_ours=0.01,
        shares=[1 / brokers] * brokers,
        puts_per_s=[5.0] * brokers,
        object_mib=8.0,
        in_flight=2.0,
        raw_mib_s=200.0,
        raw_concurrency=2.0,
        truncated=False,
        errors=[],
    )


def test_layouts_alternate_so_drift_hits_both() -> None:
    assert order([1, 2], 3) == [1, 2, 2, 1, 1, 2]
    assert order([1, 2, 4], 2) == [1, 2, 4, 4, 2, 1]


def test_speed_up_pairs_the_ith_run_of_each_layout() -> None:
    rs = [_run(1, 100), _run(2, 150), _run(2, 90), _run(1, 60), _run(1, 80), _run(2, 160)]
    assert paired_speedups(rs, 1, 2) == [1.5, 1.5, 2.0]


def test_ceilings_follow_the_cpu_per_mib() -> None:
    r = _run(2, 50)
    # 20 ms of CPU per MiB over all processes: each core carries 50 MiB/s.
    assert math.isclose(r.cpu_ceiling_mib_s * 20 / 1000, float(os.cpu_count() or 1))
    # 4 ms per MiB in the brokers, one core each: 2 x 250 MiB/s.
    assert math.isclose(r.brokers_ceiling_mib_s, 500.0)
    assert math.isclose(r.of_raw, 0.25)
