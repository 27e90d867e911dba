"""DescribeQuorum (key 55, ``kafka-metadata-quorum describe``): the metadata quorum's state.

A Kafka broker forwards DescribeQuorum to the active controller, whose Raft leader reports
the voters' log end offsets and the high watermark of ``__cluster_metadata``. Sluice's Raft
controllers have no Kafka listener, so the broker answers from the controllers' own status
(``GET /v1/status``): the leader's term as leader epoch, its commit index as high
watermark, its own last index and what it knows each follower has (the Raft match index) as
log end offsets. Raft indexes start at 1, so the last index is the number of entries: the
same figure as Kafka's log end offset. No observers are listed: Kafka lists its brokers
there, but Sluice numbers brokers and controllers apart (broker 1 and controller 1 are two
processes), and the tool shows an observer with the endpoints of the voter of the same id.
The voters' endpoints are their HTTP(S) API, where an operator reaches them. Without a
controller quorum (brokers registered in the database) there is no quorum to describe:
UNSUPPORTED_VERSION, as the other controller-only APIs answer then.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from kio.schema.errors import ErrorCode

from broker.security import access
from common.acl import AclOperation

if TYPE_CHECKING:
    from broker.metadata.view import HandlerView
    from broker.security.request_context import RequestContext

METADATA_TOPIC = "__cluster_metadata"
NO_QUORUM = "no controller quorum: the brokers register in the database"
UNKNOWN = -1


def answer(
    statuses: list[tuple[str, dict[str, Any] | None]], now_ms: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """(the partition's data, the voters' endpoints) from the controllers' statuses; the
    partition carries NOT_LEADER_OR_FOLLOWER while no controller knows itself leader."""
    answered = [(url, s) for url, s in statuses if s is not None and "role" in s]
    leaders = [(url, s) for url, s in answered if s.get("role") == "leader"]
    if not leaders:
        return {
            "partition_index": 0,
            "error_code": int(ErrorCode.not_leader_or_follower),
            "error_message": "the controller quorum has no leader",
            "leader_id": UNKNOWN,
            "leader_epoch": max((int(s.get("term", 0)) for _, s in answered), default=UNKNOWN),
            "high_watermark": UNKNOWN,
            "current_voters": [],
            "observers": [],
        }, []
    # Two self-declared leaders only across a partition: the higher term is the real one.
    _, leader = max(leaders, key=lambda pair: int(pair[1].get("term", 0)))
    leader_id = int(leader["node_id"])
    matches = {int(k): int(v) for k, v in (leader.get("follower_match") or {}).items()}
    voters = []
    for vid in leader.get("voters") or [leader_id]:
        vid = int(vid)
        is_leader = vid == leader_id
        end = int(leader["last_index"]) if is_leader else matches.get(vid, UNKNOWN)
        voters.append(
            {
                "replica_id": vid,
                "replica_directory_id": uuid.UUID(int=0),
                "log_end_offset": end,
                # Kafka: the leader's own last-caught-up time is now; a follower's fetch
                # times are not tracked here (-1: unknown).
                "last_fetch_timestamp": UNKNOWN,
                "last_caught_up_timestamp": now_ms if is_leader else UNKNOWN,
            }
        )
    nodes = []
    for url, s in answered:
        parts = urlsplit(url)
        nodes.append(
            {
                "node_id": int(s["node_id"]),
                # Where the controller is reached: its HTTP(S) API, not a Kafka listener.
                "listeners": [
                    {"name": parts.scheme.upper(), "host": parts.hostname, "port": parts.port}
                ],
            }
        )
    return {
        "partition_index": 0,
        "error_code": 0,
        "error_message": None,
        "leader_id": leader_id,
        "leader_epoch": int(leader["term"]),
        "high_watermark": int(leader["commit_index"]),
        "current_voters": voters,
        "observers": [],
    }, nodes


async def handle(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    # Kafka: DESCRIBE on the cluster.
    if refusal := access.cluster_refusal(broker, ctx, AclOperation.DESCRIBE):
        return refusal
    if broker.controller is None:
        return ctx.respond(
            {"error_code": int(ErrorCode.unsupported_version), "error_message": NO_QUORUM,
             "topics": [], "nodes": []}
        )  # fmt: skip
    asked = [(t.topic_name, [int(p.partition_index) for p in t.partitions]) for t in request.topics]
    statuses = await broker.controller.client.quorum_status()
    partition, nodes = answer(statuses, int(time.time() * 1000))
    topics = []
    for name, indexes in asked:
        parts = []
        for index in indexes:
            if name == METADATA_TOPIC and index == 0:
                parts.append(partition)
            else:  # Kafka: only the metadata partition has a quorum
                parts.append(
                    {**_empty(index), "error_code": int(ErrorCode.unknown_topic_or_partition)}
                )
        topics.append({"topic_name": name, "partitions": parts})
    return ctx.respond({"error_code": 0, "error_message": None, "topics": topics, "nodes": nodes})


def _empty(index: int) -> dict[str, Any]:
    return {
        "partition_index": index,
        "error_code": 0,
        "error_message": None,
        "leader_id": UNKNOWN,
        "leader_epoch": UNKNOWN,
        "high_watermark": UNKNOWN,
        "current_voters": [],
        "observers": [],
    }
