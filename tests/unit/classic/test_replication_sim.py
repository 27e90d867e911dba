"""The replication simulator over many seeds (see replication_sim.py for what each does).

``SLUICE_REPLICATION_SEEDS`` (default 3000) seeds; ``SLUICE_REPLICATION_SEED_START`` moves
the window, so a nightly job can cover new seeds.
"""

from __future__ import annotations

import pytest

from tests._sim import chunk_id, run_seeds, seed_chunks

from .replication_sim import Sim, SimFailure


@pytest.mark.parametrize("seeds", seed_chunks("SLUICE_REPLICATION", 3000), ids=chunk_id)
def test_seeds(seeds: range) -> None:
    run_seeds(seeds, lambda seed: Sim(seed).run(), SimFailure)


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
