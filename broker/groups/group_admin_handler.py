"""ListGroups, DescribeGroups, DeleteGroups: what ``kafka-consumer-groups`` lists and shows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.groups.share.admin import delete_share_groups, list_share_groups
from broker.security import access
from broker.security.authorized_operations import NOT_REQUESTED
from common.acl import AclOperation

if TYPE_CHECKING:
    from broker.groups.service import GroupsView
    from broker.security.request_context import RequestContext


async def list_groups(broker: GroupsView, ctx: RequestContext, request: Any) -> Any:
    states, types = getattr(request, "states_filter", ()), getattr(request, "types_filter", ())
    error, groups = await broker.groups.admin.list_groups(states, types)
    if not error:  # share groups (KIP-932): broker/groups/share/admin.py
        groups = [*groups, *await list_share_groups(broker, states, types)]  # type: ignore[arg-type]
    if access.enabled(broker) and not access.cluster(broker, ctx, AclOperation.DESCRIBE):
        # Without DESCRIBE on the cluster, only the groups the caller may describe (Kafka).
        groups = [
            g for g in groups if access.group(broker, ctx, AclOperation.DESCRIBE, g["group_id"])
        ]
    return ctx.respond({"throttle_time": 0, "error_code": int(error), "groups": groups})


def _denied_group(group_id: str) -> dict[str, Any]:
    return {
        "error_code": int(ErrorCode.group_authorization_failed),
        "error_message": None,
        "group_id": group_id,
        "group_state": "",
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
        "authorized_operations": NOT_REQUESTED,
    }


async def describe_groups(broker: GroupsView, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    wanted = list(request.groups)
    allowed = [g for g in wanted if access.group(broker, ctx, AclOperation.DESCRIBE, g)]
    described = iter(await broker.groups.admin.describe_groups(allowed))
    with_operations = bool(getattr(request, "include_authorized_operations", False))
    entries = []
    allowed_set = set(allowed)
    for group_id in wanted:
        if group_id not in allowed_set:
            entries.append(_denied_group(group_id))
            continue
        entry = next(described)
        # As Kafka: a Dead (unknown) group's operations are not given, even when asked.
        entry["authorized_operations"] = (
            NOT_REQUESTED
            if entry["group_state"] == "Dead"
            else access.operations(broker, ctx, "group", group_id, with_operations)
        )
        if entry["error_code"] == ErrorCode.group_id_not_found and version < 6:
            # Before v6 (KIP-1043) an unknown group is told by its Dead state alone.
            entry["error_code"] = 0
        elif entry["error_code"] == ErrorCode.group_id_not_found:
            entry["error_message"] = (
                entry.get("error_message") or f"Group {entry['group_id']} not found."
            )
        entries.append(entry)
    return ctx.respond({"throttle_time": 0, "groups": entries})


async def delete_groups(broker: GroupsView, ctx: RequestContext, request: Any) -> Any:
    wanted = list(request.groups_names)
    allowed = [g for g in wanted if access.group(broker, ctx, AclOperation.DELETE, g)]
    done = dict(await broker.groups.admin.delete_groups(allowed)) if allowed else {}
    unknown = [g for g, e in done.items() if e == ErrorCode.group_id_not_found]
    if unknown:  # share groups (KIP-932): broker/groups/share/admin.py
        done.update(await delete_share_groups(broker, unknown))  # type: ignore[arg-type]
    denied = int(ErrorCode.group_authorization_failed)
    return ctx.respond(
        {
            "throttle_time": 0,
            "results": [
                {"group_id": g, "error_code": int(done[g]) if g in done else denied}
                for g in dict.fromkeys(wanted)
            ],
        }
    )
