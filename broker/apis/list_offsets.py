"""ListOffsets: earliest, latest, max-timestamp and by-timestamp lookups."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from storage.coordinator import ListOffsetsRequest

from ..fetch import LEADER_EPOCH
from ._common import group_by_topic, resolve_partition

if TYPE_CHECKING:
    from ..node import Broker
    from ..server import RequestContext


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    entries: list[tuple[str, dict[str, Any]]] = []
    lookups: list[ListOffsetsRequest] = []
    waiting: list[dict[str, Any]] = []
    for topic_req in request.topics:
        for part in topic_req.partitions:
            entry: dict[str, Any] = {
                "partition_index": part.partition_index,
                "error_code": 0,
                "timestamp": -1,
                "offset": -1,
                "leader_epoch": -1,
            }
            entries.append((topic_req.name, entry))
            topic, error = resolve_partition(broker, topic_req.name, part.partition_index)
            if topic is None:
                entry["error_code"] = error
            elif getattr(part, "current_leader_epoch", -1) > LEADER_EPOCH:
                entry["error_code"] = int(ErrorCode.unknown_leader_epoch)
            else:
                lookups.append(
                    ListOffsetsRequest(topic.topic_id, part.partition_index, part.timestamp)
                )
                waiting.append(entry)
    if lookups:
        for entry, result in zip(
            waiting, await broker.coordinator.list_offsets(lookups), strict=True
        ):
            entry.update(error_code=result.error, offset=result.offset, timestamp=result.timestamp)
            if not result.error and result.offset >= 0:
                entry["leader_epoch"] = LEADER_EPOCH
    return ctx.respond({"throttle_time": 0, "topics": group_by_topic(entries)})
