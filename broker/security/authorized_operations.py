"""The ``*_authorized_operations`` bit sets of Metadata, DescribeCluster, DescribeGroups and
DescribeTopicPartitions (KIP-430).

Kafka answers with the operations the caller may perform on the resource: with no
authorizer configured, every operation the resource type supports (``authorized``); with
one, the supported operations its ACLs allow (``broker.security.access.operations``).
"""

from __future__ import annotations

from common.acl import AclOperation

# Kafka's "not requested" value (Integer.MIN_VALUE).
NOT_REQUESTED = -(2**31)


_O = AclOperation
SUPPORTED: dict[str, frozenset[AclOperation]] = {
    "topic": frozenset(
        {_O.READ, _O.WRITE, _O.CREATE, _O.DELETE, _O.ALTER, _O.DESCRIBE}
        | {_O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}
    ),
    "group": frozenset({_O.READ, _O.DESCRIBE, _O.DELETE, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}),
    "cluster": frozenset(
        {_O.CREATE, _O.CLUSTER_ACTION, _O.DESCRIBE_CONFIGS, _O.ALTER_CONFIGS}
        | {_O.IDEMPOTENT_WRITE, _O.ALTER, _O.DESCRIBE}
    ),
}


def bits(operations: frozenset[AclOperation]) -> int:
    return sum(1 << int(op) for op in operations)


def authorized(resource_type: str, requested: bool = True) -> int:
    """The bit set for one resource (every supported operation: no authorizer), or
    NOT_REQUESTED when the client did not ask for it."""
    if not requested:
        return NOT_REQUESTED
    return bits(SUPPORTED[resource_type])
