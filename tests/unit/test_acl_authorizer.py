"""The ACL authorizer's rules (Kafka's StandardAuthorizer) and the DescribeAcls/DeleteAcls
filters, on ACL sets built in memory."""

from __future__ import annotations

import uuid
from collections.abc import Mapping

import pytest

from broker.security.authorized_operations import SUPPORTED, bits
from broker.security.authorizer import Authorizer, parse_super_users
from common.acl import (
    AclBinding,
    AclFilter,
    InvalidAcl,
    check_new,
)
from common.acl import AclOperation as Op
from common.acl import PatternType as P
from common.acl import Permission as Perm
from common.acl import ResourceType as R

ALICE, BOB = "User:alice", "User:bob"
HOST, OTHER_HOST = "10.0.0.1", "10.0.0.2"


def acl(
    name: str = "orders",
    op: Op = Op.READ,
    principal: str = ALICE,
    permission: Perm = Perm.ALLOW,
    pattern: P = P.LITERAL,
    rtype: R = R.TOPIC,
    host: str = "*",
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, host, op, permission)


class Acls:
    """A stand-in for the image: the mapping is replaced on every change, as there."""

    def __init__(self, *acls: AclBinding) -> None:
        self.current: Mapping[uuid.UUID, AclBinding] = {uuid.uuid4(): a for a in acls}

    def add(self, *acls: AclBinding) -> None:
        self.current = {**self.current, **{uuid.uuid4(): a for a in acls}}

    def __call__(self) -> Mapping[uuid.UUID, AclBinding]:
        return self.current


def authorizer(*acls: AclBinding, **kw: object) -> Authorizer:
    return Authorizer(Acls(*acls), **kw)  # type: ignore[arg-type]


def can(
    a: Authorizer,
    op: Op,
    name: str = "orders",
    principal: str = ALICE,
    rtype: R = R.TOPIC,
    host: str = HOST,
) -> bool:
    return a.authorize(principal, host, op, rtype, name)


def test_literal_acl_allows_only_its_resource_principal_and_operation() -> None:
    a = authorizer(acl("orders", Op.READ))
    assert can(a, Op.READ)
    assert not can(a, Op.WRITE)
    assert not can(a, Op.READ, "payments")
    assert not can(a, Op.READ, principal=BOB)
    assert not can(a, Op.READ, rtype=R.GROUP)


def test_prefixed_acl_covers_a_family_of_names() -> None:
    a = authorizer(acl("orders-", Op.WRITE, pattern=P.PREFIXED))
    assert can(a, Op.WRITE, "orders-eu") and can(a, Op.WRITE, "orders-")
    assert not can(a, Op.WRITE, "orders") and not can(a, Op.WRITE, "xorders-eu")


def test_wildcard_resource_and_wildcard_principal() -> None:
    a = authorizer(acl("*", Op.READ), acl("shared", Op.WRITE, principal="User:*"))
    assert can(a, Op.READ, "anything") and not can(a, Op.READ, "anything", principal=BOB)
    assert can(a, Op.WRITE, "shared", principal=BOB)
    assert not can(a, Op.WRITE, "other", principal=BOB)


def test_deny_wins_over_allow() -> None:
    a = authorizer(
        acl("*", Op.ALL),
        acl("secret", Op.READ, permission=Perm.DENY),
        acl("private-", Op.ALL, permission=Perm.DENY, pattern=P.PREFIXED),
    )
    assert can(a, Op.READ, "public") and can(a, Op.WRITE, "secret")
    assert not can(a, Op.READ, "secret")
    assert not can(a, Op.WRITE, "private-x") and not can(a, Op.DESCRIBE, "private-x")
    # A DENY applies to its principal only.
    b = authorizer(acl("t", Op.READ, principal="User:*"), acl("t", Op.READ, permission=Perm.DENY))
    assert can(b, Op.READ, "t", principal=BOB) and not can(b, Op.READ, "t")


def test_hosts() -> None:
    a = authorizer(acl(host=HOST), acl("orders", Op.WRITE, host=OTHER_HOST))
    assert can(a, Op.READ, host=HOST) and not can(a, Op.READ, host=OTHER_HOST)
    assert can(a, Op.WRITE, host=OTHER_HOST) and not can(a, Op.WRITE, host=HOST)
    deny = authorizer(acl(op=Op.ALL), acl(op=Op.READ, permission=Perm.DENY, host=OTHER_HOST))
    assert can(deny, Op.READ, host=HOST) and not can(deny, Op.READ, host=OTHER_HOST)


@pytest.mark.parametrize("granted", [Op.READ, Op.WRITE, Op.DELETE, Op.ALTER, Op.DESCRIBE])
def test_describe_is_implied(granted: Op) -> None:
    assert can(authorizer(acl(op=granted)), Op.DESCRIBE)


def test_implications_are_kafkas_and_no_more() -> None:
    assert not can(authorizer(acl(op=Op.CREATE)), Op.DESCRIBE)
    assert not can(authorizer(acl(op=Op.DESCRIBE)), Op.READ)
    assert can(authorizer(acl(op=Op.ALTER_CONFIGS)), Op.DESCRIBE_CONFIGS)
    assert not can(authorizer(acl(op=Op.DESCRIBE_CONFIGS)), Op.ALTER_CONFIGS)
    assert not can(authorizer(acl(op=Op.ALTER)), Op.ALTER_CONFIGS)
    every = authorizer(acl(op=Op.ALL))
    assert all(can(every, op) for op in SUPPORTED["topic"])
    # A DENY of READ does not deny DESCRIBE that WRITE implies.
    mixed = authorizer(acl(op=Op.WRITE), acl(op=Op.READ, permission=Perm.DENY))
    assert can(mixed, Op.DESCRIBE) and not can(mixed, Op.READ)


