"""ElectLeaders (``kafka-leader-election.sh``, AdminClient.electLeaders): forwarded to the
active controller, which decides (``controller.leader_election``)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.admin.reassignments import NO_CONTROLLER
from broker.metadata.controller_client import ControllerRefused
from broker.security import access
from common.acl import AclOperation
from controller.requests import ElectionResult, LeaderElection

if TYPE_CHECKING:
    from broker.metadata.view import HandlerView
    from broker.security.request_context import RequestContext

PREFERRED, UNCLEAN = 0, 1


async def elect_leaders(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    # v0 has no election type: it always elects the preferred replica.
    election_type = getattr(request, "election_type", PREFERRED)
    wanted = (
        None
        if request.topic_partitions is None
        else [(t.topic, int(i)) for t in request.topic_partitions for i in t.partitions]
    )
    results: list[ElectionResult] = []
    top, message = ErrorCode.none, None
    if not access.cluster(broker, ctx, AclOperation.ALTER):
        # Kafka answers every named partition (none when all were asked for) with it too.
        top, message = ErrorCode.cluster_authorization_failed, None
    elif election_type not in (PREFERRED, UNCLEAN):
        # As Kafka: the whole request is invalid (top-level error, and every partition named).
        top, message = ErrorCode.invalid_request, f"Unknown election type {election_type}"
    elif broker.controller is None:
        top, message = ErrorCode.invalid_request, NO_CONTROLLER
    else:
        try:
            results = await broker.controller.elect_leaders(LeaderElection(election_type, wanted))
        except ControllerRefused as exc:
            top, message = exc.code, exc.message
    if top != ErrorCode.none:
        results = [ElectionResult(t, i, top, message) for t, i in wanted or ()]
    topics: dict[str, list[dict[str, Any]]] = {}
    for r in results:
        topics.setdefault(r.topic, []).append(
            {
                "partition_id": r.partition,
                "error_code": int(r.error_code),
                "error_message": r.error_message,
            }
        )
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": int(top),
            "replica_election_results": [
                {"topic": name, "partition_result": parts} for name, parts in topics.items()
            ],
        }
    )
