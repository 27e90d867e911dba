"""The nemesis in CI: a bounded schedule with a fixed seed against a 3 + 3 node cluster, and
the checker must find nothing (see tests/nemesis/README.md). Each test starts its own cluster
and takes 1.5 to 3 minutes. The cluster's directory (logs, the clients' records) is kept when
the checker found something and its path is in the failure message."""

from __future__ import annotations

import json

import pytest

from .run import run

pytestmark = [
    pytest.mark.e2e,
    pytest.mark.nemesis,
]


def _assert_clean(summary: dict) -> None:  # type: ignore[type-arg]
    assert summary["violations"] == [], (
        "; ".join(summary["violations"]) + "\n" + json.dumps(summary, indent=1, sort_keys=True)
    )
    assert summary["acks_all"]["classic"]["acked"] > 0
    assert summary["acks_all"]["diskless"]["acked"] > 0


def test_followers_paused_then_leader_killed_loses_nothing_acknowledged() -> None:
    """Issue 24 item 1: both followers paused past their fetch wait, so a produce waits on the
    high watermark, times out at the client (request.timeout.ms=1500) and is retried; the
    leader is then killed and the followers resumed. The retry must not have been
    acknowledged before the high watermark passed it: no acks=all record may be lost."""
    summary = run(40, seed=1, schedule_name="retry-above-hw", with_tiered=False)
    _assert_clean(summary)
    assert list(summary["faults"]) == ["stop-followers-kill-leader"]
    assert summary["faults"]["stop-followers-kill-leader"] >= 2


def test_bounded_schedule_of_every_fault_kind() -> None:
    """About two minutes of faults of every kind (processes killed and paused, slow and failing
    storage) under the whole workload, classic, tiered and diskless topics."""
    summary = run(80, seed=24, schedule_name="ci", with_tiered=True)
    _assert_clean(summary)
    assert sum(summary["faults"].values()) >= 5
