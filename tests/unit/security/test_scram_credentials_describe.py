"""DescribeUserScramCredentials: which users are described. Kafka's request schema says
"null/empty to describe all users", and Kafka's Java AdminClient sends an empty list for
``describeUserScramCredentials()`` (what ``kafka-configs --describe --entity-type users``
without a name uses): every user with a credential, not none."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from kio.schema.errors import ErrorCode

from broker.admin import scram_credentials
from tests.unit.test_authorization_handlers import call


def broker_with_credentials() -> Any:
    credentials = {
        ("alice", "SCRAM-SHA-256"): SimpleNamespace(iterations=8192),
        ("admin", "SCRAM-SHA-512"): SimpleNamespace(iterations=4096),
    }
    image = SimpleNamespace(scram_credentials=credentials)
    return SimpleNamespace(authorizer=None, controller=SimpleNamespace(image=image))


def described(answer: Any) -> dict[str, Any]:
    return {
        r.user: (r.error_code, [(int(c.mechanism), int(c.iterations)) for c in r.credential_infos])
        for r in answer.results
    }


async def test_null_and_empty_both_describe_every_user() -> None:
    every = {"admin": (ErrorCode.none, [(2, 4096)]), "alice": (ErrorCode.none, [(1, 8192)])}
    for users in (None, []):
        answer = await call(
            scram_credentials.describe, broker_with_credentials(), 50, 0, {"users": users}
        )
        assert answer.error_code == ErrorCode.none
        assert described(answer) == every, users


async def test_named_users_only_and_an_unknown_one_is_not_found() -> None:
    answer = await call(
        scram_credentials.describe,
        broker_with_credentials(),
        50,
        0,
        {"users": [{"name": "alice"}, {"name": "nobody"}]},
    )
    assert described(answer) == {
        "alice": (ErrorCode.none, [(1, 8192)]),
        "nobody": (ErrorCode.resource_not_found, []),
    }
