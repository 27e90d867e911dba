"""The tiering lineage simulator over many seeds (see lineage_sim.py for what it checks).

``SLUICE_TIERING_SEEDS`` (default 2000) seeds; ``SLUICE_TIERING_SEED_START`` moves the
window, so a nightly job can cover new seeds.
"""

from __future__ import annotations

import pytest

from tests._sim import chunk_id, run_seeds, seed_chunks

from .lineage_sim import Sim, SimFailure


@pytest.mark.parametrize("seeds", seed_chunks("SLUICE_TIERING", 2000), ids=chunk_id)
def test_seeds(seeds: range) -> None:
    run_seeds(seeds, lambda seed: Sim(seed).run(), SimFailure)


def test_the_simulation_does_exercise_orphans_crashes_and_unclean_elections() -> None:
    """A simulator that never orphans a segment would pass vacuously."""
    copies = orphans = unclean = crashed = 0
    for seed in range(100):
        sim = Sim(seed)
        sim.run()
        copies += sim.copies
        orphans += sim.orphans_deleted
        unclean += sim.unclean
        crashed += sim.crashed_copies
    assert copies > 1000 and orphans > 50 and unclean > 100 and crashed > 50, (
        copies,
        orphans,
        unclean,
        crashed,
    )
