"""DescribeCluster: brokers with their racks, the controller stand-in and cluster id."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..authorized_operations import authorized

if TYPE_CHECKING:
    from ..node import Broker
    from ..server import RequestContext


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    return ctx.respond(
        {
            "error_code": 0,
            "endpoint_type": 1,
            "cluster_id": broker.cluster_id,
            "controller_id": broker.controller_id,
            "brokers": [
                {"broker_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in broker.endpoints()
            ],
            "cluster_authorized_operations": authorized(
                "cluster", bool(request.include_cluster_authorized_operations)
            ),
        }
    )
