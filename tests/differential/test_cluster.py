"""Apache Kafka as the oracle, three brokers a side (cluster.py, sessions_cluster.py): a KRaft
Kafka of three nodes against a Sluice cluster of three brokers, its topics classic and
diskless. Every field compared as in test_core.py, node ids as they are (both sides number
their brokers 1, 2, 3); a difference fails unless known.py lists it (CLUSTER_INTENDED, or the
entries every session shares, or CLUSTER_BUGS).

CI records the core set; SLUICE_TEST_DIFFERENTIAL_CLUSTER=all records every session, =off
none (conftest.py).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .cluster import CLUSTER_KINDS
from .compare import CLUSTER_NODE_KEYS, Difference
from .known import CLUSTER_BUGS, CLUSTER_INTENDED, INTENDED, Known
from .record import Recordings
from .sessions_cluster import CLUSTER_SESSIONS
from .verdict import assert_explained
from .verdict import differences as _differences

pytestmark = [pytest.mark.e2e, pytest.mark.differential]

# The entries of known.py every session shares (error text, Sluice-only configs...).
SHARED = [k for k in INTENDED if k.session == "*"]


def differences(rec: Recordings, session: str, target: str) -> Iterator[tuple[str, Difference]]:
    # Node ids as they are: both sides number their brokers 1, 2, 3.
    return _differences(rec, session, target, CLUSTER_NODE_KEYS)


def classify(session: str, target: str, label: str, d: Difference) -> Known | None:
    for known in (*SHARED, *CLUSTER_INTENDED, *CLUSTER_BUGS):
        if known.matches(session, target, label, d.path):
            return known
    return None


CASES = [(session, target) for session in CLUSTER_SESSIONS for target in CLUSTER_KINDS]


@pytest.mark.parametrize(("session", "target"), CASES, ids=[f"{s}-{t}" for s, t in CASES])
def test_no_unexplained_difference(
    cluster_recordings: Recordings, session: str, target: str
) -> None:
    if session not in cluster_recordings:
        pytest.skip("session not recorded (SLUICE_TEST_DIFFERENTIAL_CLUSTER=all records it)")
    assert_explained(cluster_recordings, session, target, classify, CLUSTER_NODE_KEYS)


if CLUSTER_BUGS:

    @pytest.mark.parametrize(
        "bug",
        [
            pytest.param(b, id=b.id, marks=pytest.mark.xfail(strict=True, reason=b.reason))
            for b in CLUSTER_BUGS
        ],
    )
    def test_known_bug(cluster_recordings: Recordings, bug: Known) -> None:
        """Passes (and so, strict, fails the run) once Sluice answers as Kafka does."""
        recorded = [(s, t) for s, t in CASES if s in cluster_recordings]
        if not any(bug.matches(s, t, bug.step, bug.path) for s, t in recorded):
            pytest.skip("its session was not recorded")
        still = [
            f"[{target}] {label} :: {d}"
            for session, target in recorded
            for label, d in differences(cluster_recordings, session, target)
            if bug.matches(session, target, label, d.path)
        ]
        assert not still, f"{bug.reason}\n" + "\n".join(still)


def test_intended_entries_still_match(cluster_recordings: Recordings) -> None:
    """A CLUSTER_INTENDED entry that matches no difference is stale: remove or fix it."""
    if set(cluster_recordings) != set(CLUSTER_SESSIONS):
        pytest.skip("not every cluster session recorded (SLUICE_TEST_DIFFERENTIAL_CLUSTER=all)")
    found = [
        (session, target, label, d)
        for session, target in CASES
        for label, d in differences(cluster_recordings, session, target)
    ]
    stale = [
        k.id
        for k in CLUSTER_INTENDED
        if not k.sometimes and not any(k.matches(s, t, lb, d.path) for s, t, lb, d in found)
    ]
    assert not stale, "CLUSTER_INTENDED entries that match nothing:\n" + "\n".join(stale)