def test_super_users_may_do_anything_even_when_denied() -> None:
    supers = parse_super_users(" User:admin ; User:ops;")
    assert supers == {"User:admin", "User:ops"}
    a = authorizer(acl(principal="User:admin", op=Op.ALL, permission=Perm.DENY), super_users=supers)
    assert can(a, Op.DELETE, principal="User:admin")
    assert can(a, Op.ALTER, "kafka-cluster", principal="User:ops", rtype=R.CLUSTER)
    assert not can(a, Op.READ, principal=BOB)


def test_no_acl_found() -> None:
    assert not can(authorizer(), Op.READ)
    everyone = authorizer(
        acl("orders", Op.READ, principal=BOB), allow_everyone_if_no_acl_found=True
    )
    assert can(everyone, Op.WRITE, "no-acls-here")
    # ACLs exist for the resource (for someone else): no "everyone" fallback.
    assert not can(everyone, Op.READ, "orders")


def test_decisions_follow_acl_changes() -> None:
    acls = Acls()
    a = Authorizer(acls)  # type: ignore[arg-type]
    assert not can(a, Op.READ)  # cached...
    acls.add(acl())
    assert can(a, Op.READ)  # ...until the ACL set changes


def test_authorize_any_topic_write_for_idempotence() -> None:
    def any_write(*acls: AclBinding) -> bool:
        return authorizer(*acls).authorize_any(ALICE, HOST, Op.WRITE, R.TOPIC)

    assert any_write(acl("t", Op.WRITE))
    assert any_write(acl("p-", Op.ALL, pattern=P.PREFIXED))
    assert not any_write(acl("t", Op.READ))
    assert not any_write(acl("t", Op.WRITE, principal=BOB))
    assert not any_write(acl("t", Op.WRITE), acl("*", Op.WRITE, permission=Perm.DENY))
    assert not any_write(acl("t", Op.WRITE), acl("t", Op.WRITE, permission=Perm.DENY))
    assert not any_write(
        acl("pre-x", Op.WRITE), acl("pre-", Op.WRITE, permission=Perm.DENY, pattern=P.PREFIXED)
    )


def test_authorized_operations_bits() -> None:
    a = authorizer(acl(op=Op.READ), acl(op=Op.ALTER_CONFIGS))
    expected = {Op.READ, Op.DESCRIBE, Op.ALTER_CONFIGS, Op.DESCRIBE_CONFIGS}
    assert a.operations(ALICE, HOST, "topic", "orders") == sum(1 << int(o) for o in expected)
    assert a.operations(BOB, HOST, "topic", "orders") == 0
    supers = authorizer(super_users=frozenset({BOB}))
    assert supers.operations(BOB, HOST, "cluster", "kafka-cluster") == bits(SUPPORTED["cluster"])


def test_new_acls_are_checked() -> None:
    check_new(acl())
    check_new(acl("kafka-cluster", Op.ALTER, rtype=R.CLUSTER))
    bad = [
        acl(rtype=R.ANY),
        acl(rtype=R.USER),
        acl(pattern=P.MATCH),
        acl(op=Op.ANY),
        acl(permission=Perm.ANY),
        acl(principal="alice"),
        acl(name=""),
        acl(host=""),
        acl("*", pattern=P.PREFIXED),
        acl("other-cluster", rtype=R.CLUSTER),
        AclBinding(99, "t", 3, ALICE, "*", 3, 3),
    ]
    for binding in bad:
        with pytest.raises(InvalidAcl):
            check_new(binding)


def flt(
    rtype: R = R.ANY,
    name: str | None = None,
    pattern: P = P.ANY,
    principal: str | None = None,
    host: str | None = None,
    op: Op = Op.ANY,
    permission: Perm = Perm.ANY,
) -> AclFilter:
    return AclFilter(rtype, name, pattern, principal, host, op, permission)


def test_filters() -> None:
    lit = acl("orders", Op.READ)
    wild = acl("*", Op.WRITE, principal=BOB)
    pre = acl("ord", Op.ALL, pattern=P.PREFIXED, permission=Perm.DENY)
    group = acl("g", Op.READ, rtype=R.GROUP)
    every = [lit, wild, pre, group]

    def hits(f: AclFilter) -> list[AclBinding]:
        return [a for a in every if f.matches(a)]

    assert hits(flt()) == every
    assert hits(flt(R.TOPIC)) == [lit, wild, pre]
    assert hits(flt(name="orders")) == [lit]  # ANY: exact names of any pattern type
    assert hits(flt(R.TOPIC, "orders", P.MATCH)) == [lit, wild, pre]
    assert hits(flt(R.TOPIC, "other", P.MATCH)) == [wild]
    assert hits(flt(pattern=P.LITERAL)) == [lit, wild, group]
    assert hits(flt(pattern=P.PREFIXED, name="ord")) == [pre]
    assert hits(flt(principal=BOB)) == [wild]
    assert hits(flt(op=Op.ALL)) == [pre]
    assert hits(flt(permission=Perm.DENY)) == [pre]
    assert hits(flt(host="10.9.9.9")) == []
    flt().check()
    for bad in (flt(rtype=R.UNKNOWN), flt(op=Op.UNKNOWN), AclFilter(42, None, 1, None, None, 1, 1)):
        with pytest.raises(InvalidAcl):
            bad.check()
