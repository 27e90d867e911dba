"""Authentication meets authorization: the principal a SASL login or a client certificate
yields is the one ACLs are written for. One broker with the StandardAuthorizer, a
SASL_PLAINTEXT listener (PLAIN users admin, alice, bob; admin is a super user) and an SSL
listener with required client certificates (carol's certificate subject is her principal)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trustme
from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from sluice.launch.process import free_port

from ._kafka import unique_topic
from ._secure import confluent_roundtrip, expected, sasl_conf, with_authorizer
from .conftest import SluiceBroker

pytestmark = pytest.mark.e2e

CAROL_DN = "CN=carol,OU=payments,O=Example"


@pytest.fixture(scope="module")
def setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    tmp: Path = tmp_path_factory.mktemp("authn-acls")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    server = ca.issue_cert("127.0.0.1")
    server.private_key_and_cert_chain_pem.write_to_path(str(tmp / "server.pem"))
    carol = ca.issue_cert(
        "carol.example",
        common_name="carol",
        organization_unit_name="payments",
        organization_name="Example",
    )
    carol.cert_chain_pems[0].write_to_path(str(tmp / "carol.pem"))
    carol.private_key_pem.write_to_path(str(tmp / "carol.key"))
    (tmp / "jaas.conf").write_text(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'user_admin="admin-pw" user_alice="alice-pw" user_bob="bob-pw";'
    )
    sasl, ssl_port = free_port(), free_port()
    broker = SluiceBroker(
        tmp / "b",
        options={
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{sasl},SSL://127.0.0.1:{ssl_port}",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": f"${{file:{tmp / 'jaas.conf'}}}",
            "ssl.certificate.location": str(tmp / "server.pem"),
            "ssl.ca.location": str(tmp / "ca.pem"),
            "ssl.client.auth": "required",
            **with_authorizer("User:admin"),
        },
        port=sasl,
    )
    broker.start()
    try:

        def plain(user: str, password: str) -> dict[str, Any]:
            return sasl_conf(f"127.0.0.1:{sasl}", "PLAIN", user, password)

        carol_conf = {
            "bootstrap.servers": f"127.0.0.1:{ssl_port}",
            "security.protocol": "SSL",
            "ssl.ca.location": str(tmp / "ca.pem"),
            "ssl.certificate.location": str(tmp / "carol.pem"),
            "ssl.key.location": str(tmp / "carol.key"),
        }
        yield {
            "admin": plain("admin", "admin-pw"),
            "alice": plain("alice", "alice-pw"),
            "bob": plain("bob", "bob-pw"),
            "carol": carol_conf,
        }
    finally:
        with contextlib.suppress(Exception):
            broker.stop()


def grant(admin_conf: dict[str, Any], principal: str, topic: str) -> None:
    """WRITE and READ on the topic, READ on every group."""
    admin = AdminClient(admin_conf)
    admin.create_topics([NewTopic(topic, 1)])[topic].result(20)
    bindings = [
        AclBinding(
            ResourceType.TOPIC,
            topic,
            ResourcePatternType.LITERAL,
            principal,
            "*",
            op,
            AclPermissionType.ALLOW,
        )
        for op in (AclOperation.WRITE, AclOperation.READ)
    ]
    bindings.append(
        AclBinding(
            ResourceType.GROUP,
            "*",
            ResourcePatternType.LITERAL,
            principal,
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
    )
    for future in admin.create_acls(bindings).values():
        future.result(20)


def refused_produce(conf: dict[str, Any], topic: str) -> KafkaError:
    from confluent_kafka import Producer

    errors: list[KafkaError] = []
    producer = Producer({**conf, "message.timeout.ms": 5000, "error_cb": errors.append})
    producer.produce(topic, b"x", on_delivery=lambda err, msg: errors.append(err))
    producer.flush(15)
    assert errors, "the produce was not refused"
    return errors[-1]


def test_sasl_users_get_what_their_acls_grant(setup: dict[str, Any]) -> None:
    topic = unique_topic("alice-only")
    grant(setup["admin"], "User:alice", topic)
    assert confluent_roundtrip(setup["alice"], topic, 5) == expected(5)
    assert refused_produce(setup["bob"], topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED


def test_a_client_certificate_principal_is_its_rfc2253_subject(setup: dict[str, Any]) -> None:
    topic = unique_topic("carol-only")
    assert refused_produce(setup["carol"], topic).code() == KafkaError.TOPIC_AUTHORIZATION_FAILED
    grant(setup["admin"], f"User:{CAROL_DN}", topic)
    assert confluent_roundtrip(setup["carol"], topic, 5) == expected(5)
