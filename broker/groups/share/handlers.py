"""ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch and ShareAcknowledge (KIP-932)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.groups.share.group_configs import BY_DURATION, ShareSettings, duration_ms
from broker.groups.share.group_configs import EARLIEST as EARLIEST_RESET
from broker.groups.share.membership import ASSIGNOR_NAME, DEAD
from broker.groups.share.partition_state import (
    Acquired,
    InvalidRecordState,
    Limits,
    SharePartitionState,
)
from broker.groups.share.partitions import ShareConflict
from broker.groups.share.reader import ReadAsk, ReadResult, read
from broker.groups.share.sessions import FINAL_EPOCH, INITIAL_EPOCH
from broker.groups.store_errors import store_error
from broker.logs.partition_log import OffsetAsk
from broker.logs.router import Purpose
from broker.security import access
from common.acl import AclOperation
from storage.coordinator import CoordinatorUnavailable
from storage.share_groups import ShareKey

if TYPE_CHECKING:
    from broker.groups.share.service import ShareView
    from broker.security.request_context import RequestContext
    from storage.catalog import Topic

LATEST = -1
EARLIEST = -2
RECORD_LIMIT = 1  # ShareFetch v2's ShareAcquireMode
# How long a share fetch waiting for records sleeps at most before looking again (locks
# running out and other brokers' changes wake nobody).
POLL_S = 0.25


def _client_host(ctx: RequestContext) -> str:
    return "/" + ctx.client_host


# ------------------------------------------------------------------ membership


async def heartbeat(broker: ShareView, ctx: RequestContext, request: Any) -> Any:
    if refusal := access.group_refusal(broker, ctx, AclOperation.READ, request.group_id):
        return refusal
    share = broker.share
    group_id = request.group_id
    chosen = broker.groups.coordinator.coordinator_of(group_id)  # type: ignore[attr-defined]
    if chosen is None or chosen.node_id != broker.config.node_id:
        share.held.drop(group_id)
        return ctx.respond(_heartbeat_error(ErrorCode.not_coordinator))
    subscribed = request.subscribed_topic_names
    if subscribed:
        await broker.topics.ensure((name, None) for name in subscribed)
    settings = await share.configs.settings(group_id)
    if group_id and (error := await share.load(group_id)):
        return ctx.respond(_heartbeat_error(error))
    # A new share group: not under a consumer or classic group's id (Kafka's answer).
    if (
        group_id
        and group_id not in share.groups.groups
        and request.member_epoch == 0
        and (error := await _not_a_share_group(broker, group_id))
    ):
        message = None
        if error == ErrorCode.group_id_not_found:
            message = f"Group {group_id} is not a share group."
        return ctx.respond(_heartbeat_error(error, message))
    result = share.groups.heartbeat(
        request.group_id,
        request.member_id,
        request.member_epoch,
        request.rack_id,
        list(subscribed) if subscribed is not None else None,
        ctx.header.client_id or "",
        _client_host(ctx),
        share.clock_ms(),
        settings.session_timeout_ms,
        settings.assignment_interval_ms,
    )
    if result.error:
        return ctx.respond(_heartbeat_error(result.error, result.message))
    if error := await share.held.store(group_id):
        return ctx.respond(_heartbeat_error(error, "Storing the group failed."))
    assignment = None
    if result.assignment is not None:
        assignment = {
            "topic_partitions": [
                {"topic_id": t, "partitions": p} for t, p in sorted(result.assignment.items())
            ]
        }
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": 0,
            "error_message": None,
            "member_id": result.member_id,
            "member_epoch": result.member_epoch,
            # 0 after a leave (epoch -1), as Kafka answers.
            "heartbeat_interval": settings.heartbeat_interval_ms if result.member_epoch >= 0 else 0,
            "assignment": assignment,
        }
    )


async def _not_a_share_group(broker: ShareView, group_id: str) -> int:
    """GROUP_ID_NOT_FOUND when ``group_id`` is a classic or consumer group's (with members,
    or committed offsets only), as Kafka answers; 0 when it is free."""
    coordinator = broker.groups.coordinator  # type: ignore[attr-defined]
    if loaded := await coordinator.load(group_id):
        return int(loaded)  # its snapshot could not be read
    if group_id in coordinator.groups or group_id in coordinator.consumer_groups:
        return int(ErrorCode.group_id_not_found)
    try:
        with_offsets = await broker.groups.store.groups_with_offsets([group_id])  # type: ignore[attr-defined]
    except Exception as exc:
        return int(store_error(exc, f"looking up group {group_id}"))
    return int(ErrorCode.group_id_not_found) if with_offsets else 0


def _heartbeat_error(error: int, message: str | None = None) -> dict[str, Any]:
    return {
        "throttle_time": 0,
        "error_code": int(error),
        "error_message": message,
        "member_id": None,
        "member_epoch": -1,
        "heartbeat_interval": 0,
        "assignment": None,
    }


async def describe(broker: ShareView, ctx: RequestContext, request: Any) -> Any:
    share = broker.share
    stored = set(await share.store.groups())
    out = []
    for group_id in request.group_ids:
        entry: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "group_id": group_id,
            "group_state": DEAD,
            "group_epoch": -1,
            "assignment_epoch": -1,
            "assignor_name": ASSIGNOR_NAME,
            "members": [],
            "authorized_operations": access.operations(
                broker, ctx, "group", group_id, request.include_authorized_operations
            ),
        }
        out.append(entry)
        if not access.group(broker, ctx, AclOperation.DESCRIBE, group_id):
            entry["error_code"] = int(ErrorCode.group_authorization_failed)
            continue
        chosen = broker.groups.coordinator.coordinator_of(group_id)  # type: ignore[attr-defined]
        if chosen is None or chosen.node_id != broker.config.node_id:
            entry["error_code"] = int(ErrorCode.not_coordinator)
            continue
        if error := await share.load(group_id):
            entry["error_code"] = error
            continue
        group = share.groups.groups.get(group_id)
        if group is None and group_id not in stored:
            entry.update(
                error_code=int(ErrorCode.group_id_not_found),
                error_message=f"Group {group_id} not found.",
            )
            continue
        if group is None:
            entry.update(group_state="Empty", group_epoch=0, assignment_epoch=0)
            continue
        entry.update(
            group_state=group.state,
            group_epoch=group.epoch,
            assignment_epoch=group.assignment_epoch,
        )
        for m in group.members.values():
            entry["members"].append(
                {
                    "member_id": m.member_id,
                    "rack_id": m.rack_id,
                    "member_epoch": m.epoch,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "subscribed_topic_names": list(m.subscribed),
                    "assignment": {
                        "topic_partitions": [
                            {
                                "topic_id": t,
                                "topic_name": _topic_name(broker, t),
                                "partitions": p,
                            }
                            for t, p in sorted(m.assignment.items())
                        ]
                    },
                }
            )
    return ctx.respond({"throttle_time": 0, "groups": out})


def _topic_name(broker: ShareView, topic_id: Any) -> str:
    topic = broker.topics.get_by_id(topic_id)
    return topic.name if topic is not None else ""


# ------------------------------------------------------------------ records


class _Asked:
    """One partition a ShareFetch or ShareAcknowledge names, resolved."""

    __slots__ = ("acks", "error", "key", "topic")

    def __init__(self, key: ShareKey, topic: Topic | None, error: int, acks: Sequence[Any]):
        self.key = key
        self.topic = topic
        self.error = error
        self.acks = acks


async def _resolve(broker: ShareView, ctx: RequestContext, topics: Sequence[Any]) -> list[_Asked]:
    wanted = [(t.topic_id, p.partition_index) for t in topics for p in t.partitions]
    if any(broker.topics.get_by_id(tid) is None for tid, _ in wanted):
        await broker.topics.ensure(wanted)
    out = []
    for t in topics:
        topic = broker.topics.get_by_id(t.topic_id)
        for p in t.partitions:
            key = ShareKey(t.topic_id, p.partition_index)
            error = 0
            if topic is None:
                error = int(ErrorCode.unknown_topic_id)
            elif not access.topic(broker, ctx, AclOperation.READ, topic.name):
                error = int(ErrorCode.topic_authorization_failed)
            elif not 0 <= p.partition_index < topic.partitions:
                error = int(ErrorCode.unknown_topic_or_partition)
            out.append(_Asked(key, topic, error, getattr(p, "acknowledgement_batches", ())))
    return out


async def _acknowledge(
    broker: ShareView, group_id: str, member_id: str, asked: Sequence[_Asked], limits: Limits
) -> dict[ShareKey, int]:
    """Apply each partition's acknowledgement batches, all partitions in one write; each
    partition's batches are applied whole or not at all (INVALID_RECORD_STATE)."""
    share = broker.share
    acks = {a.key: a.acks for a in asked if a.acks and not a.error}
    if not acks:
        return {}
    now = share.clock_ms()

    def change(key: ShareKey, state: SharePartitionState | None) -> tuple[Any, int]:
        if state is None:
            return None, int(ErrorCode.invalid_record_state)
        trial = state.copy()
        try:
            for batch in acks[key]:
                trial.acknowledge(
                    member_id,
                    batch.first_offset,
                    batch.last_offset,
                    [int(t) for t in batch.acknowledge_types],
                    now,
                    limits,
                )
        except InvalidRecordState:
            return None, int(ErrorCode.invalid_record_state)
        return trial, 0

    try:
        return await share.partitions.update(group_id, list(acks), change)
    except (ShareConflict, CoordinatorUnavailable):
        return {key: int(ErrorCode.kafka_storage_error) for key in acks}


