"""Share groups' admin APIs (``kafka-share-groups.sh``): the share groups in ListGroups,
DescribeShareGroupOffsets, AlterShareGroupOffsets and DeleteShareGroupOffsets. Answered
by the group's coordinator, as Kafka: it knows whether the group has members (altering
or deleting the start offsets of a group with members is refused, GROUP_NOT_EMPTY)."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.groups.share.membership import EMPTY
from broker.groups.share.partition_state import ACKNOWLEDGED, ARCHIVED, SharePartitionState
from broker.groups.share.partitions import ShareConflict
from broker.logs.partition_log import OffsetAsk
from broker.logs.router import Purpose
from broker.security import access
from common.acl import AclOperation
from storage.coordinator import CoordinatorUnavailable
from storage.share_groups import ShareKey

if TYPE_CHECKING:
    from broker.groups.share.service import ShareView
    from broker.security.request_context import RequestContext

GROUP_TYPE = "share"
PROTOCOL_TYPE = "share"


def _coordinates(broker: ShareView, group_id: str) -> bool:
    chosen = broker.groups.coordinator.coordinator_of(group_id)  # type: ignore[attr-defined]
    return chosen is not None and chosen.node_id == broker.config.node_id


async def list_share_groups(
    broker: ShareView, states: Collection[str], types: Collection[str]
) -> list[dict[str, Any]]:
    """ListGroups' entries for the share groups this broker coordinates (held here, or
    stored: loaded): with members (Stable), or without (Empty)."""
    if types and GROUP_TYPE not in {t.lower() for t in types}:
        return []
    share = broker.share
    listed: dict[str, str] = {}
    for group_id in sorted({*share.groups.groups, *await share.store.groups()}):
        if not _coordinates(broker, group_id) or await share.load(group_id):
            continue
        group = share.groups.groups.get(group_id)
        listed[group_id] = group.state if group is not None else EMPTY
    wanted = {s.lower() for s in states}
    return [
        {
            "group_id": g,
            "protocol_type": PROTOCOL_TYPE,
            "group_state": state,
            "group_type": GROUP_TYPE,
        }
        for g, state in sorted(listed.items())
        if not wanted or state.lower() in wanted
    ]


async def delete_share_groups(broker: ShareView, group_ids: Collection[str]) -> dict[str, int]:
    """DeleteGroups of share groups (those DeleteGroups did not find as consumer groups):
    their share-partition state goes; a group with members is NON_EMPTY_GROUP."""
    share = broker.share
    stored = set(await share.store.groups())
    out: dict[str, int] = {}
    for group_id in group_ids:
        group = share.groups.groups.get(group_id)
        if group is None and group_id not in stored:
            continue
        if not _coordinates(broker, group_id):
            out[group_id] = int(ErrorCode.not_coordinator)
            continue
        if error := await share.load(group_id):
            out[group_id] = error
            continue
        group = share.groups.groups.get(group_id)
        if group is not None and group.members:
            out[group_id] = int(ErrorCode.non_empty_group)
        else:
            await share.store.delete(group_id, None)
            await share.held.delete(group_id)
            share.partitions.forget(group_id)
            out[group_id] = 0
    return out


async def _latest(broker: ShareView, key: ShareKey) -> int:
    log = broker.router.route(key.topic_id, key.partition, Purpose.LIST_OFFSETS, -1)
    [answer] = await log.list_offsets([OffsetAsk(key.topic_id, key.partition, -1)], False)
    return answer.offset if not answer.error else -1


def _lag(state: SharePartitionState, latest: int) -> int:
    """Records still to be delivered and acknowledged: from the start offset to the log
    end, less those of the window already done with."""
    if latest < 0:
        return -1
    done = sum(1 for r in state.records.values() if r.state in (ACKNOWLEDGED, ARCHIVED))
    return max(0, latest - state.start - done)


async def describe_offsets(broker: ShareView, ctx: RequestContext, request: Any) -> Any:
    share = broker.share
    out = []
    for group in request.groups:
        entry: dict[str, Any] = {
            "group_id": group.group_id,
            "topics": [],
            "error_code": 0,
            "error_message": None,
        }
        out.append(entry)
        if not access.group(broker, ctx, AclOperation.DESCRIBE, group.group_id):
            entry["error_code"] = int(ErrorCode.group_authorization_failed)
            continue
        if not _coordinates(broker, group.group_id):
            entry["error_code"] = int(ErrorCode.not_coordinator)
            continue
        try:
            stored = await share.store.group_states(group.group_id)
        except CoordinatorUnavailable:
            entry["error_code"] = int(ErrorCode.coordinator_not_available)
            continue
        asked: list[tuple[str, list[int]]] = []
        if group.topics is None:
            by_topic: dict[str, list[int]] = {}
            for key in stored:
                topic = broker.topics.get_by_id(key.topic_id)
                if topic is not None:
                    by_topic.setdefault(topic.name, []).append(key.partition)
            asked = [(name, sorted(parts)) for name, parts in sorted(by_topic.items())]
        else:
            asked = [(t.topic_name, list(t.partitions)) for t in group.topics]
        for name, partitions in asked:
            topic = broker.topics.get(name)
            denied = not access.topic(broker, ctx, AclOperation.DESCRIBE, name)
            parts = []
            for p in partitions:
                part: dict[str, Any] = {
                    "partition_index": p,
                    "start_offset": -1,
                    "leader_epoch": -1,
                    "lag": -1,
                    "error_code": 0,
                    "error_message": None,
                }
                parts.append(part)
                if denied:
                    part["error_code"] = int(ErrorCode.topic_authorization_failed)
                elif topic is None or not 0 <= p < topic.partitions:
                    part["error_code"] = int(ErrorCode.unknown_topic_or_partition)
                elif (found := stored.get(ShareKey(topic.topic_id, p))) is not None:
                    state = SharePartitionState.from_json(found.state)
                    latest = await _latest(broker, ShareKey(topic.topic_id, p))
                    part.update(
                        start_offset=state.start,
                        leader_epoch=broker.leader_epoch(topic.topic_id, p),
                        lag=_lag(state, latest),
                    )
            entry["topics"].append(
                {
                    "topic_name": name,
                    "topic_id": topic.topic_id if topic is not None else None,
                    "partitions": parts,
                }
            )
    return ctx.respond({"throttle_time": 0, "groups": out})


async def _group_refusal(broker: ShareView, group_id: str) -> tuple[int, str | None]:
    if not _coordinates(broker, group_id):
        return int(ErrorCode.not_coordinator), None
    if error := await broker.share.load(group_id):
        return error, None
    group = broker.share.groups.groups.get(group_id)
    if group is not None and group.members:
        return int(ErrorCode.non_empty_group), "The group has active members."
    return 0, None


async def alter_offsets(broker: ShareView, ctx: RequestContext, request: Any) -> Any:
    group_id = request.group_id
    if refusal := access.group_refusal(broker, ctx, AclOperation.READ, group_id):
        return refusal
    error, message = await _group_refusal(broker, group_id)
    if error:
        return ctx.respond(
            {"throttle_time": 0, "error_code": error, "error_message": message, "responses": []}
        )
    share = broker.share
    starts: dict[ShareKey, int] = {}
    responses = []
    for t in request.topics:
        topic = broker.topics.get(t.topic_name)
        denied = not access.topic(broker, ctx, AclOperation.READ, t.topic_name)
        parts = []
        for p in t.partitions:
            code = 0
            if denied:
                code = int(ErrorCode.topic_authorization_failed)
            elif topic is None or not 0 <= p.partition_index < topic.partitions:
                code = int(ErrorCode.unknown_topic_or_partition)
            elif p.start_offset < 0:
                code = int(ErrorCode.invalid_request)
            else:
                starts[ShareKey(topic.topic_id, p.partition_index)] = p.start_offset
            parts.append({"partition_index": p.partition_index, "error_code": code})
        responses.append(
            {
                "topic_name": t.topic_name,
                "topic_id": topic.topic_id if topic is not None else None,
                "partitions": parts,
            }
        )

    def change(key: ShareKey, state: SharePartitionState | None) -> tuple[Any, None]:
        fresh = SharePartitionState(starts[key], starts[key])
        return fresh, None

    top = 0
    try:
        if starts:
            await share.partitions.update(group_id, list(starts), change)
    except (ShareConflict, CoordinatorUnavailable):
        top = int(ErrorCode.coordinator_not_available)
    return ctx.respond(
        {"throttle_time": 0, "error_code": top, "error_message": None, "responses": responses}
    )


async def delete_offsets(broker: ShareView, ctx: RequestContext, request: Any) -> Any:
    group_id = request.group_id
    if refusal := access.group_refusal(broker, ctx, AclOperation.DELETE, group_id):
        return refusal
    error, message = await _group_refusal(broker, group_id)
    share = broker.share
    if not error and group_id not in await share.store.groups():
        group = share.groups.groups.get(group_id)
        if group is None:
            error, message = int(ErrorCode.group_id_not_found), f"Group {group_id} not found."
    if error:
        return ctx.respond(
            {"throttle_time": 0, "error_code": error, "error_message": message, "responses": []}
        )
    stored = await share.store.group_states(group_id)
    responses = []
    doomed: list[ShareKey] = []
    for t in request.topics:
        topic = broker.topics.get(t.topic_name)
        code = 0
        if not access.topic(broker, ctx, AclOperation.READ, t.topic_name):
            code = int(ErrorCode.topic_authorization_failed)
        elif topic is None:
            code = int(ErrorCode.unknown_topic_or_partition)
        else:
            doomed += [k for k in stored if k.topic_id == topic.topic_id]
        responses.append(
            {
                "topic_name": t.topic_name,
                "topic_id": topic.topic_id if topic is not None else None,
                "error_code": code,
                "error_message": None,
            }
        )
    if doomed:
        await share.store.delete(group_id, doomed)
        share.partitions.forget(group_id, doomed)
    return ctx.respond(
        {"throttle_time": 0, "error_code": 0, "error_message": None, "responses": responses}
    )
