"""Shared pytest setup for the whole suite. Keep this small: per-area fixtures live in the
conftest.py of tests/unit and tests/e2e."""

from __future__ import annotations

import signal
from types import FrameType

import pytest


def _sigterm_as_interrupt(signum: int, frame: FrameType | None) -> None:
    # CI's timeout (and anyone stopping a run) sends SIGTERM. Turning it into Ctrl-C lets pytest
    # run fixture teardown, so the brokers the e2e tests started are stopped instead of
    # orphaned, and still print the summary of what ran.
    raise KeyboardInterrupt(f"signal {signum}")


def pytest_configure(config: pytest.Config) -> None:
    signal.signal(signal.SIGTERM, _sigterm_as_interrupt)


# Real servers for integration tests (PostgreSQL, S3), shared by every test directory.
pytest_plugins = ["tests.fixtures.postgres", "tests.fixtures.s3"]
