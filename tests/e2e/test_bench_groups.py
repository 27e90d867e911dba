"""bench.rebalance and bench.share_groups keep running: a tiny run of each against one
`sluice dev` broker (``--bootstrap``), KIP-848 with a short heartbeat so that its steps take
well under a second, and a share group and a consumer group draining a few hundred records."""

from __future__ import annotations

import pytest

from bench import rebalance, share_groups

from .conftest import BrokerFactory

pytestmark = pytest.mark.e2e


def test_a_tiny_rebalance_and_share_run(
    broker_factory: BrokerFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    broker = broker_factory(
        **{
            "group.consumer.heartbeat.interval.ms": "300",
            "group.consumer.session.timeout.ms": "3000",
            "group.min.session.timeout.ms": "1000",
        }
    )
    assert (
        rebalance.main(
            [
                "--bootstrap", broker.bootstrap,
                "--systems", "diskless",
                "--protocols", "consumer",
                "--members", "2",
                "--partitions", "4",
                "--repeats", "1",
                "--quiet", "0.2",
                "--jitter", "0",
                "--step-timeout", "20",
            ]
        )
        == 0
    )  # fmt: skip
    out = capsys.readouterr().out
    rows = [ln.split() for ln in out.splitlines() if ln.startswith("  diskless consumer ")]
    # One join and one leave step, both settled, every partition consumed again.
    assert [r[2] for r in rows[:2]] == ["join", "leave"], out
    assert all(r[3] != "never" and r[4] != "never" for r in rows[:2]), out
    assert "!" not in out
    assert (
        share_groups.main(
            [
                "--bootstrap", broker.bootstrap,
                "--systems", "diskless",
                "--records", "300",
                "--partitions", "2",
                "--consumers", "1",
                "--repeats", "1",
                "--budget", "60",
            ]
        )
        == 0
    )  # fmt: skip
    out = capsys.readouterr().out
    phases = [ln for ln in out.splitlines() if ln.startswith("  run 1 diskless")]
    assert len(phases) == 2, out
    # Every record delivered once, none twice, none missing.
    assert all("0 redelivered, 0 twice, 0 missing" in ln for ln in phases), out
