"""The protocol fuzzer, bounded for CI: 50,000 mutated client frames against `sluice dev`.

Deterministic: the corpus is committed and the mutation seed fixed, so a failure here
replays with `scripts/fuzz --frames 50000 --seed 12`. Longer runs: scripts/fuzz.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from broker.server.api_table import VERSIONS

from .fuzzer import (
    SYNC_BASE,
    Mutator,
    Target,
    fuzz,
    load_corpus,
)

pytestmark = pytest.mark.e2e

CI_FRAMES = 50_000
CI_SEED = 12


@pytest.fixture
def target(tmp_path: Path) -> Iterator[Target]:
    t = Target(tmp_path)
    t.start()
    try:
        yield t
    finally:
        t.stop()


def test_corpus_covers_every_stock_client_and_the_hot_apis() -> None:
    names = [p.name for p in (Path(__file__).parent / "corpus").glob("*.bin")]
    for client in ("confluent", "kafka-python", "aiokafka", "kcat"):
        assert any(n.startswith(client + "-") for n in names), client
    for api in ("k00", "k01", "k03", "k08", "k11"):  # produce, fetch, metadata, commit, join
        assert any(f"-{api}-" in n for n in names), api


def test_corpus_has_seeds_for_every_api_the_broker_serves() -> None:
    """A hostile client can send any API the broker answers; one with no seed frame is
    only reached by rewriting another API's key, whose body never parses far. An API added
    to the API table (broker/server/api_table.py) needs a capture workload step
    (tests/fuzz/capture.py) and new seeds."""
    keys = {
        int(p.name.split("-k")[1][:2]) for p in (Path(__file__).parent / "corpus").glob("*.bin")
    }
    missing = {name: key for key, name, _lo, _hi in VERSIONS if key not in keys}
    assert not missing, f"no seed frames for {missing}: run python -m tests.fuzz.capture"


def test_mutations_are_deterministic_and_keep_correlation_ids_clear_of_syncs() -> None:
    corpus = load_corpus()
    first, second = Mutator(corpus, 5), Mutator(corpus, 5)
    a = [first.frame() for _ in range(500)]
    assert a == [second.frame() for _ in range(500)]
    assert sum(f in corpus for f in a) < 50  # nearly all mutated
    assert all(int.from_bytes(f[4:8], "big") < SYNC_BASE for f in a if len(f) >= 8)


def test_fuzzed_broker_stays_up_bounded_and_quiet(target: Target) -> None:
    stats = fuzz(target, CI_SEED, frames=CI_FRAMES, round_frames=CI_FRAMES // 4)
    # fuzz() raises on a dead broker, a failed stock-client round trip after any round,
    # peak RSS over the bound, or a traceback or ERROR line in the log; these say the run
    # was a real one.
    assert stats.frames >= CI_FRAMES
    assert stats.rounds == 4
    assert stats.closed > CI_FRAMES // 10, "mutations too tame: hardly any frame was refused"
    assert stats.closed < stats.frames, "no mutated frame was ever answered"
    assert target.process.alive()
