"""DescribeAcls, CreateAcls, DeleteAcls (KIP-140).

ACLs live in the controllers' metadata log: creations and deletions are forwarded to the
active controller and answered once this broker's image holds them (read-your-writes), and
DescribeAcls reads the image this broker follows. As in Kafka, describing needs DESCRIBE on
the cluster and changing needs ALTER on it, and a broker without an authorizer answers
SECURITY_DISABLED.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.metadata.controller_client import ControllerRefused
from broker.security import access
from common.acl import AclBinding, AclFilter, AclOperation, InvalidAcl

if TYPE_CHECKING:
    from broker.metadata.view import HandlerView
    from broker.security.request_context import RequestContext

CATCH_UP_S = 10.0
NO_AUTHORIZER = "No Authorizer is configured on the broker (authorizer.class.name)"


def _refusal(
    broker: HandlerView, ctx: RequestContext, operation: AclOperation
) -> tuple[int, str] | None:
    """Why this request may not touch ACLs at all, as (error code, message), or None."""
    if not access.enabled(broker) or broker.controller is None:
        return int(ErrorCode.security_disabled), NO_AUTHORIZER
    if not access.cluster(broker, ctx, operation):
        return int(ErrorCode.cluster_authorization_failed), "Cluster authorization failed."
    return None


async def _caught_up(broker: HandlerView, applied: int) -> None:
    assert broker.controller is not None
    await broker.controller.follower.wait_for(applied, CATCH_UP_S)


async def describe_acls(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    refusal = _refusal(broker, ctx, AclOperation.DESCRIBE)
    acl_filter = AclFilter(
        request.resource_type_filter,
        request.resource_name_filter,
        request.pattern_type_filter,
        request.principal_filter,
        request.host_filter,
        request.operation,
        request.permission_type,
    )
    if refusal is None:
        try:
            acl_filter.check()
        except InvalidAcl as exc:
            refusal = int(ErrorCode.invalid_request), str(exc)
    if refusal is not None:
        code, message = refusal
        return ctx.respond(
            {"throttle_time": 0, "error_code": code, "error_message": message, "resources": []}
        )
    assert broker.controller is not None
    resources: dict[tuple[int, str, int], list[dict[str, Any]]] = {}
    for entry in broker.controller.image.acls.values():
        if acl_filter.matches(entry):
            key = (entry.resource_type, entry.resource_name, entry.pattern_type)
            resources.setdefault(key, []).append(
                {
                    "principal": entry.principal,
                    "host": entry.host,
                    "operation": entry.operation,
                    "permission_type": entry.permission,
                }
            )
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": 0,
            "error_message": None,
            "resources": [
                {"resource_type": t, "resource_name": n, "pattern_type": p, "acls": acls}
                for (t, n, p), acls in sorted(resources.items())
            ],
        }
    )


async def create_acls(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    def answer(results: list[dict[str, Any]]) -> Any:
        return ctx.respond({"throttle_time": 0, "results": results})

    refusal = _refusal(broker, ctx, AclOperation.ALTER)
    if refusal is not None:
        code, message = refusal
        return answer([{"error_code": code, "error_message": message} for _ in request.creations])
    assert broker.controller is not None
    acls = [
        AclBinding(
            c.resource_type,
            c.resource_name,
            c.resource_pattern_type,
            c.principal,
            c.host,
            c.operation,
            c.permission_type,
        )
        for c in request.creations
    ]
    try:
        results, applied = await broker.controller.client.create_acls(acls)
    except ControllerRefused as exc:
        return answer([{"error_code": int(exc.code), "error_message": exc.message} for _ in acls])
    await _caught_up(broker, applied)
    return answer([{"error_code": r.error_code, "error_message": r.error_message} for r in results])


def _matching(acl: AclBinding, code: int = 0, message: str | None = None) -> dict[str, Any]:
    return {
        "error_code": code,
        "error_message": message,
        "resource_type": acl.resource_type,
        "resource_name": acl.resource_name,
        "pattern_type": acl.pattern_type,
        "principal": acl.principal,
        "host": acl.host,
        "operation": acl.operation,
        "permission_type": acl.permission,
    }


async def delete_acls(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    def answer(entry: Callable[[int], dict[str, Any]]) -> Any:
        results = [entry(i) for i in range(len(request.filters))]
        return ctx.respond({"throttle_time": 0, "filter_results": results})

    refusal = _refusal(broker, ctx, AclOperation.ALTER)
    if refusal is not None:
        code, message = refusal
        return answer(lambda _: {"error_code": code, "error_message": message, "matching_acls": []})
    assert broker.controller is not None
    filters = [
        AclFilter(
            f.resource_type_filter,
            f.resource_name_filter,
            f.pattern_type_filter,
            f.principal_filter,
            f.host_filter,
            f.operation,
            f.permission_type,
        )
        for f in request.filters
    ]
    try:
        results, applied = await broker.controller.client.delete_acls(filters)
    except ControllerRefused as exc:
        failed = {"error_code": int(exc.code), "error_message": exc.message, "matching_acls": []}
        return answer(lambda _: failed)
    await _caught_up(broker, applied)
    return answer(
        lambda i: {
            "error_code": results[i].error_code,
            "error_message": results[i].error_message,
            "matching_acls": [_matching(acl) for acl in results[i].deleted],
        }
    )
