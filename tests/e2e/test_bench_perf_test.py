"""bench/perf_test.py keeps reading Kafka's perf tools: a small run of
kafka-producer-perf-test (flat out and paced) and kafka-consumer-perf-test against the shared
``sluice dev``, their summaries parsed into the figures bench.classic prints."""

from __future__ import annotations

import pytest

from bench.perf_test import consumer_perf, producer_perf

pytestmark = pytest.mark.e2e


def test_perf_tools_summaries_are_parsed(broker, topic: str) -> None:  # type: ignore[no-untyped-def]
    flat = producer_perf(broker.bootstrap, topic, 3000, 1024, "all", props={"linger.ms": "5"})
    assert flat["records"] == 3000 and flat["errors"] == 0
    assert flat["mib"] == pytest.approx(3000 * 1024 / 2**20)
    assert flat["mib_s"] > 0 and 0 <= flat["p50_ms"] <= flat["p99_ms"] <= flat["max_ms"]
    paced = producer_perf(broker.bootstrap, topic, 1000, 1024, "1", throughput=1000)
    assert paced["records"] == 1000
    # Paced at 1,000 records/s: the tool holds the rate (it sleeps between sends).
    assert paced["records_s"] <= 1100
    read = consumer_perf(broker.bootstrap, topic, 4000, timeout_s=60)
    assert read["records"] == 4000 and read["fetch_mib_s"] > 0
