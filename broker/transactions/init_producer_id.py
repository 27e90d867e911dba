"""InitProducerId: idempotent producers get a fresh id; transactional ones go to the
transaction coordinator (broker/transactions/)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from broker.groups.offsets import store_error
from broker.metadata.view import HandlerView
from broker.security import access
from common.acl import AclOperation
from storage.transactions import INVALID_PRODUCER_EPOCH, PRODUCER_FENCED

if TYPE_CHECKING:
    from broker.security.request_context import RequestContext
    from broker.transactions.producer_ids import ProducerIdAllocator
    from broker.transactions.txn_coordinator import TransactionCoordinator


class InitProducerIdView(HandlerView, Protocol):
    @property
    def transactions(self) -> TransactionCoordinator: ...

    @property
    def producer_ids(self) -> ProducerIdAllocator: ...  # idempotent producers


# KIP-588: PRODUCER_FENCED from InitProducerId v4 on.
FENCED_SINCE = 4


async def handle(broker: InitProducerIdView, ctx: RequestContext, request: Any) -> Any:
    if request.transactional_id == "":
        # Kafka: an empty transactional id is no id and no idempotent request either.
        return ctx.respond(
            {"error_code": int(ErrorCode.invalid_request), "producer_id": -1, "producer_epoch": -1}
        )
    # WRITE on the transactional id; without one, idempotence needs IDEMPOTENT_WRITE on the
    # cluster or WRITE on some topic (KIP-679).
    denied = None
    if request.transactional_id is not None:
        if not access.transactional_id(broker, ctx, AclOperation.WRITE, request.transactional_id):
            denied = ErrorCode.transactional_id_authorization_failed
    elif not access.idempotent_write(broker, ctx):
        denied = ErrorCode.cluster_authorization_failed
    if denied is not None:
        return ctx.respond({"error_code": int(denied), "producer_id": -1, "producer_epoch": -1})
    if request.transactional_id is not None:
        try:
            error, producer_id, epoch = await broker.transactions.init_producer_id(
                request.transactional_id,
                round(request.transaction_timeout.total_seconds() * 1000),
                getattr(request, "producer_id", -1),
                getattr(request, "producer_epoch", -1),
            )
        except Exception as exc:
            error, producer_id, epoch = int(store_error(exc, "InitProducerId")), -1, -1
        if error == PRODUCER_FENCED and ctx.header.api_version < FENCED_SINCE:
            error = INVALID_PRODUCER_EPOCH
        return ctx.respond(
            {"error_code": error, "producer_id": producer_id, "producer_epoch": epoch}
        )
    # Without a transactional id Kafka always issues a fresh producer id at epoch 0, whatever
    # id and epoch the request carries (KIP-360's bump of an existing id is a transactional
    # producer's move). Honouring a client-chosen id here let two producers share one and
    # the second one's records were answered as duplicates of the first's and dropped.
    return ctx.respond(
        {"error_code": 0, "producer_id": await broker.producer_ids.allocate(), "producer_epoch": 0}
    )