async def _release(
    broker: ShareView, group_id: str, member_id: str, keys: list[ShareKey], limits: Limits
) -> None:
    share = broker.share

    def change(key: ShareKey, state: SharePartitionState | None) -> tuple[Any, None]:
        if state is None or not state.release_member(member_id, limits):
            return None, None
        return state, None

    if keys:
        await share.partitions.update(group_id, keys, change)


async def _initialize(
    broker: ShareView, group_id: str, asked: Sequence[_Asked], settings: ShareSettings
) -> dict[ShareKey, int]:
    """Share-partitions fetched for the first time start where ``share.auto.offset.reset``
    says: the log end (latest, Kafka's default), its start (earliest), or the first
    record at most that long ago (by_duration:). Returns the errors of those whose log
    could not say (NOT_LEADER_OR_FOLLOWER on a classic partition's follower, ...)."""
    share = broker.share
    keys = [a.key for a in asked]
    states = await share.partitions.peek(group_id, keys)
    reset = settings.auto_offset_reset
    if reset == EARLIEST_RESET:
        timestamp = EARLIEST
    elif reset.startswith(BY_DURATION):
        timestamp = share.clock_ms() - duration_ms(reset[len(BY_DURATION) :])
    else:
        timestamp = LATEST
    starts: dict[ShareKey, int] = {}
    errors: dict[ShareKey, int] = {}
    for a in asked:
        if states[a.key] is not None or a.topic is None:
            continue
        error, offset = await _offset_for(broker, a.key, timestamp, settings.read_committed)
        if error:
            errors[a.key] = error
        else:
            starts[a.key] = offset

    def change(key: ShareKey, state: SharePartitionState | None) -> tuple[Any, None]:
        if state is not None:
            return None, None  # another broker started it first
        return SharePartitionState(starts[key], starts[key]), None

    if starts:
        await share.partitions.update(group_id, list(starts), change)
    return errors


