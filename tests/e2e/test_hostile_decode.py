"""Request bodies whose lengths lie or whose non-nullable fields are null (issue 12, items 1
and 3), sent to a real `sluice dev`.

Before the decode-time check, the first three frames killed the broker process (kio's
native reader tried to allocate count x element size and Rust aborted), and the null arrays
reached handlers as None and raised TypeError there. Kafka closes the connection of a
request it cannot parse and keeps serving everyone else; so must Sluice, with one log line
naming the client and no traceback.
"""

from __future__ import annotations

import re
import socket
import struct
from collections.abc import Iterator

import pytest

from ._kafka import Msg, confluent_consume, confluent_create_topic, confluent_produce, unique_topic
from .conftest import SluiceBroker
from .test_hostile_input import IO_TIMEOUT_S, api_versions_v0, closed_or_answers, frame

pytestmark = pytest.mark.e2e


def _header(api_key: int, version: int, correlation_id: int = 7) -> bytes:
    # Request header v2 (flexible APIs): legacy client id string, then no tagged fields.
    client = b"rdkafka"
    return struct.pack(">hhih", api_key, version, correlation_id, len(client)) + client + b"\x00"


HUGE = b"\xff\xff\xff\xff\x0f"  # compact count 0xffffffff: 4 Gi entries claimed
NULL = b"\x00"  # compact array/string null

# Item 1: the Metadata v13 frame verbatim, and the same lie in OffsetCommit v8 and
# Produce v10 (the other two APIs the issue names).
HUGE_COUNT_FRAMES = {
    "metadata-v13": bytes.fromhex("0000001a0003000d00000002000772646b61666b6100ffffffff0f000000"),
    "offset-commit-v8": frame(
        _header(8, 8) + b"\x02g" + struct.pack(">i", 1) + b"\x02m" + NULL + HUGE + b"\x00"
    ),
    "produce-v10": frame(_header(0, 10) + NULL + struct.pack(">hi", 1, 30000) + HUGE + b"\x00"),
}

# Item 3: a non-nullable array sent as null, one per handler module that raised TypeError.
NULL_ARRAY_FRAMES = {
    "produce-v9": frame(_header(0, 9) + NULL + struct.pack(">hi", 1, 30000) + NULL + b"\x00"),
    "offset-commit-v8": frame(
        _header(8, 8) + b"\x02g" + struct.pack(">i", 1) + b"\x02m" + NULL + NULL + b"\x00"
    ),
    "find-coordinator-v4": frame(_header(10, 4) + b"\x00" + NULL + b"\x00"),
    "list-offsets-v7": frame(_header(2, 7) + struct.pack(">ib", -1, 0) + NULL + b"\x00"),
    "describe-groups-v5": frame(_header(15, 5) + NULL + b"\x00" + b"\x00"),
    "create-topics-v5": frame(_header(19, 5) + NULL + struct.pack(">ib", 1000, 0) + b"\x00"),
    "delete-records-v2": frame(_header(21, 2) + NULL + struct.pack(">i", 1000) + b"\x00"),
    # non-flexible: a legacy array length of -1
    "list-offsets-v1": frame(
        struct.pack(">hhih", 2, 1, 7, 7) + b"rdkafka" + struct.pack(">ii", -1, -1)
    ),
}


@pytest.fixture(autouse=True)
def still_serving(broker: SluiceBroker) -> Iterator[None]:
    yield
    assert broker.alive(), "broker process died"
    t = unique_topic("after-decode")
    confluent_create_topic(broker.bootstrap, t)
    confluent_produce(broker.bootstrap, t, [Msg(b"still", b"serving")])
    got = confluent_consume(broker.bootstrap, t, expected=1)
    assert [(g.offset, g.key, g.value) for g in got] == [(0, b"still", b"serving")]


def _closed_while_others_serve(broker: SluiceBroker, payload: bytes) -> None:
    with socket.create_connection((broker.host, broker.port), timeout=IO_TIMEOUT_S) as bystander:
        api_versions_v0(bystander, correlation_id=1)
        with socket.create_connection((broker.host, broker.port), timeout=IO_TIMEOUT_S) as bad:
            port = bad.getsockname()[1]
            bad.sendall(payload)
            assert closed_or_answers(bad) is None, "an unparseable request must close"
        # The connection opened before, on the same broker, is untouched.
        api_versions_v0(bystander, correlation_id=2)
    assert broker.alive()
    log = broker.log_tail(chars=200_000, since=broker.log_mark)
    assert "Traceback" not in log
    lines = [line for line in log.splitlines() if f"127.0.0.1:{port}" in line]
    assert len(lines) == 1, log
    assert re.search(r"WARNING .*closing connection from 127\.0\.0\.1:\d+: ", lines[0]), lines


@pytest.mark.parametrize("name", sorted(HUGE_COUNT_FRAMES))
def test_huge_array_count_closes_only_that_connection(broker: SluiceBroker, name: str) -> None:
    _closed_while_others_serve(broker, HUGE_COUNT_FRAMES[name])


@pytest.mark.parametrize("name", sorted(NULL_ARRAY_FRAMES))
def test_null_non_nullable_array_closes_without_a_handler_error(
    broker: SluiceBroker, name: str
) -> None:
    _closed_while_others_serve(broker, NULL_ARRAY_FRAMES[name])
