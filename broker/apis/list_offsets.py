"""ListOffsets: earliest, latest, max-timestamp and by-timestamp lookups."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from protocol.record_scan import first_at_or_after, max_timestamp_record
from storage.coordinator import MAX_TIMESTAMP, FindRequest, ListOffsetsRequest

from ..classic.offsets import list_offset as classic_list_offset
from ..fetch import leader_epoch_error
from ..logs.router import CLASSIC, list_offset_route
from ..security import access
from ..security.acl import AclOperation
from ._common import group_by_topic, resolve_partition

READ_COMMITTED = 1

if TYPE_CHECKING:
    from ..node import Broker
    from ..server import RequestContext


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    entries: list[tuple[str, dict[str, Any]]] = []
    lookups: list[ListOffsetsRequest] = []
    waiting: list[dict[str, Any]] = []
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    await broker.topics.ensure(
        (t.name, p.partition_index) for t in request.topics for p in t.partitions
    )
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
            if denied := access.topic_error(broker, ctx, AclOperation.DESCRIBE, topic_req.name):
                topic, error = None, denied
            if topic is not None:
                error = leader_epoch_error(
                    getattr(part, "current_leader_epoch", -1),
                    broker.leader_epoch(topic.topic_id, part.partition_index),
                )
            classic = broker.classic
            if error or topic is None:
                entry["error_code"] = error
            elif classic is not None and isinstance(
                route := list_offset_route(
                    broker,
                    classic,
                    topic.topic_id,
                    part.partition_index,
                    part.timestamp,
                    read_committed,
                ),
                tuple,
            ):
                # A migrated partition: the old classic log (below a boundary) answers.
                code, offset, ts, epoch = route
                entry.update(error_code=code, offset=offset, timestamp=ts, leader_epoch=epoch)
            elif classic is not None and (
                route == CLASSIC or (route is None and classic.is_classic(topic.topic_id))
            ):
                code, offset, ts, epoch = await classic_list_offset(
                    classic, topic.topic_id, part.partition_index, part.timestamp, read_committed
                )
                entry.update(error_code=code, offset=offset, timestamp=ts, leader_epoch=epoch)
            else:
                lookups.append(
                    ListOffsetsRequest(topic.topic_id, part.partition_index, part.timestamp)
                )
                waiting.append(entry)
    if lookups:
        results = await broker.coordinator.list_offsets(lookups, read_committed)
        for entry, lookup, result in zip(waiting, lookups, results, strict=True):
            entry.update(error_code=result.error, offset=result.offset, timestamp=result.timestamp)
            if result.error or result.offset < 0:
                continue
            entry["leader_epoch"] = broker.leader_epoch(lookup.topic_id, lookup.partition)
            if lookup.timestamp >= 0 or lookup.timestamp == MAX_TIMESTAMP:
                await _to_record(broker, lookup, entry)
    return ctx.respond({"throttle_time": 0, "topics": group_by_topic(entries)})


async def _to_record(broker: Broker, lookup: ListOffsetsRequest, entry: dict[str, Any]) -> None:
    """Narrow a batch-level answer down to the record, reading that one batch.

    The coordinator indexes batches only; Kafka answers with the exact record, and
    consumers resetting by time rely on that.
    """
    (found,) = await broker.fetcher.find(
        [FindRequest(lookup.topic_id, lookup.partition, entry["offset"], 1)], 1
    )
    if found.error or not found.batches:
        return
    batch = found.batches[0]
    views = await broker.cache.read(batch.object_key, batch.byte_offset, batch.byte_size)
    data = b"".join(views)
    if lookup.timestamp == MAX_TIMESTAMP:
        hit = max_timestamp_record(data)
    else:
        hit = first_at_or_after(data, lookup.timestamp)
    if hit is not None:
        delta, timestamp = hit
        entry.update(
            offset=max(batch.base_offset + delta, found.log_start_offset), timestamp=timestamp
        )