async def _offset_for(
    broker: ShareView, key: ShareKey, timestamp: int, committed: bool
) -> tuple[int, int]:
    """ListOffsets of one partition: (error, offset); a timestamp past every record
    answers the log end."""
    for ask in (timestamp, LATEST) if timestamp >= 0 else (timestamp,):
        log = broker.router.route(
            key.topic_id, key.partition, Purpose.LIST_OFFSETS, ask, read_committed=committed
        )
        [answer] = await log.list_offsets([OffsetAsk(key.topic_id, key.partition, ask)], committed)
        if answer.error:
            return answer.error, -1
        if answer.offset >= 0:
            return 0, answer.offset
    return int(ErrorCode.unknown_server_error), -1


async def _acquire(
    broker: ShareView,
    group_id: str,
    member_id: str,
    asked: list[_Asked],
    max_records: int,
    max_bytes: int,
    max_wait_s: float,
    settings: ShareSettings,
    record_limit: bool = False,
) -> dict[ShareKey, tuple[ReadResult | None, list[Acquired], bytes]]:
    """Read each partition where its next deliverable record is and acquire what it
    holds; wait (up to ``max_wait_s``) while there is nothing."""
    share = broker.share
    limits = settings.limits
    read_committed = settings.read_committed  # share.isolation.level
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max_wait_s
    # Partitions whose start could not be found are answered with the error at once (the
    # client looks for the partition's leader and comes back).
    failed = await _initialize(broker, group_id, asked, settings)
    by_key = {a.key: a for a in asked if a.key not in failed}
    while True:
        now = share.clock_ms()
        states = await share.partitions.peek(group_id, list(by_key))
        asks: list[ReadAsk] = []
        for key, a in by_key.items():
            state = states[key]
            offset = state.fetch_offset(now, limits) if state is not None else None
            # MaxBytes 0 reads and acquires nothing (Kafka's share fetch answers it empty,
            # at MaxWait), unlike a Fetch's first batch that goes out whatever its size.
            if offset is not None and a.topic is not None and max_bytes > 0:
                asks.append(ReadAsk(a.topic, key.partition, offset, max_bytes))
        results: dict[ShareKey, ReadResult] = {}
        interests: list[Any] = []
        if asks:
            read_results, interests = await read(broker, asks, max_bytes, read_committed)
            for ask, result in zip(asks, read_results, strict=True):
                results[ShareKey(ask.topic.topic_id, ask.partition)] = result

        def change(
            key: ShareKey,
            state: SharePartitionState | None,
            results: dict[ShareKey, ReadResult] = results,
            now: int = now,
        ) -> tuple[Any, tuple[list[Acquired], list[int]]]:
            result = results[key]
            if state is None or result.error:
                return None, ([], [])
            before = state.to_json()
            if 0 <= state.start < result.log_start:
                state.move_start(result.log_start)
            batches = [b for b, _, _ in result.batches]
            got, sent = state.acquire(member_id, batches, max_records, now, limits, record_limit)
            # Written only when it changed (a poll finding nothing new writes nothing).
            return (state if got or state.to_json() != before else None), (got, sent)

        acquired = await share.partitions.update(group_id, list(results), change)
        out: dict[ShareKey, tuple[ReadResult | None, list[Acquired], bytes]] = {
            key: (ReadResult(error), [], b"") for key, error in failed.items()
        }
        for key, result in results.items():
            got, sent = acquired.get(key, ([], []))
            data = b"".join(
                result.data[result.batches[i][1] : result.batches[i][1] + result.batches[i][2]]
                for i in sent
            )
            out[key] = (result, got, data)
        remaining = deadline - loop.time()
        if (
            remaining <= 0
            or any(got for _, got, _ in out.values())
            or any(r is not None and r.error for r, _, _ in out.values())
        ):
            return out
        timeout = min(remaining, POLL_S)
        if interests:
            await broker.watch.wait(interests, timeout)  # type: ignore[attr-defined]
        else:
            await asyncio.sleep(timeout)


