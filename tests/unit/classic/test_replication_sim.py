"""The replication simulator over many seeds (see replication_sim.py for what each does).

``SLUICE_REPLICATION_SEEDS`` (default 3000) seeds; ``SLUICE_REPLICATION_SEED_START`` moves
the window, so a nightly job can cover new seeds.
"""

from __future__ import annotations

import os

import pytest

from .replication_sim import Sim, SimFailure

SEEDS = int(os.environ.get("SLUICE_REPLICATION_SEEDS", "3000"))
START = int(os.environ.get("SLUICE_REPLICATION_SEED_START", "0"))
CHUNK = 500


@pytest.mark.parametrize("first", range(START, START + SEEDS, CHUNK), ids=lambda s: f"seeds-{s}")
def test_seeds(first: int) -> None:
    failures: list[SimFailure] = []
    for seed in range(first, min(first + CHUNK, START + SEEDS)):
        try:
            Sim(seed).run()
        except SimFailure as exc:
            failures.append(exc)
    if failures:
        pytest.fail(f"{len(failures)} failing seeds; the first:\n{failures[0]}")


def test_the_simulation_does_exercise_elections_truncation_and_refusals() -> None:
    """A simulator that never elects or truncates would pass vacuously."""
    events = ""
    acked = 0
    for seed in range(200):
        sim = Sim(seed)
        sim.run()
        events += "\n".join(sim.trace)
        acked += len(sim.acked)
    assert "leads epoch" in events
    assert "truncates" in events
    assert "NOT_ENOUGH_REPLICAS" in events
    assert "isr -" in events
    assert acked > 1000
