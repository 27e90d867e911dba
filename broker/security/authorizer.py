"""The ACL authorizer: may this principal, from this host, perform this operation on this
resource? Kafka's StandardAuthorizer rules:

* a super user (``super.users``) may do anything;
* ACLs apply to a resource when their pattern covers it: a LITERAL name equal to it or the
  wildcard ``*``, or a PREFIXED name it starts with;
* of those, the ones for this principal (or ``User:*``) and host (or ``*``) count: a DENY
  for the operation (or ALL) wins over any ALLOW; an ALLOW for the operation, for ALL, or
  for an operation implying it (READ, WRITE, DELETE and ALTER imply DESCRIBE; ALTER_CONFIGS
  implies DESCRIBE_CONFIGS) allows;
* a resource no ACL applies to at all is allowed only with
  ``allow.everyone.if.no.acl.found=true``; one with ACLs for others only is denied.

Decisions are cached per (principal, host, operation, resource) until the ACL set changes:
the ACLs live in the metadata image, which replaces its ACL mapping on every change, so a
change of that object's identity is the invalidation signal and the hot path costs one dict
lookup.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from broker.security.authorized_operations import SUPPORTED, bits
from common.acl import WILDCARD, AclOperation, PatternType, Permission, ResourceType

WILDCARD_PRINCIPAL = "User:*"
# Bounds the decision cache: principals x hosts x resources is unbounded for a hostile
# client naming random topics; past this the cache starts over.
CACHE_MAX = 100_000

_IMPLIES_DESCRIBE = frozenset(
    {
        AclOperation.DESCRIBE,
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DELETE,
        AclOperation.ALTER,
    }
)
_IMPLIES_DESCRIBE_CONFIGS = frozenset({AclOperation.DESCRIBE_CONFIGS, AclOperation.ALTER_CONFIGS})
_KINDS = {
    "topic": ResourceType.TOPIC,
    "group": ResourceType.GROUP,
    "cluster": ResourceType.CLUSTER,
}


def parse_super_users(value: str) -> frozenset[str]:
    """``super.users``: principals separated by semicolons (Kafka's format)."""
    return frozenset(p.strip() for p in value.split(";") if p.strip())


def allows(acl_operation: int, operation: int) -> bool:
    """Whether an ALLOW ACL for ``acl_operation`` allows ``operation``."""
    if acl_operation == AclOperation.ALL or acl_operation == operation:
        return True
    if operation == AclOperation.DESCRIBE:
        return acl_operation in _IMPLIES_DESCRIBE
    if operation == AclOperation.DESCRIBE_CONFIGS:
        return acl_operation in _IMPLIES_DESCRIBE_CONFIGS
    return False


class _Index:
    """ACLs by resource type: literal ones by name, prefixed ones by prefix."""

    def __init__(self, acls: Iterable[Any]) -> None:
        self.literal: dict[tuple[int, str], list[Any]] = {}
        self.prefixed: dict[tuple[int, str], list[Any]] = {}
        self.prefix_lengths: dict[int, set[int]] = {}
        self.types: set[int] = set()
        for acl in acls:
            key = (acl.resource_type, acl.resource_name)
            self.types.add(acl.resource_type)
            if acl.pattern_type == PatternType.LITERAL:
                self.literal.setdefault(key, []).append(acl)
            elif acl.pattern_type == PatternType.PREFIXED:
                self.prefixed.setdefault(key, []).append(acl)
                self.prefix_lengths.setdefault(acl.resource_type, set()).add(len(acl.resource_name))
        self.all = [
            acl for group in (self.literal, self.prefixed) for v in group.values() for acl in v
        ]

    def applying_to(self, resource_type: int, name: str) -> list[Any]:
        found = list(self.literal.get((resource_type, name), ()))
        if name != WILDCARD:
            found += self.literal.get((resource_type, WILDCARD), ())
        for length in self.prefix_lengths.get(resource_type, ()):
            if length <= len(name):
                found += self.prefixed.get((resource_type, name[:length]), ())
        return found


class Authorizer:
    def __init__(
        self,
        acls: Callable[[], Mapping[Any, Any]],
        super_users: frozenset[str] = frozenset(),
        allow_everyone_if_no_acl_found: bool = False,
    ) -> None:
        """``acls`` returns the current ACLs (objects with AclBinding's fields) keyed by
        id; the mapping must be replaced, not mutated, when they change."""
        self._source = acls
        self.super_users = super_users
        self.allow_everyone = allow_everyone_if_no_acl_found
        self._seen: Mapping[Any, Any] | None = None
        self._index = _Index(())
        self._cache: dict[tuple[str, str, int, int, str], bool] = {}

    def _current(self) -> _Index:
        acls = self._source()
        if acls is not self._seen:
            self._seen = acls
            self._index = _Index(acls.values())
            self._cache = {}
        return self._index

    def authorize(
        self, principal: str, host: str, operation: int, resource_type: int, name: str
    ) -> bool:
        index = self._current()
        key = (principal, host, operation, resource_type, name)
        decision = self._cache.get(key)
        if decision is None:
            decision = self._decide(index, principal, host, operation, resource_type, name)
            if len(self._cache) >= CACHE_MAX:
                self._cache = {}
            self._cache[key] = decision
        return decision

    def _decide(
        self, index: _Index, principal: str, host: str, operation: int, rtype: int, name: str
    ) -> bool:
        if principal in self.super_users:
            return True
        acls = index.applying_to(rtype, name)
        if not acls:
            return self.allow_everyone
        allowed = False
        for acl in acls:
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.host != WILDCARD and acl.host != host:
                continue
            if acl.permission == Permission.DENY:
                if acl.operation == AclOperation.ALL or acl.operation == operation:
                    return False
            elif not allowed and allows(acl.operation, operation):
                allowed = True
        return allowed

    def authorize_any(self, principal: str, host: str, operation: int, rtype: int) -> bool:
        """Whether the principal may perform ``operation`` on *some* resource of the type
        (Kafka's authorizeByResourceType, KIP-679: any topic WRITE allows idempotence):
        an ALLOW pattern not wholly covered by a DENY of the same principal."""
        if principal in self.super_users:
            return True
        index = self._current()
        if rtype not in index.types:
            return self.allow_everyone
        allow: list[Any] = []
        deny: list[Any] = []
        for acl in index.all:
            if acl.resource_type != rtype:
                continue
            if acl.principal != principal and acl.principal != WILDCARD_PRINCIPAL:
                continue
            if acl.host != WILDCARD and acl.host != host:
                continue
            if acl.permission == Permission.DENY:
                if acl.operation in (AclOperation.ALL, operation):
                    deny.append(acl)
            elif acl.operation in (AclOperation.ALL, operation):
                allow.append(acl)
        deny_prefixes = [d.resource_name for d in deny if d.pattern_type == PatternType.PREFIXED]
        deny_literals = {d.resource_name for d in deny if d.pattern_type == PatternType.LITERAL}
        if WILDCARD in deny_literals:
            return False
        for acl in allow:
            name = acl.resource_name
            if any(name.startswith(p) for p in deny_prefixes):
                continue
            if acl.pattern_type == PatternType.LITERAL and name in deny_literals:
                continue
            return True
        return False

    def operations(self, principal: str, host: str, kind: str, name: str) -> int:
        """KIP-430's bit set: the supported operations of the resource that are allowed."""
        rtype = _KINDS[kind]
        allowed = frozenset(
            op for op in SUPPORTED[kind] if self.authorize(principal, host, op, rtype, name)
        )
        return bits(allowed)


def operation_names(mask: int) -> list[str]:
    """The names of the operations in a KIP-430 bit set (for messages and tests)."""
    return [op.name for op in AclOperation if mask & (1 << int(op))]