def _leader(broker: ShareView, a: _Asked) -> dict[str, int]:
    if a.topic is None:
        return {"leader_id": -1, "leader_epoch": -1}
    return {
        "leader_id": broker.leader_for(a.topic, a.key.partition),
        "leader_epoch": broker.leader_epoch(a.key.topic_id, a.key.partition),
    }


def _top_error(ctx: RequestContext, error: int, message: str | None = None) -> Any:
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": int(error),
            "error_message": message,
            "acquisition_lock_timeout": 0,
            "responses": [],
            "node_endpoints": [],
        }
    )


def _node_endpoints(broker: ShareView, ctx: RequestContext, entries: list[Any]) -> list[Any]:
    wanted = {
        e["current_leader"]["leader_id"]
        for e in entries
        if e["error_code"] == ErrorCode.not_leader_or_follower
    }
    return [
        {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
        for b in broker.endpoints_on(ctx.listener)
        if b.node_id in wanted
    ]


async def share_fetch(broker: ShareView, ctx: RequestContext, request: Any) -> Any:
    group_id = request.group_id or ""
    member_id = request.member_id or ""
    if refusal := access.group_refusal(broker, ctx, AclOperation.READ, group_id):
        return refusal
    if not group_id or not member_id:
        return _top_error(ctx, ErrorCode.invalid_request, "GroupId and MemberId are required.")
    share = broker.share
    epoch = request.share_session_epoch
    asked = await _resolve(broker, ctx, request.topics)
    if epoch == INITIAL_EPOCH and any(a.acks for a in asked):
        return _top_error(
            ctx, ErrorCode.invalid_request, "Acknowledgements on a new share session."
        )
    error, session = share.sessions.check(group_id, member_id, epoch)
    if error:
        return _top_error(ctx, error)
    settings = await share.configs.settings(group_id)
    ack_errors = await _acknowledge(broker, group_id, member_id, asked, settings.limits)
    entries: dict[ShareKey, dict[str, Any]] = {}
    by_key = {a.key: a for a in asked}

    def entry(a: _Asked) -> dict[str, Any]:
        found = entries.get(a.key)
        if found is None:
            found = entries[a.key] = {
                "partition_index": a.key.partition,
                "error_code": a.error,
                "error_message": None,
                "acknowledge_error_code": 0,
                "acknowledge_error_message": None,
                "current_leader": _leader(broker, a),
                "records": b"",
                "acquired_records": [],
            }
        return found

    for a in asked:
        if a.error or a.acks:
            entry(a)["acknowledge_error_code"] = ack_errors.get(a.key, a.error if a.acks else 0)
    if epoch == FINAL_EPOCH:
        assert session is not None
        await _release(broker, group_id, member_id, list(session.partitions), settings.limits)
        share.sessions.close(session)
    else:
        if session is None:
            error, session = share.sessions.open(group_id, member_id)
            if error or session is None:
                return _top_error(ctx, error)
        forgotten = [
            ShareKey(t.topic_id, p) for t in request.forgotten_topics_data for p in t.partitions
        ]
        share.sessions.advance(session, [a.key for a in asked if not a.error], forgotten)
        fetching: list[_Asked] = []
        for key in session.partitions:
            a = by_key.get(key)
            if a is None:
                topic = broker.topics.get_by_id(key.topic_id)
                a = _Asked(
                    key, topic, 0 if topic is not None else int(ErrorCode.unknown_topic_id), ()
                )
                by_key[key] = a
            if a.error:
                entry(a)
            else:
                fetching.append(a)
            if epoch == INITIAL_EPOCH:
                entry(a)  # a full answer names every partition of the session
        max_records = max(1, int(getattr(request, "max_records", 500) or 500))
        max_bytes = min(int(request.max_bytes), broker.config.fetch_max_bytes)
        wait_s = max(0, int(request.max_wait.total_seconds() * 1000)) / 1000
        # ShareFetch v2: a request carrying renew acknowledgements only renews (Kafka's
        # IsRenewAck); acquire mode 1 is record-limit.
        renew_only = bool(getattr(request, "is_renew_ack", False))
        record_limit = getattr(request, "share_acquire_mode", 0) == RECORD_LIMIT
        if fetching and not renew_only:
            try:
                got = await _acquire(
                    broker, group_id, member_id, fetching, max_records, max_bytes, wait_s,
                    settings, record_limit,
                )  # fmt: skip
            except (ShareConflict, CoordinatorUnavailable):
                for a in fetching:
                    entry(a)["error_code"] = int(ErrorCode.kafka_storage_error)
                got = {}
            for key, (result, acquired, data) in got.items():
                a = by_key[key]
                if result is not None and result.error:
                    entry(a)["error_code"] = result.error
                elif acquired:
                    e = entry(a)
                    e["records"] = data
                    e["acquired_records"] = [
                        {
                            "first_offset": r.first_offset,
                            "last_offset": r.last_offset,
                            "delivery_count": r.delivery_count,
                        }
                        for r in acquired
                    ]
    topics: dict[Any, list[dict[str, Any]]] = {}
    for key, e in entries.items():
        topics.setdefault(key.topic_id, []).append(e)
    all_entries = list(entries.values())
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": 0,
            "error_message": None,
            "acquisition_lock_timeout": settings.limits.lock_ms,
            "responses": [{"topic_id": t, "partitions": p} for t, p in topics.items()],
            "node_endpoints": _node_endpoints(broker, ctx, all_entries),
        }
    )


