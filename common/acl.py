"""Kafka's ACL model: resource patterns, access control entries, and the filters that
DescribeAcls and DeleteAcls match them with.

The numeric codes are Kafka's (ResourceType, PatternType, AclOperation, AclPermissionType),
so they travel unchanged between the wire, the metadata log and this module. Entries are
plain frozen tuples: the metadata log stores them as records and the authorizer indexes
them; nothing here decides who may do what (see ``authorizer``).
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from enum import IntEnum
from typing import Any

WILDCARD = "*"  # a literal resource name, principal or host matching every one
CLUSTER_NAME = "kafka-cluster"  # the one CLUSTER resource's name


class ResourceType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class Permission(IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


# Resource types ACLs may be written for. DELEGATION_TOKEN and USER are refused: Sluice has
# no API they would guard, and an ACL that can never apply would only mislead.
STORABLE_TYPES = frozenset(
    {ResourceType.TOPIC, ResourceType.GROUP, ResourceType.CLUSTER, ResourceType.TRANSACTIONAL_ID}
)
STORABLE_OPERATIONS = frozenset(set(AclOperation) - {AclOperation.UNKNOWN, AclOperation.ANY})


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: who (principal, host) may or may not (permission) do what (operation) to
    which resources (type, name, pattern type). The one definition of an ACL's fields: the
    broker-controller wire carries it as is and the metadata record
    (``controller.records.AccessControlEntry``) extends it with an id."""

    resource_type: int
    resource_name: str
    pattern_type: int
    principal: str
    host: str
    operation: int
    permission: int

    def acl_fields(self) -> dict[str, Any]:
        """This ACL's fields by name (only AclBinding's, also on a subclass)."""
        return {f.name: getattr(self, f.name) for f in fields(AclBinding)}

    def matches_resource(self, resource_type: int, name: str) -> bool:
        """Whether this ACL's pattern covers the resource ``name`` of ``resource_type``."""
        if self.resource_type != resource_type:
            return False
        if self.pattern_type == PatternType.LITERAL:
            return self.resource_name == name or self.resource_name == WILDCARD
        return self.pattern_type == PatternType.PREFIXED and name.startswith(self.resource_name)


class InvalidAcl(ValueError):
    """An ACL that cannot be stored (Kafka answers INVALID_REQUEST)."""


def valid_principal(principal: str) -> bool:
    """Kafka's "Type:name" form, both parts non-empty."""
    kind, sep, name = principal.partition(":")
    return bool(sep and kind and name)


def check_new(acl: AclBinding) -> None:
    """Raise InvalidAcl unless ``acl`` is concrete enough to store (no ANY/MATCH/UNKNOWN)."""
    if acl.resource_type in (ResourceType.DELEGATION_TOKEN, ResourceType.USER):
        raise InvalidAcl(
            f"ACLs for resource type {ResourceType(acl.resource_type).name} are not supported"
        )
    if acl.resource_type not in STORABLE_TYPES:
        raise InvalidAcl(f"Invalid resource type {acl.resource_type}")
    if acl.pattern_type not in (PatternType.LITERAL, PatternType.PREFIXED):
        raise InvalidAcl(f"Invalid pattern type {acl.pattern_type}: use LITERAL or PREFIXED")
    if not acl.resource_name:
        raise InvalidAcl("Resource name must not be empty")
    if acl.pattern_type == PatternType.PREFIXED and acl.resource_name == WILDCARD:
        raise InvalidAcl("A PREFIXED pattern cannot be the wildcard '*'")
    if acl.resource_type == ResourceType.CLUSTER and acl.resource_name != CLUSTER_NAME:
        raise InvalidAcl(f"The cluster resource is named {CLUSTER_NAME!r}")
    if acl.operation not in STORABLE_OPERATIONS:
        raise InvalidAcl(f"Invalid operation {acl.operation}")
    if acl.permission not in (Permission.ALLOW, Permission.DENY):
        raise InvalidAcl(f"Invalid permission type {acl.permission}")
    if not valid_principal(acl.principal):
        raise InvalidAcl(f"Invalid principal {acl.principal!r}: expected Type:name")
    if not acl.host:
        raise InvalidAcl("Host must not be empty (use '*' for every host)")


@dataclass(frozen=True, slots=True)
class AclFilter:
    """A DescribeAcls / DeleteAcls filter. None for a name, principal or host matches any;
    ANY for a type, operation or permission matches any; pattern type MATCH matches the
    ACLs that would apply to the named resource (literal, wildcard and prefixes)."""

    resource_type: int
    resource_name: str | None
    pattern_type: int
    principal: str | None
    host: str | None
    operation: int
    permission: int

    def check(self) -> None:
        """Raise InvalidAcl for a filter with codes outside Kafka's (UNKNOWN included)."""
        for value, enum in (
            (self.resource_type, ResourceType),
            (self.pattern_type, PatternType),
            (self.operation, AclOperation),
            (self.permission, Permission),
        ):
            if value not in enum._value2member_map_ or value == 0:
                raise InvalidAcl(f"Invalid {enum.__name__} {value} in filter")

    def matches(self, acl: AclBinding) -> bool:
        if self.resource_type != ResourceType.ANY and acl.resource_type != self.resource_type:
            return False
        if not self._pattern_matches(acl):
            return False
        if self.principal is not None and acl.principal != self.principal:
            return False
        if self.host is not None and acl.host != self.host:
            return False
        if self.operation != AclOperation.ANY and acl.operation != self.operation:
            return False
        return self.permission == Permission.ANY or acl.permission == self.permission

    def _pattern_matches(self, acl: AclBinding) -> bool:
        name = self.resource_name
        if self.pattern_type == PatternType.ANY:
            return name is None or acl.resource_name == name
        if self.pattern_type == PatternType.MATCH:
            if name is None:
                return True
            if acl.pattern_type == PatternType.LITERAL:
                return acl.resource_name == name or acl.resource_name == WILDCARD
            return acl.pattern_type == PatternType.PREFIXED and name.startswith(acl.resource_name)
        return acl.pattern_type == self.pattern_type and (name is None or acl.resource_name == name)
