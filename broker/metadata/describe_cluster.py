"""DescribeCluster: brokers with their racks, the controller stand-in and cluster id."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.security import access
from broker.security.authorized_operations import NOT_REQUESTED
from common.acl import CLUSTER_NAME, AclOperation

if TYPE_CHECKING:
    from broker.metadata.view import HandlerView
    from broker.security.request_context import RequestContext


ENDPOINT_BROKERS = 1


async def handle(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    endpoint_type = getattr(request, "endpoint_type", ENDPOINT_BROKERS)  # v1+
    if endpoint_type != ENDPOINT_BROKERS:
        # As a Kafka broker does: controller endpoints are asked of the controllers
        # (KIP-919), and a broker says it is the wrong kind of endpoint.
        return ctx.respond(
            {
                "error_code": int(ErrorCode.mismatched_endpoint_type),
                "error_message": "The request was sent to an endpoint of type BROKER, "
                f"but endpoint type {endpoint_type} was wanted",
                "endpoint_type": ENDPOINT_BROKERS,
                "cluster_id": broker.cluster_id,
                "controller_id": -1,
                "brokers": [],
                "cluster_authorized_operations": -2147483648,
            }
        )
    # Kafka answers every caller; without DESCRIBE on the cluster only the authorized
    # operations are withheld (0 when asked for).
    operations = NOT_REQUESTED
    if request.include_cluster_authorized_operations:
        operations = 0
        if access.cluster(broker, ctx, AclOperation.DESCRIBE):
            operations = access.operations(broker, ctx, "cluster", CLUSTER_NAME, True)
    return ctx.respond(
        {
            "error_code": 0,
            "endpoint_type": 1,
            "cluster_id": broker.cluster_id,
            "controller_id": broker.controller_id,
            "brokers": [
                {"broker_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in broker.endpoints_on(ctx.listener)
            ],
            "cluster_authorized_operations": operations,
        }
    )
