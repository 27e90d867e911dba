"""The WARNING line per connection closed for a bad request is rate-limited, not dropped
silently: a client breaking connections in a loop must not be able to fill the disk; a
produce answered late is logged with where it waited."""

from __future__ import annotations

import logging
import time

import pytest

from broker.server.connection import CloseLog
from broker.server.slow_requests import note_slow_produce
from protocol.codec import RequestHeader


def test_lines_past_the_rate_are_counted_and_reported_in_the_next(
    caplog: pytest.LogCaptureFixture,
) -> None:
    now = [100.0]
    close_log = CloseLog(per_second=2, clock=lambda: now[0])
    with caplog.at_level(logging.WARNING, logger="broker.server.connection"):
        for port in range(5):
            close_log.closing(("10.0.0.1", port), "invalid MetadataRequest v13: too long")
        assert [r.getMessage() for r in caplog.records] == [
            "closing connection from 10.0.0.1:0: invalid MetadataRequest v13: too long",
            "closing connection from 10.0.0.1:1: invalid MetadataRequest v13: too long",
        ]
        assert close_log.unlogged == 3
        now[0] += 1.0
        close_log.closing(("10.0.0.2", 9), "request header truncated (3 bytes)")
    assert caplog.records[-1].getMessage() == (
        "closing connection from 10.0.0.2:9: request header truncated (3 bytes)"
        " (3 more since, not logged)"
    )
    assert close_log.unlogged == 0
    assert all("\n" not in r.getMessage() and r.exc_info is None for r in caplog.records)


def test_a_produce_answered_late_is_logged_with_where_it_waited(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A stalled produce (the long nemesis run saw 44 s with nothing logged) says how long
    it waited behind the connection's earlier requests and how long from its handler on."""
    header = RequestHeader(0, 9, 77, "producer-1")
    now = time.perf_counter()
    with caplog.at_level(logging.WARNING, logger="broker.server.slow_requests"):
        note_slow_produce(header, now - 2.0, now - 1.0, ("10.0.0.1", 5))
        note_slow_produce(header, now - 15.0, now - 3.0, ("10.0.0.1", 5))
    [line] = [r.getMessage() for r in caplog.records]
    assert line.startswith(
        "Produce from 10.0.0.1:5 (client 'producer-1', correlation id 77) answered after 15."
    )
    assert "12.0 s queued behind the connection's earlier requests, 3.0 s from its handler" in line
