"""UnregisterBroker (key 64, ``kafka-cluster unregister --id``): forwarded to the active
controller, as a Kafka broker forwards it. The controller removes the registration for good
(controller/logic.py: leaders move off it; its replicas stay, offline, until reassigned);
an unknown id is BROKER_ID_NOT_REGISTERED."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.metadata.controller_client import ControllerRefused
from broker.security import access
from common.acl import AclOperation

if TYPE_CHECKING:
    from broker.metadata.view import HandlerView
    from broker.security.request_context import RequestContext

NO_CONTROLLER = (
    "Unregistering a broker needs the Raft controller: this broker runs without one "
    "(brokers register in the database)"
)


async def handle(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    code: ErrorCode | int
    message: str | None
    if not access.cluster(broker, ctx, AclOperation.ALTER):  # Kafka: ALTER on the cluster
        code, message = ErrorCode.cluster_authorization_failed, None
    elif broker.controller is None:
        code, message = ErrorCode.unsupported_version, NO_CONTROLLER
    else:
        try:
            result = await broker.controller.client.unregister(int(request.broker_id))
            code, message = result.error_code, result.error_message
        except ControllerRefused as exc:
            code, message = exc.code, exc.message
    return ctx.respond({"throttle_time": 0, "error_code": int(code), "error_message": message})
