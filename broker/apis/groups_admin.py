"""ListGroups, DescribeGroups, DeleteGroups: what ``kafka-consumer-groups`` lists and shows."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from ..authorized_operations import authorized

if TYPE_CHECKING:
    from ..node import Broker
    from ..server import RequestContext


async def list_groups(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    error, groups = await broker.groups.admin.list_groups(
        getattr(request, "states_filter", ()), getattr(request, "types_filter", ())
    )
    return ctx.respond({"throttle_time": 0, "error_code": int(error), "groups": groups})


async def describe_groups(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    entries = await broker.groups.admin.describe_groups(list(request.groups))
    operations = authorized("group", bool(getattr(request, "include_authorized_operations", False)))
    for entry in entries:
        entry["authorized_operations"] = operations
        if entry["error_code"] == ErrorCode.group_id_not_found and version < 6:
            # Before v6 (KIP-1043) an unknown group is told by its Dead state alone.
            entry["error_code"] = 0
        elif entry["error_code"] == ErrorCode.group_id_not_found:
            entry["error_message"] = f"Group {entry['group_id']} not found."
    return ctx.respond({"throttle_time": 0, "groups": entries})


async def delete_groups(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    results = await broker.groups.admin.delete_groups(list(request.groups_names))
    return ctx.respond(
        {
            "throttle_time": 0,
            "results": [
                {"group_id": group_id, "error_code": int(error)} for group_id, error in results
            ],
        }
    )
