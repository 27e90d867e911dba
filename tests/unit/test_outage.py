"""broker.outage: a periodic task logs a dependency's outage once when it starts (WARNING,
no traceback) and once when it ends (INFO); a bug keeps its traceback every time."""

from __future__ import annotations

import asyncio
import logging

import pytest

from storage.coordinator import CoordinatorUnavailable
from storage.objects import ObjectStoreError
from storage.outage import OutageLog

LOG = logging.getLogger("tests.outage")


def rounds(outage: OutageLog, *failures: Exception | None) -> None:
    for failure in failures:
        with outage:
            if failure is not None:
                raise failure


def test_an_outage_is_one_warning_then_one_info(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, LOG.name)
    outage = OutageLog("deleting files", LOG)
    down = CoordinatorUnavailable("PostgreSQL unavailable: connection refused")
    rounds(outage, None, down, down, ObjectStoreError("S3 503"), TimeoutError(), None, None)
    got = [(r.levelname, r.getMessage(), r.exc_info) for r in caplog.records]
    assert [(level, exc_info) for level, _, exc_info in got] == [
        ("WARNING", None),
        ("INFO", None),
    ]
    assert got[0][1].startswith("deleting files: a dependency is unavailable")
    assert "PostgreSQL unavailable" in got[0][1]
    assert got[1][1].startswith("deleting files works again after")
    assert "(4 failed rounds)" in got[1][1]
    assert not outage.ongoing


def test_a_bug_keeps_its_traceback_every_round(caplog: pytest.LogCaptureFixture) -> None:
    outage = OutageLog("expiring offsets", LOG)
    rounds(outage, KeyError("x"), KeyError("x"))
    assert [r.levelname for r in caplog.records] == ["ERROR", "ERROR"]
    assert all(r.exc_info is not None for r in caplog.records)


def test_cancellation_passes_through() -> None:
    outage = OutageLog("t", LOG)
    with pytest.raises(asyncio.CancelledError), outage:
        raise asyncio.CancelledError


def test_a_late_failure_of_a_round_begun_before_one_that_worked_starts_no_outage(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Requests in flight together (S3 requests, fetches): one stuck in a ten-second timeout
    fails after others, begun later, worked. That is the outage that just ended, not a new
    one: the log must not flap "unavailable" / "works again" once per such request."""
    caplog.set_level(logging.INFO, LOG.name)
    outage = OutageLog("object store requests", LOG)
    down = ObjectStoreError("S3 get: timed out after 10.0 s")
    outage.failed(down, started=1.0)  # the outage starts: WARNING
    outage.succeeded(started=5.0)  # over: INFO
    for stuck in (2.0, 3.0, 4.5):  # begun during the outage, failing only now
        outage.failed(down, started=stuck)
    outage.succeeded(started=6.0)
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO"]
    assert not outage.ongoing
    outage.failed(down, started=7.0)  # begun after the last success: a new outage
    assert [r.levelname for r in caplog.records] == ["WARNING", "INFO", "WARNING"]
