"""The Raft simulator over many seeds (see sim.py for what each seed does and checks).

Sizes: ``SLUICE_RAFT_SEEDS`` (default 2000) seeds of a 3-voter cluster, plus an eighth of that
each for 1 and 5 voters; ``SLUICE_RAFT_SEED_START`` (default 0) shifts the range, so a nightly
job can cover new seeds every night, e.g. ``SLUICE_RAFT_SEEDS=100000
SLUICE_RAFT_SEED_START=$(date +%j)00000``. One seed: ``python -m tests.unit.raft.sim N --nodes 3``
replays it (every failure message prints that command).
"""

from __future__ import annotations

import os
import random

import pytest

from controller.raft.core import RaftCore, ReadState, Ready, Role
from controller.raft.messages import NO_NODE, HardState
from tests.unit.raft.sim import SimFailure, SimParams, Simulation, run_seed

SEEDS = int(os.environ.get("SLUICE_RAFT_SEEDS", "2000"))
START = int(os.environ.get("SLUICE_RAFT_SEED_START", "0"))
CHUNK = 250


def chunks(nodes: int, count: int) -> list[tuple[int, int, int]]:
    return [(nodes, s, min(CHUNK, START + count - s)) for s in range(START, START + count, CHUNK)]


CASES = chunks(3, SEEDS) + chunks(1, max(1, SEEDS // 8)) + chunks(5, max(1, SEEDS // 8))


@pytest.mark.parametrize(
    ("nodes", "first", "count"), CASES, ids=[f"{n}voters-{f}+{c}" for n, f, c in CASES]
)
def test_seeds(nodes: int, first: int, count: int) -> None:
    failures = []
    for seed in range(first, first + count):
        try:
            run_seed(seed, nodes)
        except SimFailure as exc:
            failures.append(exc)
    if failures:
        seeds = ", ".join(str(exc).split()[3] for exc in failures)
        pytest.fail(f"{len(failures)} failing seeds ({seeds}); the first:\n{failures[0]}")


# --- the simulator must be able to fail --------------------------------------------------------
# Each mutant reintroduces a classic Raft bug; the profile that provokes it must catch it within
# a bounded number of seeds. (The Figure 8 bug is told exactly in test_core.py: the random
# search rarely builds its six-step story.)


class ForgetsVotes(RaftCore):
    """Answers vote requests without making the vote durable."""

    def ready(self) -> Ready:
        rd = super().ready()
        self._real_hs = rd.hard_state
        if rd.hard_state is not None:
            rd.hard_state = HardState(rd.hard_state.term, NO_NODE, rd.hard_state.commit)
        return rd

    def advance(self, rd: Ready) -> None:
        rd.hard_state = self._real_hs  # only the disk forgets
        super().advance(rd)


class ReadsWithoutQuorum(RaftCore):
    """Answers read-index at once, trusting it is still the leader."""

    def _start_read(self, ctx: object) -> None:
        self._reads_done.append(ReadState(ctx, self.commit))


class ReadsBeforeItsFirstCommit(RaftCore):
    """Answers read-index before committing an entry of its own term."""

    def read_index(self, ctx: object) -> None:
        if self.role == Role.LEADER:
            self._start_read(ctx)
        else:
            super().read_index(ctx)


def first_failing_seed(core_cls: type[RaftCore], profile: str, budget: int) -> int | None:
    for seed in range(budget):
        params = getattr(SimParams, profile)(random.Random(seed), 3)
        try:
            Simulation(seed, params, core_cls).run()
        except SimFailure:
            return seed
    return None


@pytest.mark.parametrize(
    ("mutant", "profile", "budget"),
    [
        (ForgetsVotes, "churn", 300),
        (ReadsWithoutQuorum, "stale_leaders", 600),
        (ReadsBeforeItsFirstCommit, "stale_leaders", 100),
    ],
)
def test_simulator_catches_known_bugs(mutant: type[RaftCore], profile: str, budget: int) -> None:
    assert first_failing_seed(RaftCore, profile, 30) is None
    assert first_failing_seed(mutant, profile, budget) is not None, mutant.__doc__
