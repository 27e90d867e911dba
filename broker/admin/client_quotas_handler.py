"""DescribeClientQuotas and AlterClientQuotas (KIP-546): quotas of users and client ids.

Quotas live in the controllers' metadata log (``MetadataImage.quotas``): changes are
forwarded to the active controller and answered once this broker's image holds them; reads
come from that image. As in Kafka, describing needs DESCRIBE_CONFIGS on the cluster and
altering ALTER_CONFIGS. Enforcement: ``broker/quotas``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.metadata.controller_client import ControllerRefused
from broker.security import access
from common.acl import AclOperation
from controller.acl_admin import QuotaAlteration, QuotaOp
from controller.image import QuotaEntity

if TYPE_CHECKING:
    from broker.metadata.view import HandlerView
    from broker.security.request_context import RequestContext

CATCH_UP_S = 10.0
MATCH_EXACT, MATCH_DEFAULT, MATCH_ANY = 0, 1, 2
NO_CONTROLLER = "Client quotas are kept in the controllers' metadata log: controller mode only"


def _valid(components: Any) -> bool:
    """Each entity type once, a known match type, a name to match exactly (Kafka's checks)."""
    types = [c.entity_type for c in components]
    return len(set(types)) == len(types) and all(
        c.match_type in (MATCH_DEFAULT, MATCH_ANY)
        or (c.match_type == MATCH_EXACT and c.match is not None)
        for c in components
    )


def _matches(entity: QuotaEntity, components: Any, strict: bool) -> bool:
    """Whether the entity passes the (valid) filter."""
    names = dict(entity)
    for c in components:
        if c.entity_type not in names:
            return False
        name = names[c.entity_type]
        if c.match_type == MATCH_EXACT and name != c.match:
            return False
        if c.match_type == MATCH_DEFAULT and name is not None:
            return False
    return not strict or len(names) == len(components)


async def describe_client_quotas(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    def error(code: ErrorCode, message: str) -> Any:
        return ctx.respond(
            {"throttle_time": 0, "error_code": int(code), "error_message": message, "entries": None}
        )

    if not access.cluster(broker, ctx, AclOperation.DESCRIBE_CONFIGS):
        return error(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    if broker.controller is None:
        return error(ErrorCode.invalid_request, NO_CONTROLLER)
    if not _valid(request.components):
        return error(ErrorCode.invalid_request, "Invalid quota filter component")
    entries = []
    for entity, values in sorted(broker.controller.image.quotas.items(), key=repr):
        if _matches(entity, request.components, request.strict):
            entries.append(
                {
                    "entity": [{"entity_type": t, "entity_name": n} for t, n in entity],
                    "values": [{"key": k, "value": v} for k, v in sorted(values.items())],
                }
            )
    return ctx.respond(
        {"throttle_time": 0, "error_code": 0, "error_message": None, "entries": entries}
    )


async def alter_client_quotas(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    def entity_of(entry: Any) -> list[dict[str, Any]]:
        return [{"entity_type": e.entity_type, "entity_name": e.entity_name} for e in entry.entity]

    def answer(codes: list[tuple[int, str | None]]) -> Any:
        return ctx.respond(
            {
                "throttle_time": 0,
                "entries": [
                    {"error_code": code, "error_message": message, "entity": entity_of(entry)}
                    for entry, (code, message) in zip(request.entries, codes, strict=True)
                ],
            }
        )

    def every(code: ErrorCode, message: str | None) -> Any:
        return answer([(int(code), message)] * len(request.entries))

    if not access.cluster(broker, ctx, AclOperation.ALTER_CONFIGS):
        return every(ErrorCode.cluster_authorization_failed, "Cluster authorization failed.")
    if broker.controller is None:
        return every(ErrorCode.invalid_request, NO_CONTROLLER)
    alterations = [
        QuotaAlteration(
            [e.entity_type for e in entry.entity],
            [e.entity_name for e in entry.entity],
            [QuotaOp(op.key, float(op.value), bool(op.remove)) for op in entry.ops],
        )
        for entry in request.entries
    ]
    try:
        results, applied = await broker.controller.client.alter_client_quotas(
            alterations, bool(request.validate_only)
        )
    except ControllerRefused as exc:
        return every(exc.code, exc.message)
    await broker.controller.follower.wait_for(applied, CATCH_UP_S)
    return answer([(r.error_code, r.error_message) for r in results])
