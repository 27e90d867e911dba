"""The WARNING line per connection closed for a bad request is rate-limited, not dropped
silently: a client breaking connections in a loop must not be able to fill the disk."""

from __future__ import annotations

import logging

import pytest

from broker.server.connection import CloseLog


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
