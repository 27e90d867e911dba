"""UnregisterBroker (key 64, ``kafka-cluster unregister --id``): a broker is removed from the
cluster for good. A Kafka broker forwards the request to its active controller, which checks
ALTER on the cluster for the caller and answers BROKER_ID_NOT_REGISTERED for an id with no
registration; any registered broker is removed, fenced or not, alive or not (Kafka 4.x's
ReplicationControlManager.unregisterBroker checks nothing more). Sluice's controller does
the same (controller/logic.py: leaders move off it, its replicas stay, offline, until
reassigned). A live broker that was unregistered finds out at its next heartbeat and
registers again (broker/metadata/membership.py), where a Kafka broker stays out of the
cluster until it is restarted.

Without a controller quorum (brokers registered in the database) there is nothing to
unregister from: UNSUPPORTED_VERSION, as DescribeQuorum answers then."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.metadata.controller_client import ControllerRefused
from broker.security import access
from common.acl import AclOperation

if TYPE_CHECKING:
    from broker.metadata.view import HandlerView
    from broker.security.request_context import RequestContext

CATCH_UP_S = 10.0
NO_CONTROLLER = (
    "Unregistering a broker needs the controller quorum: this broker runs without one "
    "(brokers register in the database)"
)


async def handle(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    code: ErrorCode | int
    message: str | None = None
    if not access.cluster(broker, ctx, AclOperation.ALTER):  # Kafka: ALTER on the cluster
        code = ErrorCode.cluster_authorization_failed
    elif broker.controller is None:
        code, message = ErrorCode.unsupported_version, NO_CONTROLLER
    else:
        try:
            result, applied = await broker.controller.client.unregister(int(request.broker_id))
            code, message = result.error_code, result.error_message
            # The answer says the broker is gone: so does this broker's next Metadata.
            await broker.controller.follower.wait_for(applied, CATCH_UP_S)
        except ControllerRefused as exc:
            code, message = exc.code, exc.message
    return ctx.respond({"throttle_time": 0, "error_code": int(code), "error_message": message})
