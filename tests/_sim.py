"""Running a randomized simulator over a window of seeds, shared by the simulation tests.

A window is ``<PREFIX>_SEEDS`` seeds (a default per simulator) from ``<PREFIX>_SEED_START``
(default 0), so a nightly job can cover new seeds. It is split into chunks of ``CHUNK`` seeds,
one test each: a failing chunk names its seeds, and the chunks can run in parallel.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import pytest

CHUNK = 500


def seed_chunks(prefix: str, default_seeds: int) -> list[range]:
    """The window's chunks, from ``<prefix>_SEEDS`` and ``<prefix>_SEED_START``."""
    seeds = int(os.environ.get(f"{prefix}_SEEDS", str(default_seeds)))
    start = int(os.environ.get(f"{prefix}_SEED_START", "0"))
    end = start + seeds
    return [range(first, min(first + CHUNK, end)) for first in range(start, end, CHUNK)]


def chunk_id(seeds: range) -> str:
    return f"seeds-{seeds.start}"


def run_seeds(seeds: range, run: Callable[[int], None], failure: type[Exception]) -> None:
    """Runs every seed (one failing does not stop the others), then fails with the count and
    the first failure if any seed raised ``failure``."""
    failures: list[Exception] = []
    for seed in seeds:
        try:
            run(seed)
        except failure as exc:
            failures.append(exc)
    if failures:
        pytest.fail(f"{len(failures)} failing seeds; the first:\n{failures[0]}")
