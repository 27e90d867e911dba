"""OffsetForLeaderEpoch: end offsets of leader epochs, for clients validating their
position after a leader change (KIP-320)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from storage.coordinator import PartitionKey

from ..classic.offsets import end_offset_for_epoch
from ..fetch import leader_epoch_error
from ..logs.router import CLASSIC, epochs_route
from ..security import access
from ..security.acl import AclOperation
from ._common import group_by_topic, resolve_partition

if TYPE_CHECKING:
    from ..node import Broker
    from ..server import RequestContext


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    entries: list[tuple[str, dict[str, Any]]] = []
    keys: list[PartitionKey] = []
    waiting: list[tuple[dict[str, Any], int, int]] = []
    await broker.topics.ensure((t.topic, p.partition) for t in request.topics for p in t.partitions)
    # A follower's request (replica_id >= 0) with CLUSTER_ACTION may ask about any topic, as
    # Kafka lets brokers do; everyone else needs DESCRIBE on each topic.
    replication = int(getattr(request, "replica_id", -1)) >= 0 and access.cluster(
        broker, ctx, AclOperation.CLUSTER_ACTION
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
            if not replication and (
                denied := access.topic_error(broker, ctx, AclOperation.DESCRIBE, topic_req.topic)
            ):
                topic, error = None, denied
            current = -1
            if topic is not None:
                current = broker.leader_epoch(topic.topic_id, part.partition)
                error = leader_epoch_error(part.current_leader_epoch, current)
            classic = broker.classic
            if error or topic is None:
                entry["error_code"] = error
            elif classic is not None and isinstance(
                route := epochs_route(
                    broker,
                    classic,
                    topic.topic_id,
                    part.partition,
                    replication,
                    part.leader_epoch,
                    current,
                ),
                tuple,
            ):
                # A partition migrated to classic, asked by a consumer (broker/migration).
                code, epoch, end = route
                entry.update(error_code=code, leader_epoch=epoch, end_offset=end)
            elif classic is not None and (
                route == CLASSIC or (route is None and classic.is_classic(topic.topic_id))
            ):
                code, epoch, end = end_offset_for_epoch(
                    classic, topic.topic_id, part.partition, part.leader_epoch
                )
                entry.update(error_code=code, leader_epoch=epoch, end_offset=end)
            else:
                keys.append(PartitionKey(topic.topic_id, part.partition))
                waiting.append((entry, part.leader_epoch, current))
    if keys:
        infos = await broker.coordinator.log_info(keys)
        for (entry, epoch, current), info in zip(waiting, infos, strict=True):
            if info.error:
                entry["error_code"] = info.error
            elif epoch <= current:
                # A diskless log never diverges: whichever leader wrote an offset, every
                # epoch up to the current one ends at the high watermark.
                entry.update(leader_epoch=epoch, end_offset=info.high_watermark)
            # A newer epoch than ours is unknown: Kafka answers -1/-1 without error.
    return ctx.respond({"throttle_time": 0, "topics": group_by_topic(entries, key="topic")})
