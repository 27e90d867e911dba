"""DeleteRecords: move log start offsets forward."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.logs.partition_log import DeleteAnswer, DeleteAsk, PartitionLog, ask_each
from broker.logs.router import Purpose
from broker.security import access
from broker.server.handler_helpers import group_by_topic, resolve_partition
from common.acl import AclOperation

if TYPE_CHECKING:
    from broker.logs.router import RoutedView
    from broker.security.request_context import RequestContext


async def delete_records(broker: RoutedView, ctx: RequestContext, request: Any) -> Any:
    entries: list[tuple[str, dict[str, Any]]] = []
    routed: list[tuple[PartitionLog, DeleteAsk]] = []
    waiting: list[dict[str, Any]] = []
    await broker.topics.ensure(
        (t.name, p.partition_index) for t in request.topics for p in t.partitions
    )
    logs = broker.router
    for topic_req in request.topics:
        for part in topic_req.partitions:
            entry: dict[str, Any] = {
                "partition_index": part.partition_index,
                "low_watermark": -1,
                "error_code": 0,
            }
            entries.append((topic_req.name, entry))
            topic, error = resolve_partition(broker, topic_req.name, part.partition_index)
            if denied := access.topic_error(broker, ctx, AclOperation.DELETE, topic_req.name):
                topic, error = None, denied
            if topic is None:
                entry["error_code"] = error
                continue
            log = logs.route(topic.topic_id, part.partition_index, Purpose.DELETE)
            routed.append((log, DeleteAsk(topic.topic_id, part.partition_index, part.offset)))
            waiting.append(entry)
    answers: list[DeleteAnswer] = await ask_each(
        routed, lambda log, asks: log.delete_records(asks), DeleteAnswer
    )
    for entry, answer in zip(waiting, answers, strict=True):
        entry.update(error_code=answer.error, low_watermark=answer.low_watermark)
    return ctx.respond({"throttle_time": 0, "topics": group_by_topic(entries)})
