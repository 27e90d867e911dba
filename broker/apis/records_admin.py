"""DeleteRecords: move log start offsets forward."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from common.acl import AclOperation
from storage.partition_key import PartitionKey

from ..classic.offsets import delete_records as classic_delete
from ..node import now_ms
from ..security import access
from ._common import group_by_topic, resolve_partition

if TYPE_CHECKING:
    from ..node import Broker
    from ..server import RequestContext


async def delete_records(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    entries: list[tuple[str, dict[str, Any]]] = []
    asks: list[tuple[PartitionKey, int]] = []
    waiting: list[dict[str, Any]] = []
    await broker.topics.ensure(
        (t.name, p.partition_index) for t in request.topics for p in t.partitions
    )
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
            classic = broker.classic
            if classic is not None and classic.is_classic(topic.topic_id):
                code, low = await classic_delete(
                    classic, topic.topic_id, part.partition_index, part.offset
                )
                entry.update(error_code=code, low_watermark=low)
                continue
            asks.append((PartitionKey(topic.topic_id, part.partition_index), part.offset))
            waiting.append(entry)
    if asks:
        results = await broker.coordinator.delete_records(asks, now_ms())
        for entry, result in zip(waiting, results, strict=True):
            entry.update(error_code=result.error, low_watermark=result.low_watermark)
    return ctx.respond({"throttle_time": 0, "topics": group_by_topic(entries)})
