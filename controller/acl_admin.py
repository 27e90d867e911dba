"""CreateAcls, DeleteAcls and AlterClientQuotas as the active controller decides them.

Like ``controller.logic``: pure functions of the image and the request returning the records
to commit and the answer. The requests and results are plain dataclasses that travel as JSON
between broker and controller (``controller.wire``); an ACL and an ACL filter travel as
``common.acl``'s AclBinding and AclFilter themselves.

As Kafka's AclControlManager does, creating an ACL equal to one that exists is a success that
writes nothing, and a delete filter removes every ACL it matches, answering with them.
"""

from __future__ import annotations

import ipaddress
import math
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from common.acl import AclBinding, AclFilter, InvalidAcl, check_new

from .image import MetadataImage, quota_entity
from .records import AccessControlEntry, ClientQuota, Record, RemoveAccessControlEntry
from .requests import Outcome

# Kafka's quota keys: client quotas for user / client-id entities, and KIP-612's
# connection-rate quota for ip entities (which stand alone, as in Kafka).
QUOTA_KEYS = frozenset({"producer_byte_rate", "consumer_byte_rate", "request_percentage"})
IP_QUOTA_KEYS = frozenset({"connection_creation_rate"})
QUOTA_ENTITY_TYPES = frozenset({"user", "client-id", "ip"})


@dataclass(frozen=True)
class AclCreationResult:
    error_code: int
    error_message: str | None = None


@dataclass(frozen=True)
class AclDeletionResult:
    error_code: int
    error_message: str | None = None
    deleted: list[AclBinding] = field(default_factory=list)


@dataclass(frozen=True)
class QuotaOp:
    key: str
    value: float
    remove: bool


@dataclass(frozen=True)
class QuotaAlteration:
    entity_types: list[str]
    entity_names: list[str | None]
    ops: list[QuotaOp]


@dataclass(frozen=True)
class QuotaResult:
    error_code: int
    error_message: str | None = None


def create_acls(
    image: MetadataImage, creations: Sequence[AclBinding]
) -> Outcome[list[AclCreationResult]]:
    records: list[Record] = []
    existing = {e.binding() for e in image.acls.values()}
    results = []
    for acl in creations:
        try:
            check_new(acl)
        except InvalidAcl as exc:
            results.append(AclCreationResult(int(ErrorCode.invalid_request), str(exc)))
            continue
        if acl not in existing:
            existing.add(acl)
            records.append(AccessControlEntry.of(uuid.uuid4(), acl))
        results.append(AclCreationResult(int(ErrorCode.none)))
    return Outcome(records, results)


def delete_acls(
    image: MetadataImage, filters: Sequence[AclFilter]
) -> Outcome[list[AclDeletionResult]]:
    records: list[Record] = []
    removed: set[uuid.UUID] = set()
    results = []
    for acl_filter in filters:
        try:
            acl_filter.check()
        except InvalidAcl as exc:
            results.append(AclDeletionResult(int(ErrorCode.invalid_request), str(exc)))
            continue
        deleted = []
        # Sorted by id: equal images delete (and answer) in the same order.
        for acl_id in sorted(image.acls):
            entry = image.acls[acl_id]
            if acl_filter.matches(entry):
                deleted.append(entry.binding())
                if acl_id not in removed:
                    removed.add(acl_id)
                    records.append(RemoveAccessControlEntry(acl_id))
        results.append(AclDeletionResult(int(ErrorCode.none), None, deleted))
    return Outcome(records, results)


def _check_alteration(alteration: QuotaAlteration) -> str | None:
    types = alteration.entity_types
    if not types or len(types) != len(alteration.entity_names):
        return "A quota entity needs at least one (type, name) pair"
    if len(set(types)) != len(types):
        return "A quota entity names each entity type once"
    unknown = set(types) - QUOTA_ENTITY_TYPES
    if unknown:
        return f"Unsupported quota entity type(s): {', '.join(sorted(unknown))}"
    if any(name == "" for name in alteration.entity_names):
        return "A quota entity name must not be empty (null means the default entity)"
    keys = QUOTA_KEYS
    if "ip" in types:
        if len(types) != 1:
            return "An ip quota entity cannot be combined with user or client-id"
        name = alteration.entity_names[0]
        if name is not None:
            try:
                ipaddress.ip_address(name)
            except ValueError:
                return f"{name!r} is not a valid IP address"
        keys = IP_QUOTA_KEYS
    for op in alteration.ops:
        if op.key not in keys:
            return f"Unsupported quota key {op.key!r}: use one of {', '.join(sorted(keys))}"
        if not op.remove and (not math.isfinite(op.value) or op.value <= 0):
            return f"Quota {op.key} must be a positive number, not {op.value}"
    if len({op.key for op in alteration.ops}) != len(alteration.ops):
        return "A quota key appears twice for one entity"
    return None


def alter_client_quotas(
    image: MetadataImage, alterations: Sequence[QuotaAlteration], validate_only: bool
) -> Outcome[list[QuotaResult]]:
    records: list[Record] = []
    results = []
    for alteration in alterations:
        problem = _check_alteration(alteration)
        if problem is not None:
            code = ErrorCode.invalid_request
            if "Unsupported quota key" in problem or "must be a positive" in problem:
                code = ErrorCode.invalid_config
            results.append(QuotaResult(int(code), problem))
            continue
        results.append(QuotaResult(int(ErrorCode.none)))
        if validate_only:
            continue
        entity = quota_entity(alteration.entity_types, alteration.entity_names)
        types = tuple(t for t, _ in entity)
        names = tuple(n for _, n in entity)
        for op in alteration.ops:
            value = None if op.remove else repr(float(op.value))
            records.append(ClientQuota(types, names, op.key, value))
    return Outcome(records, results)
