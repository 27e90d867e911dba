"""bench.coordinator_scale keeps running: a tiny sweep against the tests' PostgreSQL, and its
arithmetic (saturation, the largest cluster, wait kinds)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.coordinator_load import wait_kind
from bench.coordinator_scale import Row, main, max_brokers, saturation
from tests.fixtures.postgres import PostgresServer


def test_tiny_sweep_runs_and_reports(
    postgres_server: PostgresServer, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "runs.json"
    # Small topics (the last one smaller), two sizes of object, two numbers of brokers, two
    # runs (the second in the other order): every path of the sweep in a few seconds.
    code = main(
        [
            "--dsn", postgres_server.admin_dsn,
            "--catalog", "10",
            "--topic-partitions", "7",
            "--partitions-per-object", "1,3",
            "--concurrency", "1,2",
            "--seconds", "0.1",
            "--repeats", "2",
            "--json", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    samples = json.loads(out.read_text())
    # 2 sizes x 2 concurrencies x 2 runs x (commit, find)
    assert len(samples) == 16
    for s in samples:
        assert s["calls"] > 0 and s["per_second"] > 0 and s["refused"] == 0
        assert s["p50_ms"] <= s["p99_ms"]
    commits = [s for s in samples if s["kind"] == "commit" and s["concurrency"] == 2]
    # Both brokers listen, and each commit wakes each of them.
    assert all(s["notifications"] > 0 for s in commits)
    text = capsys.readouterr().out
    assert "| 10 | 3 | 2 |" in text  # the table has every point
    assert "Largest cluster at the PUT budget (5 objects/s per broker" in text


def _row(brokers: int, commits: float) -> Row:
    nan = float("nan")
    return Row(1000, 10, brokers, [commits], nan, nan, [1.0], nan, nan, nan, nan, nan, nan, {})


def test_saturation_is_where_more_brokers_stop_helping() -> None:
    series = [_row(1, 100), _row(4, 300), _row(16, 320), _row(64, 200)]
    assert saturation(series, "commit_rate").brokers == 4
    assert saturation(series[:2], "commit_rate").brokers == 4  # still growing: the last


def test_max_brokers_shares_the_database_between_commits_and_finds() -> None:
    assert max_brokers(500, 1000, 5, 0) == pytest.approx(100)
    # Each broker takes 5/500 of the commit capacity and 10/1000 of the find capacity.
    assert max_brokers(500, 1000, 5, 10) == pytest.approx(50)


def test_wait_kinds() -> None:
    assert wait_kind(None, None) == "cpu"
    assert wait_kind("Lock", "transactionid") == "row locks"
    assert wait_kind("Lock", "object") == "notify lock"
    assert wait_kind("IO", "WALSync") == "wal"
    assert wait_kind("LWLock", "WALWrite") == "wal"
    assert wait_kind("LWLock", "BufferContent") == "LWLock:BufferContent"
