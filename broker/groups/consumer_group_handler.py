"""ConsumerGroupHeartbeat (API 68) and ConsumerGroupDescribe (API 69): the KIP-848
consumer group protocol (``group.protocol=consumer``), v0-v1 as Kafka 4 serves them.

The coordinator is :mod:`broker.groups.consumer_coordinator`; these handlers translate
between the wire and it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.groups.assignors import Partitions
from broker.groups.consumer_group import ConsumerGroup, ConsumerMember
from broker.groups.consumer_group_heartbeat import HeartbeatRequest
from broker.groups.group_membership import client_host, millis
from broker.groups.topic_lookup import BrokerTopics
from broker.security import access
from common.acl import AclOperation

if TYPE_CHECKING:
    from broker.groups.service import GroupsView
    from broker.security.request_context import RequestContext

# ConsumerGroupDescribe v1's member type: 0 classic (a member using the classic protocol
# in a consumer group), 1 consumer.
CLASSIC_MEMBER_TYPE = 0
CONSUMER_MEMBER_TYPE = 1


async def consumer_group_heartbeat(broker: GroupsView, ctx: RequestContext, request: Any) -> Any:
    if refusal := access.group_refusal(broker, ctx, AclOperation.READ, request.group_id):
        return refusal
    owned = (
        None
        if request.topic_partitions is None
        else {tp.topic_id: frozenset(tp.partitions) for tp in request.topic_partitions}
    )
    names = request.subscribed_topic_names
    ask = HeartbeatRequest(
        group_id=request.group_id,
        member_id=request.member_id,
        member_epoch=request.member_epoch,
        instance_id=request.instance_id,
        rack_id=request.rack_id,
        rebalance_timeout_ms=millis(request.rebalance_timeout),
        subscribed_topic_names=None if names is None else tuple(names),
        # v1+ (KIP-848 regular expressions): v0 has no such field.
        subscribed_topic_regex=getattr(request, "subscribed_topic_regex", None),
        server_assignor=request.server_assignor,
        owned=owned,
        client_id=ctx.header.client_id or "",
        client_host=client_host(ctx),
    )
    consumer = broker.groups.consumer
    result = await consumer.heartbeat(ask, ctx.header.api_version, BrokerTopics(broker, ctx))
    ok = result.error == ErrorCode.none
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": int(result.error),
            "error_message": result.message,
            "member_id": result.member_id if ok else None,
            "member_epoch": result.member_epoch if ok else 0,
            # None after a leave (epoch < 0) either, as Kafka answers.
            "heartbeat_interval": (
                consumer.heartbeat_interval_ms(request.group_id)
                if ok and result.member_epoch >= 0
                else 0
            ),
            "assignment": (
                None
                if result.assignment is None
                else {
                    "topic_partitions": [
                        {"topic_id": topic_id, "partitions": sorted(partitions)}
                        for topic_id, partitions in sorted(
                            result.assignment.items(), key=lambda item: str(item[0])
                        )
                    ]
                }
            ),
        }
    )


def _assignment(broker: GroupsView, partitions: Partitions) -> dict[str, Any]:
    out = []
    for topic_id, ps in sorted(partitions.items(), key=lambda item: str(item[0])):
        topic = broker.topics.get_by_id(topic_id)
        if topic is not None:  # else deleted a moment ago
            out.append({"topic_id": topic_id, "topic_name": topic.name, "partitions": sorted(ps)})
    return {"topic_partitions": out}


def _member(broker: GroupsView, group: ConsumerGroup, member: ConsumerMember) -> dict[str, Any]:
    return {
        "member_id": member.member_id,
        "instance_id": member.instance_id,
        "rack_id": member.rack_id,
        "member_epoch": member.epoch,
        "client_id": member.client_id,
        "client_host": member.client_host,
        "subscribed_topic_names": list(member.subscribed_topic_names),
        # Kafka shows "" for a member without one.
        "subscribed_topic_regex": member.subscribed_topic_regex or "",
        "assignment": _assignment(broker, member.current.assigned),
        "target_assignment": _assignment(broker, group.target.get(member.member_id, {})),
        "member_type": (
            CLASSIC_MEMBER_TYPE if member.uses_classic_protocol else CONSUMER_MEMBER_TYPE
        ),
    }


def _error_entry(group_id: str, error: ErrorCode, message: str | None) -> dict[str, Any]:
    return {
        "error_code": int(error),
        "error_message": message,
        "group_id": group_id,
        "group_state": "",
        "group_epoch": 0,
        "assignment_epoch": 0,
        "assignor_name": "",
        "members": [],
    }


async def consumer_group_describe(broker: GroupsView, ctx: RequestContext, request: Any) -> Any:
    with_operations = bool(request.include_authorized_operations)
    consumer = broker.groups.consumer
    coordinator = broker.groups.coordinator
    entries = []
    for group_id in request.group_ids:
        if not access.group(broker, ctx, AclOperation.DESCRIBE, group_id):
            entry = _error_entry(group_id, ErrorCode.group_authorization_failed, None)
        elif not coordinator.owns(group_id):
            entry = _error_entry(group_id, ErrorCode.not_coordinator, None)
        elif loaded := await coordinator.load(group_id):
            entry = _error_entry(group_id, loaded, None)
        elif (group := consumer.groups.get(group_id)) is None:
            message = (
                f"Group {group_id} is not a consumer group."
                if group_id in coordinator.groups
                else f"Group {group_id} not found."
            )
            entry = _error_entry(group_id, ErrorCode.group_id_not_found, message)
        else:
            entry = {
                "error_code": 0,
                "error_message": None,
                "group_id": group_id,
                "group_state": group.state.value,
                "group_epoch": group.group_epoch,
                "assignment_epoch": group.assignment_epoch,
                "assignor_name": group.preferred_assignor(consumer.default_assignor),
                "members": [_member(broker, group, m) for m in group.members.values()],
            }
        entry["authorized_operations"] = access.operations(
            broker, ctx, "group", group_id, with_operations
        )
        entries.append(entry)
    return ctx.respond({"throttle_time": 0, "groups": entries})
