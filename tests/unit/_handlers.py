"""Running an API handler as the broker's server would, for the handler unit tests: the
request built at a version, the answer (also a deferred one) encoded and decoded as a client
reads it, so a field a version cannot carry fails the test."""

from __future__ import annotations

import asyncio
from typing import Any

from kio.index import load_request_schema, load_response_schema
from kio.serial import entity_reader

from broker.security.principal import ANONYMOUS
from broker.security.request_context import RequestContext
from protocol.build import build
from protocol.codec import RequestHeader, encode_response


def request_and_context(
    key: int,
    version: int,
    data: dict[str, Any],
    principal: str = ANONYMOUS,
    client_id: str = "unit-client",
) -> tuple[Any, RequestContext]:
    """The request ``data`` built at ``version``, and its context (a client at 10.0.0.9)."""
    request = build(load_request_schema(key, version), data)
    ctx = RequestContext(
        RequestHeader(key, version, 1, client_id),
        load_response_schema(key, version),
        "10.0.0.9",
        4242,
        principal,
    )
    return request, ctx


async def settled(response: Any) -> Any:
    """The answer itself, once a handler's deferred answer (a future) has one."""
    if isinstance(response, asyncio.Future):
        return await asyncio.wait_for(response, 5)
    return response


def decode_answer(response: Any, key: int, version: int) -> Any:
    """``response`` encoded as the server sends it, then decoded as ``version``'s answer."""
    encoded = b"".join(bytes(part) for part in encode_response(1, response))
    schema = load_response_schema(key, version)  # also for answers encoded by hand
    # Skip the size, the correlation id and (flexible versions) the empty tag buffer.
    start = 9 if schema.__header_schema__.__flexible__ else 8
    decoded, _ = entity_reader(schema)(memoryview(encoded), start)
    return decoded


def fetch_body(
    topic: str, offset: int, replica: int = -1, max_wait_ms: int = 0, min_bytes: int = 0
) -> dict[str, Any]:
    """A Fetch (v12) of partition 0 of ``topic`` by name: a consumer's (``replica`` -1), or a
    follower's replication fetch."""
    return {
        "replica_id": replica,
        "max_wait": max_wait_ms,
        "min_bytes": min_bytes,
        "max_bytes": 1 << 20,
        "isolation_level": 0,
        "topics": [
            {
                "topic": topic,
                "partitions": [
                    {
                        "partition": 0,
                        "current_leader_epoch": -1,
                        "fetch_offset": offset,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                ],
            }
        ],
        "forgotten_topics_data": [],
        "rack_id": "",
    }
