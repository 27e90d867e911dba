"""bench.fetch_sessions keeps running: a tiny run against ``sluice dev`` (no Kafka), classic
and diskless, both patterns and both modes, and what a session must save on the wire."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.fetch_sessions import main, next_offset, one_record

pytestmark = pytest.mark.e2e


def test_tiny_run_reports_every_phase_and_the_session_saves_bytes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "medians.json"
    code = main(
        [
            "--no-kafka", "--partitions", "20", "--fetches", "3", "--changed", "2",
            "--repeats", "1", "--json", str(out),
        ]
    )  # fmt: skip
    assert code == 0
    rows = {(r["target"], r["pattern"], r["mode"]): r for r in json.loads(out.read_text())}
    assert len(rows) == 2 * 2 * 2
    for target in ("classic", "diskless"):
        for pattern in ("idle", "busy"):
            full, session = rows[(target, pattern, "full")], rows[(target, pattern, "session")]
            # A full fetch names and answers every partition; an incremental one only what moved.
            assert full["partitions_answered"] == 20
            expected = 0 if pattern == "idle" else 2
            assert session["partitions_answered"] == expected
            assert session["request_bytes"] < full["request_bytes"]
            assert session["response_bytes"] < full["response_bytes"]
    assert "session / full" in capsys.readouterr().out


def test_next_offset_is_past_the_last_whole_batch() -> None:
    batch = one_record()
    assert next_offset(None, 7) == 7
    assert next_offset(batch, 0) == 1  # base offset 0, one record
    assert next_offset(batch + batch[:30], 0) == 1  # a partial tail is not counted
