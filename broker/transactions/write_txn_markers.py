"""WriteTxnMarkers (key 27): a transaction coordinator asks this broker, the partitions'
leader, to end a producer's transaction with COMMIT or ABORT markers. A broker's request,
so CLUSTER_ACTION on the cluster (as Kafka checks).

Served for classic partitions (their logs are here); a diskless partition's markers are
written by its transaction's coordinator into the shared log directly (EndTxn), so one named
here is answered INVALID_REQUEST (``kafka-transactions.sh abort`` of a diskless partition
is not needed: a diskless transaction cannot hang).
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.logs.router import LogRouter, Purpose
from broker.security import access
from common.acl import AclOperation

if TYPE_CHECKING:
    from broker.logs.router import RoutedView
    from broker.security.request_context import RequestContext


async def handle(broker: RoutedView, ctx: RequestContext, request: Any) -> Any:
    allowed = access.cluster(broker, ctx, AclOperation.CLUSTER_ACTION)
    logs = broker.router
    results = []
    for marker in request.markers:
        topics = []
        for t in marker.topics:
            calls = [
                _one(broker, logs, allowed, t.name, int(index), marker)
                for index in t.partition_indexes
            ]
            codes = await asyncio.gather(*calls)
            topics.append(
                {
                    "name": t.name,
                    "partitions": [
                        {"partition_index": index, "error_code": code}
                        for index, code in zip(t.partition_indexes, codes, strict=True)
                    ],
                }
            )
        results.append({"producer_id": marker.producer_id, "topics": topics})
    return ctx.respond({"markers": results})


async def _one(
    broker: RoutedView, logs: LogRouter, allowed: bool, name: str, index: int, marker: Any
) -> int:
    if not allowed:
        return int(ErrorCode.cluster_authorization_failed)
    topic = broker.topics.get(name)
    if topic is None or not 0 <= index < topic.partitions:
        return int(ErrorCode.unknown_topic_or_partition)
    log = logs.route(topic.topic_id, index, Purpose.MARKER)
    return await log.write_marker(
        topic.topic_id,
        index,
        int(marker.producer_id),
        int(marker.producer_epoch),
        bool(marker.transaction_result),
        int(marker.coordinator_epoch),
    )
