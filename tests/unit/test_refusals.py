"""The refusal log: one INFO line per client and reason, bounded memory."""

from __future__ import annotations

import logging

import pytest
from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from broker.server.refusals import RefusalLog
from protocol.build import build


def _lines(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.name == "sluice.refused"]


def test_each_client_and_reason_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sluice.refused")
    refusals = RefusalLog()
    for _ in range(3):
        refusals.note("app", "10.0.0.1", 5000, "CreateTopics", 40, "bad value")
    refusals.note("app", "10.0.0.1", 5001, "CreateTopics", 40, "other value")
    refusals.note("other", "10.0.0.2", 5000, "CreateTopics", 40, "bad value")
    lines = _lines(caplog)
    assert lines == [
        "refused CreateTopics from client 'app' at 10.0.0.1:5000: INVALID_CONFIG (bad value)",
        "refused CreateTopics from client 'app' at 10.0.0.1:5001: INVALID_CONFIG (other value)",
        "refused CreateTopics from client 'other' at 10.0.0.2:5000: INVALID_CONFIG (bad value)",
    ]


def test_protocol_flow_codes_are_not_refusals(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sluice.refused")
    refusals = RefusalLog()
    refusals.note("c", "h", 1, "JoinGroup", int(ErrorCode.member_id_required), "")
    refusals.note("c", "h", 1, "Heartbeat", int(ErrorCode.rebalance_in_progress), "")
    assert _lines(caplog) == []


def test_memory_is_bounded(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sluice.refused")
    refusals = RefusalLog(max_remembered=10, lines_per_s=1000)
    for n in range(100):
        refusals.note(f"client-{n}", "h", 1, "InitProducerId", 35, "")
    assert len(refusals._seen) == 10
    # The oldest were forgotten, so they are logged again; the newest are not.
    refusals.note("client-0", "h", 1, "InitProducerId", 35, "")
    refusals.note("client-99", "h", 1, "InitProducerId", 35, "")
    assert len(_lines(caplog)) == 101


def test_errors_are_found_at_any_depth(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sluice.refused")
    response = build(
        load_response_schema(19, 5),  # CreateTopics v5: errors per topic
        {
            "throttle_time": 0,
            "topics": [
                {
                    "name": "ok",
                    "topic_id": None,
                    "error_code": 0,
                    "error_message": None,
                    "num_partitions": 1,
                    "replication_factor": 1,
                    "configs": [],
                },
                {
                    "name": "bad",
                    "topic_id": None,
                    "error_code": int(ErrorCode.invalid_config),
                    "error_message": "Invalid value x for cleanup.policy",
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "configs": None,
                },
            ],
        },
    )
    RefusalLog().note_response("admin", "127.0.0.1", 4000, "CreateTopics", response)
    assert _lines(caplog) == [
        "refused CreateTopics from client 'admin' at 127.0.0.1:4000: INVALID_CONFIG "
        "(Invalid value x for cleanup.policy)"
    ]


def test_a_coarser_reason_folds_messages_with_per_request_figures(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, logger="sluice.refused")
    refusals = RefusalLog()
    for size in (2000, 3000, 4000):
        refusals.note("p", "h", 1, "Produce", 10, f"t-0: batch of {size} bytes", reason="t")
    assert _lines(caplog) == [
        "refused Produce from client 'p' at h:1: MESSAGE_TOO_LARGE (t-0: batch of 2000 bytes)"
    ]


def test_lines_are_rate_limited(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="sluice.refused")
    refusals = RefusalLog(lines_per_s=3)
    for n in range(10):  # a client inventing a new client id for each request
        refusals.note(f"c{n}", "h", 1, "CreateTopics", 40, "bad")
    assert len(_lines(caplog)) == 3


def test_a_failing_request_repeated_logs_one_traceback_a_minute(
    caplog: pytest.LogCaptureFixture,
) -> None:
    from broker.server.log_budget import TracebackLimiter

    limiter = TracebackLimiter(interval_s=60)
    logger = logging.getLogger("unit.tracebacks")
    for _ in range(500):
        try:
            raise ValueError("boom")
        except ValueError as exc:
            limiter.log(logger, "DescribeTransactions", exc, "%s handler failed", "X")
    limiter.log(logger, "Fetch", KeyError("k"), "%s handler failed", "Fetch")
    errors = [r for r in caplog.records if r.name == "unit.tracebacks"]
    assert len(errors) == 2 and all(r.exc_info for r in errors)
