"""bench.commit_latency's request counts and their cost at S3 list prices."""

from __future__ import annotations

import math

import pytest

from bench.commit_latency import Phase, _phase_figures
from bench.storage_ops import MetricsDelta


def test_cost_of_the_put_budget_at_list_price() -> None:
    # 5 PUTs a second: 18,000 an hour at $0.005 per 1,000.
    phase = Phase(10.0, 100.0, 200.0, puts_per_s=5.0, cpu_ms_per_mib=1.0, gets_per_s=0.0)
    assert phase.usd_per_hour == pytest.approx(0.09)
    # 10 MiB/s is 36,000 MiB (35.16 GiB) an hour.
    assert phase.usd_per_gib == pytest.approx(0.09 / (36000 / 1024))


def test_gets_are_priced_apart_from_puts() -> None:
    phase = Phase(1.0, 1.0, 1.0, puts_per_s=0.0, cpu_ms_per_mib=1.0, gets_per_s=100.0)
    assert phase.usd_per_hour == pytest.approx(100 * 3600 * 0.0004 / 1000)


def test_phase_counts_come_from_the_brokers_metrics() -> None:
    before = {
        "sluice_upload_seconds_count": 10.0,
        'sluice_upload_seconds_bucket{le="0.1"}': 10.0,
        'sluice_upload_seconds_bucket{le="+Inf"}': 10.0,
        "sluice_fetch_cache_miss_blocks": 3.0,
    }
    after = {
        "sluice_upload_seconds_count": 60.0,  # 50 uploads (objects) in the phase
        'sluice_upload_seconds_bucket{le="0.1"}': 60.0,
        'sluice_upload_seconds_bucket{le="+Inf"}': 60.0,
        "sluice_fetch_cache_miss_blocks": 23.0,  # 20 blocks loaded: 20 GETs
    }
    phase = _phase_figures(2.0, 50.0, 90.0, 10.0, 1.0, MetricsDelta(before, after))
    assert phase.puts_per_s == 5.0 and phase.gets_per_s == 2.0
    assert phase.upload_p99_ms <= 100.0
    assert math.isnan(phase.commit_p99_ms)  # no commit histogram in the scrape
