"""Fetch: long poll until min_bytes are available or max_wait passes, then answer
with patched record bytes straight from the cache."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from protocol.codec import RecordChunks
from storage.coordinator import (
    CoordinatorUnavailable,
    FindRequest,
    FindResult,
    LogInfo,
)
from storage.object_store import ObjectStoreError

from ..classic.fetch import DENIED_REPLICA, classic_entry, classic_interests, read_classic
from ..client_az import az_from_client_id, count_fetch
from ..client_quotas import user_of
from ..fetch import FetchBudget, FetchSlot, leader_epoch_error
from ..logs.engines import log_router
from ..logs.partition_log import ReadPlan
from ..logs.router import LogRouter, Purpose
from ..metrics import METRICS
from ..security import access
from ..security.acl import AclOperation
from ..tiering.fetch import read_tiered
from ..transformer import preferred_read_replica, route_without_replicas

if TYPE_CHECKING:
    from storage.catalog import Topic

    from ..node import Broker
    from ..server import RequestContext

log = logging.getLogger(__name__)

TOPIC_IDS_VERSION = 13
READ_COMMITTED = 1


def _preferred_finder(broker: Broker, rack: str | None) -> Callable[[Topic, int], int] | None:
    """For a consumer that sent its rack (Fetch v11+ ``rack_id``, i.e. ``client.rack``):
    a function giving each partition's preferred read replica in that rack, or None when
    there is nothing to redirect (no rack, this broker is in it, or no broker there)."""
    if not rack or rack == broker.config.rack:
        return None
    alive = {b.node_id: b.rack for b in broker.endpoints()}
    if rack not in alive.values():
        return None
    me = broker.config.node_id
    controller = broker.controller

    def find(topic: Topic, partition: int) -> int:
        if controller is None:
            chosen = route_without_replicas(topic.topic_id, partition, alive, rack, -1)
            return chosen if chosen != me else -1
        image = controller.image
        topic_image = image.topic_by_id(topic.topic_id)
        state = image.partition(topic.topic_id, partition)
        if topic_image is None or not topic_image.diskless or state is None:
            return -1
        return preferred_read_replica(
            topic.topic_id,
            partition,
            state.replicas,
            state.isr,
            state.leader,
            alive,
            rack,
            me,
        )

    return find


def _may_read(broker: Broker, ctx: RequestContext, key: Any, topic: Topic | None) -> bool:
    """READ on the topic. A topic asked for by an id this broker does not know has no name
    to check: it answers UNKNOWN_TOPIC_ID, as Kafka does."""
    name = key if isinstance(key, str) else topic.name if topic is not None else None
    return name is None or access.topic(broker, ctx, AclOperation.READ, name)


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    by_id = ctx.header.api_version >= TOPIC_IDS_VERSION
    slots: list[FetchSlot] = []
    await broker.topics.ensure(
        (t.topic_id if by_id else t.topic, part.partition)
        for t in request.topics
        for part in t.partitions
    )
    rack = getattr(request, "rack_id", None) or None
    prefer = _preferred_finder(broker, rack)
    redirected = False
    logs = log_router(broker)
    replica_id = _replica_id(request)
    if (
        replica_id >= 0
        and access.enabled(broker)
        and not access.cluster(broker, ctx, AclOperation.CLUSTER_ACTION)
    ):
        # Replication is a broker's privilege (Kafka: CLUSTER_ACTION on the cluster).
        replica_id = DENIED_REPLICA
    plan = ReadPlan(replica_id, ctx.header.api_version, rack, prefer)
    finds = plan.finds
    for fetch_topic in request.topics:
        if by_id:
            key = fetch_topic.topic_id
            topic = broker.topics.get_by_id(key)
            missing = ErrorCode.unknown_topic_id
        else:
            key = fetch_topic.topic
            topic = broker.topics.get(key)
            missing = ErrorCode.unknown_topic_or_partition
        denied = access.enabled(broker) and not _may_read(broker, ctx, key, topic)
        for part in fetch_topic.partitions:
            error = 0
            if denied:
                error = int(ErrorCode.topic_authorization_failed)
            elif topic is None:
                error = int(missing)
            elif not 0 <= part.partition < topic.partitions:
                error = int(ErrorCode.unknown_topic_or_partition)
            else:
                error = leader_epoch_error(
                    getattr(part, "current_leader_epoch", -1),
                    broker.leader_epoch(topic.topic_id, part.partition),
                )
            if error or topic is None:
                slots.append(FetchSlot(key, part.partition, error, -1))
                continue
            log = logs.route(
                topic.topic_id,
                part.partition,
                Purpose.READ,
                part.fetch_offset,
                replica_id=replica_id,
            )
            slot = log.open_read(key, topic, part, plan)
            slots.append(slot)
            redirected = redirected or slot.preferred >= 0
    max_bytes = min(getattr(request, "max_bytes", 2**31 - 1), broker.config.fetch_max_bytes)
    max_wait = request.max_wait.total_seconds()
    # A redirect is answered at once: the consumer should not long-poll the wrong AZ.
    min_bytes = 0 if redirected else request.min_bytes
    az = rack or az_from_client_id(ctx.header.client_id)
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    return asyncio.ensure_future(
        _fetch(
            logs,
            broker,
            ctx,
            slots,
            finds,
            max_bytes,
            min_bytes,
            max_wait,
            by_id,
            az,
            read_committed,
        )
    )


def _replica_id(request: Any) -> int:
    """The follower's broker id of a replication fetch (-1: a consumer): ``replica_id`` up
    to v14, ``replica_state`` from v15 (KIP-903)."""
    state = getattr(request, "replica_state", None)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(request, "replica_id", -1))


async def _collect(
    broker: Broker,
    slots: list[FetchSlot],
    finds: list[FindRequest],
    max_bytes: int,
    min_bytes: int,
    max_wait: float,
    read_committed: bool,
) -> tuple[list[FindResult], list[RecordChunks | None]]:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait
    local = [s for s in slots if s.classic is not None and s.preferred < 0]
    # Offsets below a tiered partition's local log: read once from the remote segments
    # (there is always data there, so no waiting on them), first in the answer's budget.
    after_tiered = FetchBudget(max_bytes)
    tiered = await read_tiered(broker, local, after_tiered, read_committed) if local else 0
    while True:
        budget = after_tiered.copy()
        results = await broker.fetcher.find(finds, budget.left, read_committed) if finds else []
        # Then the other partitions in the request's order (the client rotates it), sharing
        # what is left: diskless ones as found, classic ones read from the local log.
        available = tiered
        for slot in slots:
            if slot.find_index >= 0:
                result = budget.keep(results[slot.find_index], finds[slot.find_index].max_bytes)
                results[slot.find_index] = result
                available += sum(b.byte_size for b in result.batches)
            elif slot.classic is not None and slot.preferred < 0:
                available += read_classic(broker, slot, budget, read_committed)
        remaining = deadline - loop.time()
        if (
            available >= max(min_bytes, 1)
            or remaining <= 0
            or any(r.error for r in results)
            or any(s.error for s in slots)
            or not (finds or local)
        ):
            epochs = [broker.leader_epoch(f.topic_id, f.partition) for f in finds]
            return results, await broker.fetcher.read(results, epochs)
        poll = broker.remote_poll_seconds if finds else None
        await broker.watch.wait(
            [(f.topic_id, f.partition, f.offset) for f in finds] + classic_interests(local),
            remaining if poll is None else min(remaining, poll),
        )


async def _fetch(
    logs: LogRouter,
    broker: Broker,
    ctx: RequestContext,
    slots: list[FetchSlot],
    finds: list[FindRequest],
    max_bytes: int,
    min_bytes: int,
    max_wait: float,
    by_id: bool,
    az: str | None = None,
    read_committed: bool = False,
) -> Any:
    try:
        results, records = await _collect(
            broker, slots, finds, max_bytes, min_bytes, max_wait, read_committed
        )
    except (CoordinatorUnavailable, ObjectStoreError) as exc:
        # Retriable for consumers: they back off and fetch again.
        log.warning("fetch failed: %s", exc)
        results = [FindResult(int(ErrorCode.kafka_storage_error))] * len(finds)
        records = [None] * len(finds)
    classic_read = [s.data for s in slots if s.classic is not None and s.replica < 0 and s.data]
    if classic_read:
        METRICS.fetched_bytes.inc(sum(len(d) for d in classic_read))
    count_fetch(broker, az, [*records, *classic_read] if classic_read else records)
    throttle_ms = 0
    quota = broker.quotas.fetch
    if quota.enabled():
        user, client_id = user_of(ctx.principal), ctx.header.client_id or ""
        # Classic partitions' bytes count too; a follower's replication fetch does not (as
        # in Kafka, client quotas do not apply to replication).
        consumed = [s for s in slots if s.classic is not None and s.replica < 0]
        size = sum(len(r) for r in records if r is not None) + sum(len(s.data) for s in consumed)
        throttle_ms = quota.record(user, client_id, size)
        if throttle_ms:
            # As Kafka: a throttled fetch is answered without records, and they are not
            # counted; the consumer asks again once its throttle time has passed.
            quota.unrecord(user, client_id, size)
            records = [None] * len(records)
            for s in consumed:
                s.data = b""
    # Redirected partitions carry no records but, as in Kafka, their offsets: one lookup for
    # all of them (a consumer is redirected once per partition, then fetches elsewhere).
    redirected = [slot for slot in slots if slot.log is not None]
    infos: dict[int, LogInfo] = {}
    if redirected:
        try:
            found = await broker.coordinator.log_info([s.log for s in redirected if s.log])
            infos = {id(s): info for s, info in zip(redirected, found, strict=True)}
        except CoordinatorUnavailable as exc:
            log.warning("offsets of redirected partitions unavailable: %s", exc)
    topics: dict[Any, list[dict[str, Any]]] = {}
    for slot in slots:
        entry: dict[str, Any] = {
            "partition_index": slot.partition,
            "error_code": slot.error,
            "high_watermark": -1,
            "last_stable_offset": -1,
            "log_start_offset": -1,
            "aborted_transactions": None,
            "preferred_read_replica": slot.preferred,
            "records": b"",
        }
        if (info := infos.get(id(slot))) is not None and not info.error:
            entry.update(
                high_watermark=info.high_watermark,
                last_stable_offset=info.high_watermark,
                log_start_offset=info.log_start_offset,
            )
        if slot.classic is not None:
            entry.update(classic_entry(slot, read_committed))
        elif slot.find_index >= 0:
            result = results[slot.find_index]
            data = records[slot.find_index]
            # A migrated partition's log starts in its sealed classic log, if any.
            f = finds[slot.find_index]
            start = logs.log_start(f.topic_id, f.partition, result.log_start_offset)
            entry.update(
                error_code=result.error,
                high_watermark=result.high_watermark,
                last_stable_offset=result.last_stable_offset,
                log_start_offset=start,
                records=data if data is not None else b"",
            )
            if result.aborted is not None:
                entry["aborted_transactions"] = [
                    {"producer_id": a.producer_id, "first_offset": a.first_offset}
                    for a in result.aborted
                ]
        topics.setdefault(slot.topic_key, []).append(entry)
    key_field = "topic_id" if by_id else "topic"
    return ctx.respond(
        {
            "throttle_time": throttle_ms,
            "error_code": 0,
            "session_id": 0,  # no fetch sessions: clients keep sending full requests
            "responses": [{key_field: key, "partitions": parts} for key, parts in topics.items()],
        }
    )
