"""Fetch: long poll until min_bytes are available or max_wait passes, then answer
with patched record bytes straight from the cache."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.fetch.fetch_sessions import SessionView
from broker.logs.fetch_slots import DENIED_REPLICA, FetchBudget, FetchSlot, leader_epoch_error
from broker.logs.partition_log import Answered, PartitionLog, ReadPlan
from broker.logs.router import Purpose, RoutedView
from broker.metadata.client_az import az_from_client_id
from broker.metadata.transformer import preferred_read_replica, route_without_replicas
from broker.security import access
from broker.security.principal import user_of
from broker.server.handler_helpers import fetch_replica_id
from broker.server.metrics import METRICS
from common.acl import AclOperation
from protocol.fetch_response import encode_fetch_response
from storage.coordinator import CoordinatorUnavailable, FindResult
from storage.objects import ObjectStoreError
from storage.outage import OutageLog

if TYPE_CHECKING:
    from broker.fetch.fetch_sessions import FetchSessionCache
    from broker.logs.fetch_slots import CommitWatch
    from broker.metadata.client_az import ClientBytes
    from broker.security.request_context import RequestContext
    from broker.server.client_quotas import ClientQuotas
    from storage.catalog import Topic


class FetchView(RoutedView, Protocol):
    @property
    def quotas(self) -> ClientQuotas: ...

    @property
    def watch(self) -> CommitWatch: ...  # long polls wait on it

    @property
    def remote_poll_seconds(self) -> float | None: ...

    @property
    def fetch_sessions(self) -> FetchSessionCache: ...  # KIP-227

    @property
    def client_bytes(self) -> ClientBytes: ...  # the answer's record bytes, by client AZ


log = logging.getLogger(__name__)
# Fetches fail while the object store or the coordinator is down: one WARNING when that
# starts, one INFO when a fetch works again (storage.outage), not a line per fetch.
_OUTAGE = OutageLog("diskless fetch", log)

TOPIC_IDS_VERSION = 13
READ_COMMITTED = 1


def _preferred_finder(broker: FetchView, rack: str | None) -> Callable[[Topic, int], int] | None:
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
        # Only where Metadata sends AZ-aware clients to a broker of their AZ (the router's
        # rule), so both paths pick the same broker; the classic engine names its own.
        if topic_image is None or not broker.router.az_routed(topic_image) or state is None:
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


def _may_read(broker: FetchView, ctx: RequestContext, key: Any, topic: Topic | None) -> bool:
    """READ on the topic. A topic asked for by an id this broker does not know has no name
    to check: it answers UNKNOWN_TOPIC_ID, as Kafka does."""
    name = key if isinstance(key, str) else topic.name if topic is not None else None
    return name is None or access.topic(broker, ctx, AclOperation.READ, name)


async def handle(broker: FetchView, ctx: RequestContext, request: Any) -> Any:
    by_id = ctx.header.api_version >= TOPIC_IDS_VERSION
    # KIP-227: the partitions to read are the request's, or its fetch session's.
    replica_id = fetch_replica_id(request)
    session = broker.fetch_sessions.open(request, by_id, replica=replica_id >= 0)
    if session.error:
        return encode_fetch_response(ctx.header.api_version, [], error_code=session.error)
    slots: list[FetchSlot] = []
    readers: list[PartitionLog] = []  # the log that opened each slot, and reads it
    # ensure() re-reads the catalog for a topic or partition this broker does not know
    # yet; the topics looked up to decide serve the request unless it ran.
    topics = broker.topics
    known: dict[Any, Topic | None] = {}
    for asked in session.topics:
        key = asked.topic_id if by_id else asked.topic
        found = known[key] = topics.get_by_id(key) if by_id else topics.get(key)
        if found is None or any(not 0 <= p.partition < found.partitions for p in asked.partitions):
            await topics.ensure(
                (t.topic_id if by_id else t.topic, part.partition)
                for t in session.topics
                for part in t.partitions
            )
            known = {}
            break
    rack = getattr(request, "rack_id", None) or None
    prefer = _preferred_finder(broker, rack)
    redirected = False
    logs = broker.router
    if (
        replica_id >= 0
        and access.enabled(broker)
        and not access.cluster(broker, ctx, AclOperation.CLUSTER_ACTION)
    ):
        # Replication is a broker's privilege (Kafka: CLUSTER_ACTION on the cluster).
        replica_id = DENIED_REPLICA
    plan = ReadPlan(
        replica_id, ctx.header.api_version, rack, prefer, logs.log_start, logs.consumer_read
    )
    for fetch_topic in session.topics:
        if by_id:
            key = fetch_topic.topic_id
            topic = known[key] if key in known else topics.get_by_id(key)
            missing = ErrorCode.unknown_topic_id
        else:
            key = fetch_topic.topic
            topic = known[key] if key in known else topics.get(key)
            missing = ErrorCode.unknown_topic_or_partition
        denied = access.enabled(broker) and not _may_read(broker, ctx, key, topic)
        for part in fetch_topic.partitions:
            error, epoch = 0, -1
            in_handler = True  # where Kafka refuses it (see Answered)
            if denied:
                error = int(ErrorCode.topic_authorization_failed)
            elif topic is None:
                error = int(missing)
            elif not 0 <= part.partition < topic.partitions:
                error = int(ErrorCode.unknown_topic_or_partition)
            else:
                epoch = broker.leader_epoch(topic.topic_id, part.partition)
                error = leader_epoch_error(getattr(part, "current_leader_epoch", -1), epoch)
                in_handler = False  # Kafka's partition checks the leader epoch
            if error or topic is None:
                refused = Answered(error, by_request_handler=in_handler)
                slots.append(refused.open_read(key, topic, part, plan))
                readers.append(refused)
                continue
            last_fetched = int(getattr(part, "last_fetched_epoch", -1))
            if replica_id < 0 and last_fetched > epoch:
                # A consumer's last fetched epoch newer than any this partition has had:
                # Kafka's log finds no end offset for it and answers OFFSET_OUT_OF_RANGE.
                # (An older epoch cannot have diverged here: consumers read only up to the
                # high watermark and no unclean leader election truncates below it.)
                refused = Answered(int(ErrorCode.offset_out_of_range), by_request_handler=False)
                slots.append(refused.open_read(key, topic, part, plan))
                readers.append(refused)
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
            readers.append(log)
            redirected = redirected or slot.preferred >= 0
    max_bytes = min(getattr(request, "max_bytes", 2**31 - 1), broker.config.fetch_max_bytes)
    max_wait = request.max_wait.total_seconds()
    # A redirect is answered at once: the consumer should not long-poll the wrong AZ.
    min_bytes = 0 if redirected else request.min_bytes
    az = rack or az_from_client_id(ctx.header.client_id)
    read_committed = getattr(request, "isolation_level", 0) == READ_COMMITTED
    return asyncio.ensure_future(
        _fetch(
            broker,
            ctx,
            slots,
            readers,
            plan,
            max_bytes,
            min_bytes,
            max_wait,
            by_id,
            az,
            read_committed,
            session,
        )
    )


def _by_reader(
    slots: list[FetchSlot], readers: list[PartitionLog]
) -> list[tuple[PartitionLog, list[FetchSlot]]]:
    """The slots grouped by the log reading them, in first-seen order."""
    groups: dict[int, tuple[PartitionLog, list[FetchSlot]]] = {}
    last: PartitionLog | None = None
    group: list[FetchSlot] = []
    for slot, reader in zip(slots, readers, strict=True):
        # Runs of one log are the rule (a topic's partitions): no lookup for them.
        if reader is not last:
            found = groups.get(id(reader))
            if found is None:
                found = groups[id(reader)] = (reader, [])
            last, group = reader, found[1]
        group.append(slot)
    return list(groups.values())


async def _collect(
    broker: FetchView,
    slots: list[FetchSlot],
    readers: list[PartitionLog],
    groups: list[tuple[PartitionLog, list[FetchSlot]]],
    plan: ReadPlan,
    max_bytes: int,
    min_bytes: int,
    max_wait: float,
    read_committed: bool,
) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait
    # What no round reads again (a classic log's tiered part: always there, so no
    # waiting on it), first in the answer's budget.
    after_below = FetchBudget(max_bytes)
    below = 0
    for reader, group in groups:
        below += await reader.read_below(group, after_below, read_committed)
    while True:
        budget = after_below.copy()
        for reader, group in groups:
            await reader.start_round(group, budget, plan, read_committed)
        # Then every partition in the request's order (the client rotates it), sharing
        # what is left.
        available = below
        for slot, reader in zip(slots, readers, strict=True):
            available += reader.read_round(slot, budget, plan, read_committed)
        remaining = deadline - loop.time()
        answered = (
            available >= max(min_bytes, 1)
            or remaining <= 0
            or any(r.error for r in plan.results)
            or any(s.error for s in slots)
        )
        # What the long poll would wait on, asked only when it waits (no await since the
        # reads: the logs answer for the same image).
        interests: list[tuple[UUID, int, int]] = []
        if not answered:
            for slot, reader in zip(slots, readers, strict=True):
                interests += reader.interests(slot, plan)
        if answered or not interests:
            for reader, group in groups:
                await reader.end_reads(group, plan)
            return
        poll = broker.remote_poll_seconds if plan.finds else None
        await broker.watch.wait(interests, remaining if poll is None else min(remaining, poll))


async def _fetch(
    broker: FetchView,
    ctx: RequestContext,
    slots: list[FetchSlot],
    readers: list[PartitionLog],
    plan: ReadPlan,
    max_bytes: int,
    min_bytes: int,
    max_wait: float,
    by_id: bool,
    az: str | None = None,
    read_committed: bool = False,
    session: SessionView | None = None,
) -> Any:
    started = time.monotonic()
    groups = _by_reader(slots, readers)
    try:
        await _collect(
            broker, slots, readers, groups, plan, max_bytes, min_bytes, max_wait, read_committed
        )
    except (CoordinatorUnavailable, ObjectStoreError) as exc:
        # Retriable for consumers: they back off and fetch again.
        _OUTAGE.failed(exc, started)
        plan.results = [FindResult(int(ErrorCode.kafka_storage_error))] * len(plan.finds)
        plan.records = [None] * len(plan.finds)
    else:
        if plan.finds:
            _OUTAGE.succeeded(started)
    # Bytes read into slots from logs on this broker (classic replicas) by consumers: the
    # diskless ones are counted by the fetcher; a follower's replication fetch is not
    # consumption.
    local_read = [s.data for s in slots if s.replica < 0 and s.data]
    if local_read:
        METRICS.fetched_bytes.inc(sum(len(d) for d in local_read))
    records = plan.records
    broker.client_bytes.count_fetch(az, [*records, *local_read] if local_read else records)
    throttle_ms = 0
    quota = broker.quotas.fetch
    if quota.enabled():
        user, client_id = user_of(ctx.principal), ctx.header.client_id or ""
        # Classic partitions' bytes count too; a follower's replication fetch does not (as
        # in Kafka, client quotas do not apply to replication).
        consumed = [s for s in slots if s.replica < 0 and s.data]
        size = sum(len(r) for r in records if r is not None) + sum(len(s.data) for s in consumed)
        throttle_ms = quota.record(user, client_id, size)
        if throttle_ms:
            # As Kafka: a throttled fetch is answered without records, and they are not
            # counted; the consumer asks again once its throttle time has passed.
            quota.unrecord(user, client_id, size)
            plan.records = [None] * len(records)
            for s in consumed:
                s.data = b""
    for reader, group in groups:
        await reader.describe(group, plan)
    topics: dict[Any, list[dict[str, Any]]] = {}
    for slot, reader in zip(slots, readers, strict=True):
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
        entry.update(reader.entry(slot, plan, read_committed))
        if isinstance(reader, Answered) and reader.by_request_handler:
            entry["aborted_transactions"] = []  # Kafka's FetchResponse.partitionResponse
        elif entry["error_code"] and slot.replica < 0:
            # Kafka's log layer answers an error with unknown offsets (its LogReadResult
            # for an exception). Followers still get the real ones: Sluice's replica
            # fetcher restarts from the leader's log start after OFFSET_OUT_OF_RANGE.
            entry.update(high_watermark=-1, last_stable_offset=-1, log_start_offset=-1)
        elif entry["records"]:
            # Bytes out as Kafka counts them: what consumers get, per topic; what followers
            # get apart (replication bytes out, all topics).
            if slot.replica < 0:
                METRICS.topics.fetched(slot.topic_key, len(entry["records"]))
            else:
                METRICS.topics.replicated_out(len(entry["records"]))
        if session is not None and not session.include(slot.topic_key, entry):
            continue  # an incremental fetch: nothing new about this partition
        topics.setdefault(slot.topic_key, []).append(entry)
    return encode_fetch_response(
        ctx.header.api_version,
        list(topics.items()),
        throttle_ms,
        0,
        session.session_id if session is not None else 0,
    )
