"""JoinGroup, SyncGroup, Heartbeat, LeaveGroup: the classic group protocol.

The state machine is :mod:`broker.groups.group_coordinator`; these handlers translate
between its results and each API version's fields. JoinGroup and SyncGroup may answer
with a future (the rebalance is still in progress). Requests for a KIP-848 consumer group
with members (classic members of an upgraded or mixed group) go to its coordinator,
:mod:`broker.groups.consumer_coordinator`, as Kafka serves them.
"""

from __future__ import annotations

import asyncio
import datetime
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.groups.consumer_classic_members import ClassicJoin
from broker.groups.group import JoinResult, SyncResult
from broker.groups.group_coordinator import LeavingMember
from broker.groups.topic_lookup import BrokerTopics
from broker.security import access
from broker.server.deferred import answer_when_done
from common.acl import AclOperation

if TYPE_CHECKING:
    from broker.groups.service import GroupsView
    from broker.security.request_context import RequestContext

_MS = datetime.timedelta(milliseconds=1)


def millis(value: datetime.timedelta) -> int:
    return value // _MS


def client_host(ctx: RequestContext) -> str:
    # Kafka shows the client's address the way Java prints an InetAddress.
    return "/" + ctx.client_host


async def join_group(broker: GroupsView, ctx: RequestContext, request: Any) -> Any:
    if refusal := access.group_refusal(broker, ctx, AclOperation.READ, request.group_id):
        return refusal
    version = ctx.header.api_version
    session_ms = millis(request.session_timeout)
    # v0 has no rebalance timeout: the session timeout served as both.
    rebalance_ms = millis(request.rebalance_timeout) if version >= 1 else session_ms
    coordinator = broker.groups.coordinator
    consumer = broker.groups.consumer
    loaded = await coordinator.load(request.group_id)
    if loaded is None and await coordinator.is_share_group(request.group_id):
        # Kafka's answer to a classic member joining a share group's id.
        loaded = ErrorCode.inconsistent_group_protocol
    protocols = [(p.name, p.metadata) for p in request.protocols]
    if loaded is None and consumer.serves_classic(request.group_id):
        ask = ClassicJoin(
            request.member_id,
            getattr(request, "group_instance_id", None),
            ctx.header.client_id or "",
            client_host(ctx),
            rebalance_ms,
            session_ms,
            request.protocol_type,
            tuple(protocols),
            require_known_member_id=version >= 4,
        )
        joined = asyncio.ensure_future(
            consumer.classic_join(request.group_id, ask, BrokerTopics(broker, ctx))
        )
        return answer_when_done(joined, lambda result: _join_response(ctx, version, result))
    future = (
        coordinator.join_group(
            request.group_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            ctx.header.client_id or "",
            client_host(ctx),
            rebalance_ms,
            session_ms,
            request.protocol_type,
            protocols,
            require_known_member_id=version >= 4,
            skips_assignment=version >= 9,
        )
        if loaded is None
        else coordinator.failed(JoinResult.failed(loaded, request.member_id))
    )

    return answer_when_done(future, lambda result: _join_response(ctx, version, result))


def _join_response(ctx: RequestContext, version: int, result: JoinResult) -> Any:
    name = result.protocol_name
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": result.error,
            "generation_id": result.generation_id,
            "protocol_type": result.protocol_type,
            # Nullable from v7 on; before, "no protocol" is the empty string.
            "protocol_name": name if name is not None or version >= 7 else "",
            "leader": result.leader,
            "skip_assignment": result.skip_assignment,
            "member_id": result.member_id,
            "members": [
                {
                    "member_id": m.member_id,
                    "group_instance_id": m.group_instance_id,
                    "metadata": m.metadata,
                }
                for m in result.members
            ],
        }
    )


async def sync_group(broker: GroupsView, ctx: RequestContext, request: Any) -> Any:
    if refusal := access.group_refusal(broker, ctx, AclOperation.READ, request.group_id):
        return refusal
    coordinator = broker.groups.coordinator
    consumer = broker.groups.consumer
    loaded = await coordinator.load(request.group_id)
    instance_id = getattr(request, "group_instance_id", None)
    protocol_type = getattr(request, "protocol_type", None)
    protocol_name = getattr(request, "protocol_name", None)
    if loaded is not None:
        future = coordinator.failed(SyncResult.failed(loaded))
    elif consumer.serves_classic(request.group_id):
        # Answered at once: the coordinator assigned at the JoinGroup.
        future = coordinator.failed(
            consumer.classic_sync(
                request.group_id,
                request.member_id,
                instance_id,
                request.generation_id,
                protocol_type,
                protocol_name,
            )
        )
    else:
        future = coordinator.sync_group(
            request.group_id,
            request.generation_id,
            request.member_id,
            instance_id,
            protocol_type,
            protocol_name,
            {a.member_id: a.assignment for a in request.assignments},
        )

    def respond(result: SyncResult) -> Any:
        return ctx.respond(
            {
                "throttle_time": 0,
                "error_code": result.error,
                "protocol_type": result.protocol_type,
                "protocol_name": result.protocol_name,
                "assignment": result.assignment,
            }
        )

    return answer_when_done(future, respond)


async def heartbeat(broker: GroupsView, ctx: RequestContext, request: Any) -> Any:
    if refusal := access.group_refusal(broker, ctx, AclOperation.READ, request.group_id):
        return refusal
    coordinator = broker.groups.coordinator
    consumer = broker.groups.consumer
    instance_id = getattr(request, "group_instance_id", None)
    error = await coordinator.load(request.group_id)
    if error is None and consumer.serves_classic(request.group_id):
        error = consumer.classic_heartbeat(
            request.group_id, request.member_id, instance_id, request.generation_id
        )
    elif error is None:
        error = coordinator.heartbeat(
            request.group_id, request.member_id, instance_id, request.generation_id
        )
    return ctx.respond({"throttle_time": 0, "error_code": int(error)})


async def leave_group(broker: GroupsView, ctx: RequestContext, request: Any) -> Any:
    if refusal := access.group_refusal(broker, ctx, AclOperation.READ, request.group_id):
        return refusal
    version = ctx.header.api_version
    if version >= 3:
        leaving = [LeavingMember(m.member_id, m.group_instance_id) for m in request.members]
    else:
        leaving = [LeavingMember(request.member_id, None)]
    coordinator = broker.groups.coordinator
    consumer = broker.groups.consumer
    loaded = await coordinator.load(request.group_id)
    if loaded is not None:
        error, member_errors = loaded, []
    elif consumer.serves_classic(request.group_id):
        error = ErrorCode.none
        member_errors = await consumer.classic_leave(
            request.group_id, [(who.member_id, who.group_instance_id) for who in leaving]
        )
    else:
        error, member_errors = coordinator.leave_group(request.group_id, leaving)
    if version < 3:
        # One member, and only the request's error code to say how it went.
        if not error and member_errors:
            error = member_errors[0]
        return ctx.respond({"throttle_time": 0, "error_code": int(error)})
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": int(error),
            "members": [
                {
                    "member_id": who.member_id,
                    "group_instance_id": who.group_instance_id,
                    "error_code": int(member_error),
                }
                # No member entries when the whole request failed (NOT_COORDINATOR...).
                for who, member_error in zip(leaving, member_errors, strict=False)
            ],
        }
    )
