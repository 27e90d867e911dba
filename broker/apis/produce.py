"""Produce: validate batch headers, hand partitions to the appender, answer after
the commit (acks 1/all) or never (acks 0)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from protocol.records import InvalidRecords, parse_batches

from ..append import PartitionAppend, PartitionResult

if TYPE_CHECKING:
    from ..node import Broker
    from ..server import RequestContext

VALID_ACKS = (-1, 0, 1)


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    acks = request.acks
    # Per partition, in request order: either an immediate result or the index of
    # its PartitionAppend.
    slots: list[tuple[str, int, PartitionResult | int, str | None]] = []
    appends: list[PartitionAppend] = []
    await broker.topics.ensure(
        (td.name, part.index) for td in request.topic_data for part in td.partition_data
    )
    for topic_data in request.topic_data:
        name = topic_data.name
        topic = broker.topics.get(name)
        for part in topic_data.partition_data:
            error, message = _precheck(request, acks)
            if error is None and (topic is None or not 0 <= part.index < topic.partitions):
                error = ErrorCode.unknown_topic_or_partition
                message = "This server does not host this topic-partition."
            if error is not None:
                slots.append((name, part.index, PartitionResult(int(error)), message))
                continue
            assert topic is not None
            records = memoryview(part.records or b"")
            try:
                batches = parse_batches(
                    records, broker.topics.int_config(topic, "max.message.bytes")
                )
                if any(b.is_transactional or b.is_control for b in batches):
                    raise InvalidRecords(
                        ErrorCode.invalid_record, "transactional batches are not supported"
                    )
            except InvalidRecords as exc:
                slots.append((name, part.index, PartitionResult(int(exc.error)), str(exc)))
                continue
            log_append = broker.topics.config(topic).get("message.timestamp.type") == (
                "LogAppendTime"
            )
            slots.append((name, part.index, len(appends), None))
            appends.append(
                PartitionAppend(topic.topic_id, part.index, records, batches, log_append)
            )
    committed = broker.appender.submit(appends)
    if acks == 0:
        return None
    return asyncio.ensure_future(_respond(ctx, slots, committed))


def _precheck(request: Any, acks: int) -> tuple[ErrorCode | None, str | None]:
    if request.transactional_id is not None:
        return ErrorCode.transactional_id_authorization_failed, "transactions are not supported"
    if acks not in VALID_ACKS:
        return ErrorCode.invalid_required_acks, f"acks must be -1, 0 or 1, not {acks}"
    return None, None


async def _respond(
    ctx: RequestContext,
    slots: list[tuple[str, int, PartitionResult | int, str | None]],
    committed: asyncio.Future[list[PartitionResult]],
) -> Any:
    results = await committed
    topics: dict[str, list[dict[str, Any]]] = {}
    for name, index, slot, message in slots:
        result = results[slot] if isinstance(slot, int) else slot
        topics.setdefault(name, []).append(
            {
                "index": index,
                "error_code": result.error,
                "base_offset": result.base_offset,
                "log_append_time": result.log_append_time,
                "log_start_offset": result.log_start_offset,
                "error_message": message,
            }
        )
    return ctx.respond(
        {
            "responses": [
                {"name": name, "partition_responses": parts} for name, parts in topics.items()
            ],
            "throttle_time": 0,
        }
    )
