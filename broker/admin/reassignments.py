"""AlterPartitionReassignments and ListPartitionReassignments: forwarded to the active
controller (controller mode only: without a controller there are no replicas to move)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.metadata.controller_client import ControllerRefused
from broker.security import access
from common.acl import AclOperation
from controller.requests import Reassignment, ReassignmentResult

if TYPE_CHECKING:
    from broker.metadata.view import HandlerView
    from broker.security.request_context import RequestContext

NO_CONTROLLER = (
    "Partition reassignment needs the Raft controller: this broker runs without one "
    "(controller.quorum.bootstrap.servers is not set)"
)


async def alter_partition_reassignments(
    broker: HandlerView, ctx: RequestContext, request: Any
) -> Any:
    if refusal := access.cluster_refusal(broker, ctx, AclOperation.ALTER):
        return refusal
    allow_rf_change = getattr(request, "allow_replication_factor_change", True)
    wanted = [
        (t.name, p.partition_index, None if p.replicas is None else list(p.replicas))
        for t in request.topics
        for p in t.partitions
    ]
    top_code, top_message = ErrorCode.none, None
    results: dict[tuple[str, int], tuple[ErrorCode, str | None]] = {}
    if broker.controller is None:
        top_code, top_message = ErrorCode.invalid_request, NO_CONTROLLER
    else:
        image = broker.controller.image
        forward: list[Reassignment] = []
        for name, index, replicas in wanted:
            topic = image.topic(name)
            state = topic.partitions.get(index) if topic is not None else None
            if (
                not allow_rf_change
                and replicas is not None
                and state is not None
                and len(replicas) != len(state.target_replicas)
            ):
                # KIP-860: a client that forbids it never changes the replication factor.
                results[(name, index)] = (
                    ErrorCode.invalid_replication_factor,
                    f"The replication factor of {name}-{index} would change from "
                    f"{len(state.target_replicas)} to {len(replicas)}",
                )
            else:
                forward.append(Reassignment(name, index, replicas))
        try:
            answered: list[ReassignmentResult] = (
                await broker.controller.alter_reassignments(forward) if forward else []
            )
        except ControllerRefused as exc:
            top_code, top_message = exc.code, exc.message
        else:
            for r in answered:
                results[(r.topic, r.partition)] = (r.error_code, r.error_message)
    topics: dict[str, list[dict[str, Any]]] = {}
    for name, index, _ in wanted:
        code, message = results.get((name, index), (top_code, top_message))
        topics.setdefault(name, []).append(
            {"partition_index": index, "error_code": int(code), "error_message": message}
        )
    return ctx.respond(
        {
            "throttle_time": 0,
            "allow_replication_factor_change": allow_rf_change,
            "error_code": int(top_code),
            "error_message": top_message,
            "responses": [{"name": n, "partitions": parts} for n, parts in topics.items()],
        }
    )


async def list_partition_reassignments(
    broker: HandlerView, ctx: RequestContext, request: Any
) -> Any:
    if refusal := access.cluster_refusal(broker, ctx, AclOperation.DESCRIBE):
        return refusal
    if broker.controller is None:
        return ctx.respond(
            {
                "throttle_time": 0,
                "error_code": int(ErrorCode.invalid_request),
                "error_message": NO_CONTROLLER,
                "topics": [],
            }
        )
    wanted = (
        None
        if request.topics is None
        else {t.name: list(t.partition_indexes) for t in request.topics}
    )
    try:
        ongoing = await broker.controller.list_reassignments(wanted)
    except ControllerRefused as exc:
        return ctx.respond(
            {
                "throttle_time": 0,
                "error_code": int(exc.code),
                "error_message": exc.message,
                "topics": [],
            }
        )
    topics: dict[str, list[dict[str, Any]]] = {}
    for o in ongoing:
        topics.setdefault(o.topic, []).append(
            {
                "partition_index": o.partition,
                "replicas": list(o.replicas),
                "adding_replicas": list(o.adding_replicas),
                "removing_replicas": list(o.removing_replicas),
            }
        )
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": 0,
            "error_message": None,
            "topics": [{"name": n, "partitions": parts} for n, parts in topics.items()],
        }
    )
