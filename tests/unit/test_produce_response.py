"""The hand-written ProduceResponse encoder against kio's, byte for byte."""

from __future__ import annotations

import random

import pytest
from kio.index import load_response_schema

from protocol.build import build
from protocol.codec import encode_response
from protocol.produce_response import PartitionAnswer, encode_produce_response


def _kio(version: int, topics: list[tuple[str, list[PartitionAnswer]]]) -> list[bytes]:
    schema = load_response_schema(0, version)
    response = build(
        schema,
        {
            "responses": [
                {
                    "name": name,
                    "partition_responses": [
                        {
                            "index": p.index,
                            "error_code": p.error_code,
                            "base_offset": p.base_offset,
                            "log_append_time": p.log_append_time,
                            "log_start_offset": p.log_start_offset,
                            "error_message": p.error_message,
                            "record_errors": [
                                {"batch_index": i, "batch_index_error_message": m}
                                for i, m in p.record_errors
                            ],
                        }
                        for p in parts
                    ],
                }
                for name, parts in topics
            ],
            "throttle_time": 0,
        },
    )
    return encode_response(7, response)


@pytest.mark.parametrize("version", range(3, 13))
@pytest.mark.parametrize("seed", range(5))
def test_same_bytes_as_kio(version: int, seed: int) -> None:
    # Every case has at least one topic with at least one partition (an empty answer would
    # compare nothing).
    rnd = random.Random(seed)
    topics = [
        (
            f"topic-{t}-" + "é" * rnd.randrange(3),
            [
                PartitionAnswer(
                    index=rnd.randrange(1000),
                    error_code=rnd.choice([0, 0, 2, 47]),
                    base_offset=rnd.choice([-1, 0, 2**40]),
                    log_append_time=rnd.choice([-1, 1_700_000_000_000]),
                    log_start_offset=rnd.choice([-1, 0, 12345]),
                    error_message=rnd.choice([None, "", "bad batch ✗"]),
                    # ProduceResponse v8+: which records of the batch made it fail
                    record_errors=rnd.choice(
                        [(), ((0, None),), ((3, "no key ✗"), (70000, "timestamp"))]
                    ),
                )
                for _ in range(rnd.randrange(1, 4))
            ],
        )
        for t in range(rnd.randrange(1, 3))
    ]
    ours = encode_response(7, encode_produce_response(version, topics))
    assert b"".join(ours) == b"".join(_kio(version, topics))
