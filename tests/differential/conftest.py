"""One recording per test session: Apache Kafka and Sluice started once, every scripted
session run against each, the brokers stopped; the tests then only compare."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from .record import Recordings, record_all


@pytest.fixture(scope="session")
def recordings(tmp_path_factory: pytest.TempPathFactory) -> Recordings:
    only = {s for s in os.environ.get("SLUICE_TEST_DIFFERENTIAL_ONLY", "").split(",") if s}
    recorded, _versions = record_all(tmp_path_factory.mktemp("differential"), only or None)
    report = os.environ.get("SLUICE_TEST_DIFFERENTIAL_RECORD")
    if report:
        import json

        Path(report).write_text(json.dumps(recorded, indent=1, default=str))
    return recorded
