"""The tiering lineage simulator over many seeds (see lineage_sim.py for what it checks).

``SLUICE_TIERING_SEEDS`` (default 2000) seeds; ``SLUICE_TIERING_SEED_START`` moves the
window, so a nightly job can cover new seeds.
"""

from __future__ import annotations

import os

import pytest

from .lineage_sim import Sim, SimFailure

SEEDS = int(os.environ.get("SLUICE_TIERING_SEEDS", "2000"))
START = int(os.environ.get("SLUICE_TIERING_SEED_START", "0"))
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
