"""InitProducerId for idempotent producers (transactions are not supported yet)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from ..node import Broker
    from ..server import RequestContext



async def handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id is not None:
        # No transaction coordinator yet. UNSUPPORTED_VERSION is Kafka's answer for a feature
        # a broker does not have: clients report "not supported" and stop, where
        # TRANSACTIONAL_ID_AUTHORIZATION_FAILED sent users looking for ACLs that do not exist.
        return ctx.respond(
            {
                "error_code": int(ErrorCode.unsupported_version),
                "producer_id": -1,
                "producer_epoch": -1,
            }
        )
    # Without a transactional id Kafka always issues a fresh producer id at epoch 0, whatever
    # id and epoch the request carries (KIP-360's bump of an existing id is a transactional
    # producer's move). Honouring a client-chosen id here let two producers share one and
    # the second one's records were answered as duplicates of the first's and dropped.
    return ctx.respond(
        {"error_code": 0, "producer_id": await broker.producer_ids.allocate(), "producer_epoch": 0}
    )
