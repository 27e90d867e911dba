"""OffsetForLeaderEpoch: end offsets of leader epochs, for clients validating their
position after a leader change (KIP-320)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from broker.logs.fetch_slots import leader_epoch_error
from broker.logs.partition_log import EpochAnswer, EpochAsk, PartitionLog, ask_each
from broker.logs.router import Purpose
from broker.security import access
from broker.server.handler_helpers import group_by_topic, resolve_partition
from common.acl import AclOperation

if TYPE_CHECKING:
    from broker.logs.router import RoutedView
    from broker.security.request_context import RequestContext


async def handle(broker: RoutedView, ctx: RequestContext, request: Any) -> Any:
    entries: list[tuple[str, dict[str, Any]]] = []
    routed: list[tuple[PartitionLog, EpochAsk]] = []
    waiting: list[dict[str, Any]] = []
    await broker.topics.ensure((t.topic, p.partition) for t in request.topics for p in t.partitions)
    # A follower's request (replica_id >= 0) with CLUSTER_ACTION may ask about any topic, as
    # Kafka lets brokers do; everyone else needs DESCRIBE on each topic.
    replication = int(getattr(request, "replica_id", -1)) >= 0 and access.cluster(
        broker, ctx, AclOperation.CLUSTER_ACTION
    )
    logs = broker.router
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
            if error or topic is None:
                entry["error_code"] = error
                continue
            log = logs.route(
                topic.topic_id,
                part.partition,
                Purpose.EPOCHS,
                part.leader_epoch,
                replica_id=int(request.replica_id) if replication else -1,
            )
            ask = EpochAsk(topic.topic_id, part.partition, part.leader_epoch, current)
            routed.append((log, ask))
            waiting.append(entry)
    answers: list[EpochAnswer] = await ask_each(
        routed, lambda log, asks: log.end_offsets(asks), EpochAnswer
    )
    for entry, answer in zip(waiting, answers, strict=True):
        entry.update(
            error_code=answer.error, leader_epoch=answer.leader_epoch, end_offset=answer.end_offset
        )
    return ctx.respond({"throttle_time": 0, "topics": group_by_topic(entries, key="topic")})
