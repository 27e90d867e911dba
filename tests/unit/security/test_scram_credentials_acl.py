"""With an authorizer, SCRAM credential APIs need Kafka's cluster permissions: DESCRIBE for
DescribeUserScramCredentials, ALTER for AlterUserScramCredentials; refused before anything
is read or forwarded."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from broker.admin import scram_credentials
from common.acl import (
    CLUSTER_NAME,
    AclBinding,
    AclOperation,
    PatternType,
    Permission,
    ResourceType,
)
from tests.unit.test_authorization_handlers import PRINCIPAL, FakeBroker, call


async def test_describe_needs_describe_on_the_cluster() -> None:
    answer = await call(scram_credentials.describe, FakeBroker(), 50, 0, {"users": None})
    assert answer.error_code == ErrorCode.cluster_authorization_failed
    assert answer.results == ()


async def test_alter_needs_alter_on_the_cluster() -> None:
    upsertion = {
        "name": "mallory",
        "mechanism": 2,
        "iterations": 4096,
        "salt": b"s" * 16,
        "salted_password": b"p" * 64,
    }
    answer = await call(
        scram_credentials.alter, FakeBroker(), 51, 0, {"deletions": [], "upsertions": [upsertion]}
    )
    assert [(r.user, r.error_code) for r in answer.results] == [
        ("mallory", ErrorCode.cluster_authorization_failed)
    ]
    # DESCRIBE on the cluster is not enough to alter.
    describe_only = AclBinding(
        ResourceType.CLUSTER,
        CLUSTER_NAME,
        PatternType.LITERAL,
        PRINCIPAL,
        "*",
        AclOperation.DESCRIBE,
        Permission.ALLOW,
    )
    answer = await call(
        scram_credentials.alter,
        FakeBroker(describe_only),
        51,
        0,
        {"deletions": [], "upsertions": [upsertion]},
    )
    assert answer.results[0].error_code == ErrorCode.cluster_authorization_failed
