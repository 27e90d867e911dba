"""How a recorded session is judged against Kafka, for the one-broker (test_core.py) and
the three-broker (test_cluster.py) recordings alike: its differences field by field, each
classified by known.py (``classifier``), reported when asked (scripts/differential), and
the session failed by any that known.py does not explain."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from pathlib import Path

from .compare import NODE_KEYS, Difference, diff, normalise
from .known import BUGS, CLUSTER_BUGS, Known
from .record import Recordings

Classifier = Callable[[str, str, str, Difference], Known | None]


def differences(
    rec: Recordings, session: str, target: str, nodes: frozenset[str] | set[str] = NODE_KEYS
) -> Iterator[tuple[str, Difference]]:
    """(step label, difference) of ``target``'s answers against Kafka's, in Kafka's step
    order (then steps only ``target`` recorded); ``nodes``: see ``compare.normalise``."""
    steps = rec.get(session, {})
    kafka, sluice = steps.get("kafka", {}), steps.get(target, {})
    for label in [*kafka, *(s for s in sluice if s not in kafka)]:
        for d in diff(
            normalise(kafka.get(label), nodes=nodes), normalise(sluice.get(label), nodes=nodes)
        ):
            yield label, d


def assert_explained(
    rec: Recordings,
    session: str,
    target: str,
    classifier: Classifier,
    nodes: frozenset[str] | set[str] = NODE_KEYS,
) -> None:
    """The session ran to its end on both sides, and known.py explains every difference."""
    errors = {
        side: steps["(session error)"]
        for side, steps in rec[session].items()
        if side in ("kafka", target) and "(session error)" in steps
    }
    # A session that broke off compares nothing after the break, even when both sides broke
    # alike (a bug of the session itself): that is a failure of its own.
    assert not errors, f"session {session} broke off: {errors}"
    found = list(differences(rec, session, target, nodes))
    write_report(session, target, found, classifier)
    unexplained = [
        f"{label} :: {d}" for label, d in found if classifier(session, target, label, d) is None
    ]
    assert not unexplained, (
        f"{len(unexplained)} difference(s) from Apache Kafka not in known.py:\n"
        + "\n".join(unexplained)
    )


def write_report(
    session: str, target: str, found: list[tuple[str, Difference]], classifier: Classifier
) -> None:
    """With SLUICE_TEST_DIFFERENTIAL_REPORT set (scripts/differential does), every difference
    with its classification goes to that file, one per line."""
    path = os.environ.get("SLUICE_TEST_DIFFERENTIAL_REPORT")
    if not path:
        return
    with Path(path).open("a") as out:
        for label, d in found:
            known = classifier(session, target, label, d)
            kind = (
                "UNEXPLAINED"
                if known is None
                else ("BUG" if known in (*BUGS, *CLUSTER_BUGS) else "intended")
            )
            out.write(f"{kind}\t{session}\t{target}\t{label}\t{d}\n")
