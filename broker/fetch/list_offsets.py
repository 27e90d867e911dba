"""ListOffsets: earliest, latest, max-timestamp and by-timestamp lookups."""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.logs.fetch_slots import leader_epoch_error
from broker.logs.partition_log import OffsetAnswer, OffsetAsk, PartitionLog, ask_each
from broker.logs.router import Purpose
from broker.security import access
from broker.server.handler_helpers import group_by_topic, resolve_partition
from common.acl import AclOperation

READ_COMMITTED = 1
# -1 latest, -2 earliest, -3 max timestamp, -4 earliest local, -5 latest tiered.
LOWEST_SPECIAL_TIMESTAMP = -5

if TYPE_CHECKING:
    from broker.logs.router import RoutedView
    from broker.security.request_context import RequestContext


async def handle(broker: RoutedView, ctx: RequestContext, request: Any) -> Any:
    entries: list[tuple[str, dict[str, Any]]] = []
    routed: list[tuple[PartitionLog, OffsetAsk]] = []
    waiting: list[dict[str, Any]] = []
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    await broker.topics.ensure(
        (t.name, p.partition_index) for t in request.topics for p in t.partitions
    )
    logs = broker.router
    # A partition asked twice is answered once, INVALID_REQUEST (Kafka's).
    asked = Counter((t.name, p.partition_index) for t in request.topics for p in t.partitions)
    answered: set[tuple[str, int]] = set()
    for topic_req in request.topics:
        for part in topic_req.partitions:
            key = (topic_req.name, part.partition_index)
            if key in answered:
                continue
            answered.add(key)
            entry: dict[str, Any] = {
                "partition_index": part.partition_index,
                "error_code": 0,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            entries.append((topic_req.name, entry))
            if asked[key] > 1:
                entry["error_code"] = int(ErrorCode.invalid_request)
                continue
            if part.timestamp < LOWEST_SPECIAL_TIMESTAMP:
                # A special timestamp this broker does not know (a newer one): Kafka's
                # answer to a lookup its version cannot do.
                entry["error_code"] = int(ErrorCode.unsupported_version)
                continue
            topic, error = resolve_partition(broker, topic_req.name, part.partition_index)
            if denied := access.topic_error(broker, ctx, AclOperation.DESCRIBE, topic_req.name):
                topic, error = None, denied
            if topic is not None:
                error = leader_epoch_error(
                    getattr(part, "current_leader_epoch", -1),
                    broker.leader_epoch(topic.topic_id, part.partition_index),
                )
            if error or topic is None:
                entry["error_code"] = error
                continue
            log = logs.route(
                topic.topic_id,
                part.partition_index,
                Purpose.LIST_OFFSETS,
                part.timestamp,
                read_committed=read_committed,
            )
            routed.append((log, OffsetAsk(topic.topic_id, part.partition_index, part.timestamp)))
            waiting.append(entry)
    answers: list[OffsetAnswer] = await ask_each(
        routed, lambda log, asks: log.list_offsets(asks, read_committed), OffsetAnswer
    )
    for entry, answer in zip(waiting, answers, strict=True):
        entry.update(
            error_code=answer.error,
            offset=answer.offset,
            timestamp=answer.timestamp,
            leader_epoch=answer.leader_epoch,
        )
    return ctx.respond({"throttle_time": 0, "topics": group_by_topic(entries)})