async def share_acknowledge(broker: ShareView, ctx: RequestContext, request: Any) -> Any:
    group_id = request.group_id or ""
    member_id = request.member_id or ""
    if refusal := access.group_refusal(broker, ctx, AclOperation.READ, group_id):
        return refusal
    if not group_id or not member_id:
        return _top_error(ctx, ErrorCode.invalid_request, "GroupId and MemberId are required.")
    share = broker.share
    epoch = request.share_session_epoch
    if epoch == INITIAL_EPOCH:
        return _top_error(ctx, ErrorCode.invalid_share_session_epoch)
    error, session = share.sessions.check(group_id, member_id, epoch)
    if error or session is None:
        return _top_error(ctx, error)
    asked = await _resolve(broker, ctx, request.topics)
    settings = await share.configs.settings(group_id)
    ack_errors = await _acknowledge(broker, group_id, member_id, asked, settings.limits)
    if epoch == FINAL_EPOCH:
        await _release(broker, group_id, member_id, list(session.partitions), settings.limits)
        share.sessions.close(session)
    else:
        share.sessions.advance(session, [], [])
    topics: dict[Any, list[dict[str, Any]]] = {}
    entries = []
    for a in asked:
        e = {
            "partition_index": a.key.partition,
            "error_code": a.error or ack_errors.get(a.key, 0),
            "error_message": None,
            "current_leader": _leader(broker, a),
        }
        entries.append(e)
        topics.setdefault(a.key.topic_id, []).append(e)
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": 0,
            "error_message": None,
            "acquisition_lock_timeout": settings.limits.lock_ms,
            "responses": [{"topic_id": t, "partitions": p} for t, p in topics.items()],
            "node_endpoints": _node_endpoints(broker, ctx, entries),
        }
    )
