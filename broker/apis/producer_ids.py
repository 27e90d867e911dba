"""InitProducerId for idempotent producers (transactions are not supported)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from ..node import Broker
    from ..server import RequestContext

MAX_EPOCH = 32767 - 1


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        # Without a transaction coordinator a transactional producer cannot work;
        # say so instead of handing out an id that would fail later.
        return ctx.respond(
            {
                "error_code": int(ErrorCode.transactional_id_authorization_failed),
                "producer_id": -1,
                "producer_epoch": -1,
            }
        )
    producer_id = getattr(request, "producer_id", -1)
    epoch = getattr(request, "producer_epoch", -1)
    if producer_id >= 0 and 0 <= epoch < MAX_EPOCH:
        # KIP-360: an idempotent producer that lost track of its sequences bumps its
        # epoch; the coordinator then accepts sequence 0 again on every partition.
        return ctx.respond(
            {"error_code": 0, "producer_id": producer_id, "producer_epoch": epoch + 1}
        )
    return ctx.respond(
        {"error_code": 0, "producer_id": await broker.producer_ids.allocate(), "producer_epoch": 0}
    )
