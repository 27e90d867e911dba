"""The hand-written FetchResponse encoder against kio's, byte for byte."""

from __future__ import annotations

import random
import uuid
from typing import Any

import pytest
from kio.index import load_response_schema
from kio.serial import entity_reader

from protocol.build import build
from protocol.codec import RecordChunks, encode_response
from protocol.fetch_response import encode_fetch_response

VERSIONS = range(4, 17)  # those Sluice serves (broker/server/api_versions.py)


def _records(rnd: random.Random) -> Any:
    """Every shape a partition's records take in the handler's answer."""
    kind = rnd.choice(["none", "empty", "small", "large", "view", "chunks", "chunks"])
    if kind == "none":
        return None
    if kind == "empty":
        return b""
    if kind == "small":
        return rnd.randbytes(rnd.randrange(1, 300))
    if kind == "large":
        return rnd.randbytes(rnd.randrange(5000, 20000))
    if kind == "view":
        return memoryview(rnd.randbytes(9000))[7:]
    pieces: list[bytes | memoryview] = [
        rnd.randbytes(16),
        memoryview(rnd.randbytes(rnd.randrange(1, 3000))),
        memoryview(rnd.randbytes(500))[3:],
    ]
    return RecordChunks(pieces, sum(len(p) for p in pieces))


def _entry(rnd: random.Random) -> dict[str, Any]:
    aborted = rnd.choice(
        [
            None,
            [],
            [
                {"producer_id": rnd.randrange(2**40), "first_offset": rnd.randrange(2**33)}
                for _ in range(rnd.randrange(1, 4))
            ],
        ]
    )
    return {
        "partition_index": rnd.randrange(5000),
        "error_code": rnd.choice([0, 0, 0, 1, 3, 6, 74, 100]),
        "high_watermark": rnd.choice([-1, 0, 7, 2**40]),
        "last_stable_offset": rnd.choice([-1, 0, 5, 2**40]),
        "log_start_offset": rnd.choice([-1, 0, 3]),
        "aborted_transactions": aborted,
        "preferred_read_replica": rnd.choice([-1, -1, 2]),
        "records": _records(rnd),
    }


def _case(rnd: random.Random, version: int) -> tuple[list[tuple[Any, list[dict]]], int, int, int]:
    topics = [
        (
            uuid.UUID(int=rnd.getrandbits(128)) if version >= 13 else f"t{t}-" + "é" * t,
            [_entry(rnd) for _ in range(rnd.randrange(1, 6))],
        )
        for t in range(rnd.randrange(1, 4))
    ]
    return topics, rnd.choice([0, 0, 250]), rnd.choice([0, 0, 70]), rnd.randrange(2**31)


def _joined(frame: list[bytes | memoryview]) -> bytes:
    return b"".join(bytes(p) for p in frame)


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("seed", range(6))
def test_same_bytes_as_kio(version: int, seed: int) -> None:
    rnd = random.Random(seed * 100 + version)
    topics, throttle, error, session_id = _case(rnd, version)
    key = "topic_id" if version >= 13 else "topic"
    kio = build(
        load_response_schema(1, version),
        {
            "throttle_time": throttle,
            "error_code": error,
            "session_id": session_id,
            "responses": [{key: k, "partitions": parts} for k, parts in topics],
        },
    )
    ours = encode_fetch_response(version, topics, throttle, error, session_id)
    assert _joined(encode_response(9, ours)) == _joined(encode_response(9, kio))
    assert ours.throttle_ms == throttle


@pytest.mark.parametrize("version", [4, 11, 12, 16])
def test_an_empty_answer_and_one_without_records(version: int) -> None:
    # An incremental fetch with nothing new answers no topic at all.
    for topics in ([], [("t" if version < 13 else uuid.uuid4(), [])]):
        key = "topic_id" if version >= 13 else "topic"
        kio = build(
            load_response_schema(1, version),
            {"responses": [{key: k, "partitions": p} for k, p in topics], "session_id": 5},
        )
        ours = encode_fetch_response(version, topics, session_id=5)
        assert _joined(encode_response(1, ours)) == _joined(encode_response(1, kio))


def test_record_bytes_are_not_copied() -> None:
    # Cached blocks go out as the views they are: a copy per fetch would cost what the
    # cache saves.
    view = memoryview(bytes(10_000))[16:]
    chunks = RecordChunks([b"p" * 16, view], 16 + len(view))
    entry = {"partition_index": 0, "error_code": 0, "high_watermark": 1, "records": chunks}
    frame = encode_response(3, encode_fetch_response(16, [(uuid.uuid4(), [entry])]))
    assert any(part is view for part in frame)
    schema = load_response_schema(1, 16)
    decoded, _ = entity_reader(schema)(memoryview(_joined(frame)), 9)
    assert decoded.responses[0].partitions[0].records == b"p" * 16 + bytes(view)
