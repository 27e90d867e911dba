"""The checks handlers make: one short call each, True at once when no authorizer is set.

Handlers ask here instead of holding an Authorizer so that "no authorizer configured" (every
request allowed, Sluice's behaviour without ``authorizer.class.name``) is decided in one
place, and so the principal and host always come from the request's context.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from broker.security.authorized_operations import NOT_REQUESTED, authorized
from common.acl import CLUSTER_NAME, AclOperation, ResourceType
from protocol.build import error_response

if TYPE_CHECKING:
    from broker.security.authorizer import Authorizer
    from broker.security.request_context import RequestContext

Op = AclOperation


class Authorizing(Protocol):
    """What the checks read: the authorizer, None when every request is allowed (no
    ``authorizer.class.name``). The Broker is one; so is anything a handler is given."""

    @property
    def authorizer(self) -> Authorizer | None: ...


def enabled(broker: Authorizing) -> bool:
    """Whether an authorizer is configured (handlers skip their checks without one)."""
    return broker.authorizer is not None


def allowed(
    broker: Authorizing, ctx: RequestContext, operation: Op, resource_type: ResourceType, name: str
) -> bool:
    authorizer = broker.authorizer
    return authorizer is None or authorizer.authorize(
        ctx.principal, ctx.client_host, operation, resource_type, name
    )


def topic(broker: Authorizing, ctx: RequestContext, operation: Op, name: str) -> bool:
    return allowed(broker, ctx, operation, ResourceType.TOPIC, name)


def group(broker: Authorizing, ctx: RequestContext, operation: Op, name: str) -> bool:
    return allowed(broker, ctx, operation, ResourceType.GROUP, name)


def cluster(broker: Authorizing, ctx: RequestContext, operation: Op) -> bool:
    return allowed(broker, ctx, operation, ResourceType.CLUSTER, CLUSTER_NAME)


def transactional_id(broker: Authorizing, ctx: RequestContext, operation: Op, name: str) -> bool:
    return allowed(broker, ctx, operation, ResourceType.TRANSACTIONAL_ID, name)


def idempotent_write(broker: Authorizing, ctx: RequestContext) -> bool:
    """An idempotent producer without a transactional id: IDEMPOTENT_WRITE on the cluster,
    or, since KIP-679, WRITE on any topic."""
    authorizer = broker.authorizer
    if authorizer is None or cluster(broker, ctx, Op.IDEMPOTENT_WRITE):
        return True
    return authorizer.authorize_any(ctx.principal, ctx.client_host, Op.WRITE, ResourceType.TOPIC)


def operations(
    broker: Authorizing, ctx: RequestContext, kind: str, name: str, requested: bool = True
) -> int:
    """A KIP-430 authorized-operations bit set for ``kind`` ("topic", "group", "cluster")."""
    if not requested:
        return NOT_REQUESTED
    authorizer = broker.authorizer
    if authorizer is None:
        return authorized(kind)
    return authorizer.operations(ctx.principal, ctx.client_host, kind, name)


def topic_error(broker: Authorizing, ctx: RequestContext, operation: Op, name: str) -> int:
    """TOPIC_AUTHORIZATION_FAILED's code when ``operation`` on the topic is denied, else 0:
    for the per-partition error fields, checked before the topic's existence as in Kafka
    (an unauthorized client learns nothing about which topics exist)."""
    if broker.authorizer is None or topic(broker, ctx, operation, name):
        return 0
    return int(ErrorCode.topic_authorization_failed)


def group_refusal(broker: Authorizing, ctx: RequestContext, operation: Op, group_id: str) -> Any:
    """A whole-request GROUP_AUTHORIZATION_FAILED answer when ``operation`` on the group
    is denied, else None (for the group APIs with one top-level error code)."""
    if broker.authorizer is None or group(broker, ctx, operation, group_id):
        return None
    return error_response(ctx.response_type, ErrorCode.group_authorization_failed)


def cluster_refusal(broker: Authorizing, ctx: RequestContext, operation: Op) -> Any:
    """A whole-request CLUSTER_AUTHORIZATION_FAILED answer when ``operation`` on the
    cluster is denied, else None (for the cluster APIs with a top-level error code)."""
    if broker.authorizer is None or cluster(broker, ctx, operation):
        return None
    return error_response(ctx.response_type, ErrorCode.cluster_authorization_failed)
