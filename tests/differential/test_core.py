"""Apache Kafka as the oracle: the core sessions (sessions.py) against a real Kafka 4.x and
against Sluice (a diskless and a classic broker); every field of every answer compared
(compare.py). A difference fails the suite unless known.py lists it: as INTENDED, with its
reason, or as a BUG, which is an xfail(strict=True) test of its own (it flips when fixed).

`scripts/differential` runs this and prints every difference, the accepted ones included.
"""

from __future__ import annotations

import pytest

from .catalog import KIND_FREE, SESSIONS
from .compare import Difference
from .known import BUGS, INTENDED, Known
from .record import KINDS, Recordings
from .verdict import assert_explained, differences

pytestmark = [pytest.mark.e2e, pytest.mark.differential]


def classify(session: str, target: str, label: str, d: Difference) -> Known | None:
    for known in (*INTENDED, *BUGS):
        if known.matches(session, target, label, d.path):
            return known
    return None


CASES = [
    (session, target)
    for session in SESSIONS
    for target in (["diskless"] if session in KIND_FREE else list(KINDS))
]


@pytest.mark.parametrize(("session", "target"), CASES, ids=[f"{s}-{t}" for s, t in CASES])
def test_no_unexplained_difference(recordings: Recordings, session: str, target: str) -> None:
    if session not in recordings:
        pytest.skip("session not recorded (SLUICE_TEST_DIFFERENTIAL_ONLY)")
    assert_explained(recordings, session, target, classify)


# Defined only while known.py lists Sluice bugs (none is left now): an empty parameter set
# would show as a skipped test.
if BUGS:

    @pytest.mark.parametrize(
        "bug",
        [
            pytest.param(b, id=b.id, marks=pytest.mark.xfail(strict=True, reason=b.reason))
            for b in BUGS
        ],
    )
    def test_known_bug(recordings: Recordings, bug: Known) -> None:
        """Passes (and so, strict, fails the run) once Sluice answers as Kafka does."""
        still = [
            f"[{target}] {label} :: {d}"
            for session, target in CASES
            if session in recordings
            for label, d in differences(recordings, session, target)
            if bug.matches(session, target, label, d.path)
        ]
        if not still and set(recordings) != set(SESSIONS):
            pytest.skip("only some sessions recorded (SLUICE_TEST_DIFFERENTIAL_ONLY)")
        assert not still, f"{bug.reason}\n" + "\n".join(still)


def test_intended_entries_still_match(recordings: Recordings) -> None:
    """An INTENDED entry that matches no difference is stale (the difference went away or the
    entry is mistyped): remove or fix it, so the list stays the reviewed truth."""
    if set(recordings) != set(SESSIONS):
        pytest.skip("only some sessions recorded")
    found = [
        (session, target, label, d)
        for session, target in CASES
        for label, d in differences(recordings, session, target)
    ]
    stale = [
        k.id for k in INTENDED if not any(k.matches(s, t, lb, d.path) for s, t, lb, d in found)
    ]
    assert not stale, "INTENDED entries that match nothing:\n" + "\n".join(stale)
