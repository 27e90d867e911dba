"""OffsetForLeaderEpoch: end offsets of leader epochs, for clients validating their
position after a leader change (KIP-320)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from storage.coordinator import PartitionKey

from ..fetch import LEADER_EPOCH
from ._common import group_by_topic, resolve_partition

if TYPE_CHECKING:
    from ..node import Broker
    from ..server import RequestContext


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    entries: list[tuple[str, dict[str, Any]]] = []
    keys: list[PartitionKey] = []
    waiting: list[tuple[dict[str, Any], int]] = []
    await broker.topics.ensure(
        (t.topic, p.partition) for t in request.topics for p in t.partitions
    )
    for topic_req in request.topics:
        for part in topic_req.partitions:
            entry: dict[str, Any] = {
                "error_code": 0,
                "partition": part.partition,
                "leader_epoch": -1,
                "end_offset": -1,
            }
            entries.append((topic_req.topic, entry))
            topic, error = resolve_partition(broker, topic_req.topic, part.partition)
            if topic is None:
                entry["error_code"] = error
            elif part.current_leader_epoch > LEADER_EPOCH:
                entry["error_code"] = int(ErrorCode.unknown_leader_epoch)
            else:
                keys.append(PartitionKey(topic.topic_id, part.partition))
                waiting.append((entry, part.leader_epoch))
    if keys:
        infos = await broker.coordinator.log_info(keys)
        for (entry, epoch), info in zip(waiting, infos, strict=True):
            if info.error:
                entry["error_code"] = info.error
            elif epoch <= LEADER_EPOCH:
                # Every offset so far was written in the one epoch there is.
                entry.update(leader_epoch=LEADER_EPOCH, end_offset=info.high_watermark)
            # A newer epoch than ours is unknown: Kafka answers -1/-1 without error.
    return ctx.respond({"throttle_time": 0, "topics": group_by_topic(entries, key="topic")})
