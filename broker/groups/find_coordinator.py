"""FindCoordinator: which broker coordinates a group or a transactional id (v4+: several
keys at once). Both are placed the same way: murmur3 of the key over the live brokers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.security import access
from common.acl import AclOperation

if TYPE_CHECKING:
    from broker.groups.service import GroupsView
    from broker.security.request_context import RequestContext

KEY_GROUP = 0
KEY_TRANSACTION = 1


def _coordinator(
    broker: GroupsView, ctx: RequestContext, key: str, key_type: int
) -> dict[str, Any]:
    entry: dict[str, Any] = {
        "key": key,
        "node_id": -1,
        "host": "",
        "port": -1,
        "error_code": 0,
        "error_message": None,
    }
    if key_type not in (KEY_GROUP, KEY_TRANSACTION):
        entry.update(
            error_code=int(ErrorCode.invalid_request),
            error_message=f"Unsupported coordinator key type {key_type}",
        )
        return entry
    # DESCRIBE on the group or transactional id (Kafka checks before looking anything up).
    if key_type == KEY_GROUP and not access.group(broker, ctx, AclOperation.DESCRIBE, key):
        entry.update(error_code=int(ErrorCode.group_authorization_failed))
        return entry
    if key_type == KEY_TRANSACTION and not access.transactional_id(
        broker, ctx, AclOperation.DESCRIBE, key
    ):
        entry.update(error_code=int(ErrorCode.transactional_id_authorization_failed))
        return entry
    chosen: Any = broker.groups.coordinator.coordinator_of(key)
    if chosen is None:
        entry.update(
            error_code=int(ErrorCode.coordinator_not_available),
            error_message="No live broker",
        )
        return entry
    chosen = chosen.on_listener(ctx.listener)  # the address on the client's own listener
    entry.update(node_id=chosen.node_id, host=chosen.host, port=chosen.port)
    return entry


async def handle(broker: GroupsView, ctx: RequestContext, request: Any) -> Any:
    key_type = getattr(request, "key_type", KEY_GROUP)
    if ctx.header.api_version >= 4:
        return ctx.respond(
            {
                "throttle_time": 0,
                "coordinators": [
                    _coordinator(broker, ctx, key, key_type) for key in request.coordinator_keys
                ],
            }
        )
    entry = _coordinator(broker, ctx, request.key, key_type)
    del entry["key"]
    return ctx.respond({"throttle_time": 0, **entry})
