"""Consumer-group lag for Prometheus, by the names of the common kafka_exporter
(danielqsj/kafka_exporter, what Kafka dashboards and lag alerts read; Kafka's brokers
export no group lag): ``kafka_consumergroup_lag{consumergroup,topic,partition}`` (the
partition's high watermark minus the group's committed offset, as that exporter's
"latest offset" is), ``kafka_consumergroup_current_offset`` (the committed offset) and
``kafka_consumergroup_lag_sum{consumergroup,topic}``.

Each (group, partition) is reported by one broker, so a cluster's figures are the sum
(or max) over brokers: a diskless partition by the group's coordinator, a classic one by
the partition's leader (the only broker that knows its high watermark). Every
``consumer.lag.metrics.interval.ms`` each broker reads the committed offsets from the
group store (one query for all groups) and the end offsets of the partitions it reports
(one coordinator query for the diskless ones; classic ones are local); scrapes read the
last result. Partitions without a committed offset have no series (as the exporter)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING
from uuid import UUID

from broker.logs.partition_log import OffsetAnswer, OffsetAsk, PartitionLog, ask_each
from broker.server.metrics import METRICS, GroupLag
from storage.catalog import Topic
from storage.outage import OutageLog

if TYPE_CHECKING:
    from broker.groups.service import GroupService

log = logging.getLogger(__name__)

LATEST_OFFSET = -1  # ListOffsets' latest: the high watermark


async def group_lags(
    groups: GroupService,
    topic_by_id: Callable[[UUID], Topic | None],
    led_here: Callable[[UUID, int], bool | None],
    latest: Callable[[UUID, int], PartitionLog],
) -> list[GroupLag]:
    """The lag of every committed offset this broker reports (see the module's doc).
    ``led_here``: None for a partition whose latest offset any broker reads (diskless),
    else whether this broker leads the classic replica that answers it (the router's
    ``latest_led_here``); ``latest``: the log answering a partition's latest offset."""
    store = groups.store
    with_offsets = await store.groups_with_offsets()
    if not with_offsets:
        return []
    committed = await store.fetch_offsets(dict.fromkeys(with_offsets))
    owns = groups.coordinator.owns
    wanted: list[tuple[str, Topic, int, int]] = []  # group, topic, partition, committed
    routed: dict[tuple[UUID, int], tuple[PartitionLog, OffsetAsk]] = {}
    for group, offsets in committed.items():
        coordinated: bool | None = None  # asked once per group, when needed
        for c in offsets:
            topic = topic_by_id(c.topic_id)
            if topic is None or not 0 <= c.partition < topic.partitions or c.offset < 0:
                continue
            here = led_here(c.topic_id, c.partition)
            if here is not None:
                if not here:
                    continue  # its leader reports it
            else:
                if coordinated is None:
                    coordinated = owns(group)
                if not coordinated:
                    continue
            key = (c.topic_id, c.partition)
            if key not in routed:
                routed[key] = (
                    latest(c.topic_id, c.partition),
                    OffsetAsk(c.topic_id, c.partition, LATEST_OFFSET),
                )
            wanted.append((group, topic, c.partition, c.offset))
    keys = list(routed)
    answers = await ask_each(
        [routed[k] for k in keys],
        lambda plog, asks: plog.list_offsets(asks, False),
        OffsetAnswer,
    )
    ends = {
        key: answer.offset
        for key, answer in zip(keys, answers, strict=True)
        if not answer.error and answer.offset >= 0
    }
    out = []
    for group, topic, partition, offset in wanted:
        end = ends.get((topic.topic_id, partition))
        if end is not None:
            out.append(GroupLag(group, topic.name, partition, offset, max(0, end - offset)))
    return out


async def lag_loop(refresh: Callable[[], Awaitable[list[GroupLag]]], interval_s: float) -> None:
    """Exports ``refresh()``'s lag every ``interval_s`` until cancelled."""
    outage = OutageLog("reading consumer-group offsets for the lag metrics", log)
    while True:
        with outage:
            METRICS.group_lag.lags = await refresh()
        await asyncio.sleep(interval_s)
