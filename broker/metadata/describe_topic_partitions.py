"""DescribeTopicPartitions (KIP-966): what newer admin tools use to describe topics, in
pages of at most ``response_partition_limit`` partitions continued by a cursor.

Partitions are answered as Metadata answers them (``metadata.partition_entry``), so a
client that names its AZ gets the transformer's per-AZ leader and replicas here too.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.metadata.metadata_handler import partition_entry, request_routing
from broker.security import access
from broker.security.authorized_operations import NOT_REQUESTED, authorized
from common.acl import AclOperation

if TYPE_CHECKING:
    from broker.metadata.metadata_handler import MetadataView
    from broker.security.request_context import RequestContext
    from storage.catalog import Topic

# Kafka's max.request.partition.size.limit default: the most partitions in one answer.
MAX_PARTITIONS_PER_RESPONSE = 2000


def _error_topic(name: str, error: ErrorCode, operations: int | None = None) -> dict[str, Any]:
    return {
        "error_code": int(error),
        "name": name,
        "topic_id": None,
        "is_internal": False,
        "partitions": [],
        "topic_authorized_operations": authorized("topic") if operations is None else operations,
    }


async def handle(broker: MetadataView, ctx: RequestContext, request: Any) -> Any:
    wanted = [t.name for t in request.topics]
    cursor = request.cursor
    if cursor is not None and wanted and cursor.topic_name not in wanted:
        # Kafka refuses a cursor outside the listed topics as a bad request.
        topics = [_error_topic(name, ErrorCode.invalid_request) for name in sorted(set(wanted))]
        return ctx.respond({"throttle_time": 0, "topics": topics, "next_cursor": None})
    if cursor is not None and cursor.partition_index < 0:
        topics = [_error_topic(name, ErrorCode.invalid_request) for name in sorted(set(wanted))]
        return ctx.respond({"throttle_time": 0, "topics": topics, "next_cursor": None})
    await broker.topics.ensure((name, None) for name in wanted)
    names = sorted(set(wanted)) if wanted else sorted(t.name for t in broker.topics.all())
    checked = access.enabled(broker)

    def may_describe(name: str) -> bool:
        return not checked or access.topic(broker, ctx, AclOperation.DESCRIBE, name)

    if not wanted:
        # Listing all topics: those the caller may not describe are left out.
        names = [name for name in names if may_describe(name)]
    start_topic, start_partition = (
        (cursor.topic_name, cursor.partition_index) if cursor else ("", 0)
    )
    limit = max(1, min(int(request.response_partition_limit), MAX_PARTITIONS_PER_RESPONSE))
    routing = request_routing(broker, ctx, request)
    topics: list[dict[str, Any]] = []
    next_cursor = None
    budget = limit
    for name in names:
        if name < start_topic:
            continue
        if not may_describe(name):
            denied = ErrorCode.topic_authorization_failed
            topics.append(_error_topic(name, denied, NOT_REQUESTED))
            continue
        topic: Topic | None = broker.topics.get(name)
        if topic is None:
            topics.append(_error_topic(name, ErrorCode.unknown_topic_or_partition))
            continue
        if budget == 0:
            next_cursor = {"topic_name": name, "partition_index": 0}
            break
        first = start_partition if name == start_topic else 0
        last = min(topic.partitions, first + budget)
        partitions = []
        for p in range(first, last):
            entry = partition_entry(broker, topic, p, routing)
            entry["eligible_leader_replicas"] = []
            entry["last_known_elr"] = []
            partitions.append(entry)
        budget -= last - first
        topics.append(
            {
                "error_code": 0,
                "name": name,
                "topic_id": topic.topic_id,
                "is_internal": False,
                "partitions": partitions,
                "topic_authorized_operations": access.operations(broker, ctx, "topic", name),
            }
        )
        if last < topic.partitions:
            next_cursor = {"topic_name": name, "partition_index": last}
            break
    return ctx.respond({"throttle_time": 0, "topics": topics, "next_cursor": next_cursor})
