"""Shared pytest setup for the whole suite. Keep this small: per-area fixtures live in the
conftest.py of tests/unit and tests/e2e, those several test modules share in tests/fixtures/
(registered below)."""

from __future__ import annotations

import os
import signal
from types import FrameType

import pytest


def _sigterm_as_interrupt(signum: int, frame: FrameType | None) -> None:
    # CI's timeout (and anyone stopping a run) sends SIGTERM. Turning it into Ctrl-C lets pytest
    # run fixture teardown, so the brokers the e2e tests started are stopped instead of
    # orphaned, and still print the summary of what ran.
    raise KeyboardInterrupt(f"signal {signum}")


# SLUICE_* variables of the shell that runs the suite (a developer's SLUICE_DATA_DIR or
# SLUICE_COORDINATOR, say) would override the configs the tests give their brokers and jobs,
# in this process and in every process it starts: the suite must not depend on them. The
# tests' own switches (SLUICE_TEST_*: which PostgreSQL / S3 to use) stay.
_IGNORED_ENV: list[str] = []


def _drop_sluice_environment() -> None:
    for name in sorted(os.environ):
        if name.startswith("SLUICE_") and not name.startswith("SLUICE_TEST_"):
            del os.environ[name]
            _IGNORED_ENV.append(name)


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)
    _drop_sluice_environment()


def pytest_report_header(config: pytest.Config) -> str | None:
    return f"ignored from the environment: {', '.join(_IGNORED_ENV)}" if _IGNORED_ENV else None


# Fixtures more than one test module uses, each beside what it builds in tests/fixtures/ and
# named for it (so none shadows a module's own): real servers for integration tests
# (PostgreSQL, S3), and the unit tests' two classic brokers, group services on a manual
# clock, and tiered storage around one log. A test names the fixture; nothing imports it.
pytest_plugins = [
    "tests.fixtures.postgres",
    "tests.fixtures.s3",
    "tests.fixtures.classic_brokers",
    "tests.fixtures.group_services",
    "tests.fixtures.tiered_env",
]
