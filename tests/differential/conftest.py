"""One recording per test session: Apache Kafka and Sluice started once, every scripted
session run against each, the brokers stopped; the tests then only compare."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from .record import Recordings, record_all, record_cluster


def _only() -> set[str] | None:
    only = {s for s in os.environ.get("SLUICE_TEST_DIFFERENTIAL_ONLY", "").split(",") if s}
    return only or None


def _keep(recorded: Recordings, suffix: str = "") -> None:
    report = os.environ.get("SLUICE_TEST_DIFFERENTIAL_RECORD")
    if report:
        Path(report + suffix).write_text(json.dumps(recorded, indent=1, default=str))


@pytest.fixture(scope="session")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    recorded, _versions = record_all(tmp_path_factory.mktemp("differential"), _only())
    _keep(recorded)
    return recorded


def cluster_selection() -> set[str] | None:
    """The three-broker sessions to record: SLUICE_TEST_DIFFERENTIAL_ONLY's if it names any,
    else SLUICE_TEST_DIFFERENTIAL_CLUSTER's choice: ``core`` (the default, what CI runs),
    ``all``, or ``off``. None means all."""
    from .sessions_cluster import CLUSTER_CORE, CLUSTER_SESSIONS

    only = _only()
    if only is not None:
        return only & set(CLUSTER_SESSIONS)
    choice = os.environ.get("SLUICE_TEST_DIFFERENTIAL_CLUSTER", "core")
    if choice == "off":
        return set()
    if choice == "all":
        return None
    return set(CLUSTER_CORE)


@pytest.fixture(scope="session")
def cluster_recordings(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    selected = cluster_selection()
    if selected is not None and not selected:
        return {}
    recorded = record_cluster(tmp_path_factory.mktemp("differential-cluster"), selected)
    _keep(recorded, ".cluster")
    return recorded
