"""A broker as a client of another broker's secured listener: the SASL client exchanges
against this broker's own server side, and the inter-broker settings (what is missing is
named, passwords never are)."""

from __future__ import annotations

import asyncio
import ssl

import pytest

from broker.config import load_config
from broker.security.inter_broker import inter_broker_security
from broker.security.listeners import listener_plan
from broker.security.sasl import SaslAuthenticator, SaslSession
from broker.security.sasl_client import (
    SaslClientFailure,
    SaslCredentials,
    ScramClient,
    client_exchange,
)
from broker.security.scram import credential_from_password

SCRAM_JAAS = (
    "org.apache.kafka.common.security.scram.ScramLoginModule required "
    'username="broker" password="b-secret";'
)


def run_exchange(session: SaslSession, credentials: SaslCredentials) -> SaslSession:
    session.handshake(1, credentials.mechanism)
    exchange = client_exchange(credentials)
    message: bytes | None = exchange.first()
    while message is not None:
        answer, close = session.authenticate(2, message)
        assert answer["error_code"] == 0, answer
        assert not close
        message = exchange.step(answer["auth_bytes"])
    assert exchange.done
    return session


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_scram_client_logs_in_and_checks_the_server(mechanism: str) -> None:
    credential = credential_from_password(mechanism, "b-secret", 4096)
    config = load_config({"sasl.enabled.mechanisms": mechanism})
    auth = SaslAuthenticator(
        config, "SASL_SSL", lambda u, m: credential if (u, m) == ("broker", mechanism) else None
    )
    session = run_exchange(SaslSession(auth), SaslCredentials(mechanism, "broker", "b-secret"))
    assert session.principal == "User:broker"
    # A wrong password is refused by the server.
    bad = SaslSession(auth)
    bad.handshake(1, mechanism)
    client = client_exchange(SaslCredentials(mechanism, "broker", "nope"))
    first, _ = bad.authenticate(2, client.first())
    final = client.step(first["auth_bytes"])
    answer, close = bad.authenticate(2, final or b"")
    assert answer["error_code"] != 0 and close


def test_plain_client_logs_in() -> None:
    config = load_config(
        {
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": "org.apache.kafka.common.security.plain.PlainLoginModule "
            'required user_broker="pw";',
        }
    )
    auth = SaslAuthenticator(config, "SASL_PLAINTEXT", lambda u, m: None)
    session = run_exchange(SaslSession(auth), SaslCredentials("PLAIN", "broker", "pw"))
    assert session.principal == "User:broker"


def test_scram_client_refuses_hostile_server_answers() -> None:
    client = ScramClient("SCRAM-SHA-256", "broker", "pw")
    first = client.first().decode()
    nonce = first.split("r=", 1)[1]
    with pytest.raises(SaslClientFailure):
        ScramClient("SCRAM-SHA-256", "broker", "pw").step(b"\xff\xfe")
    # An iteration count that would keep the event loop busy for minutes.
    with pytest.raises(SaslClientFailure):
        client.step(f"r={nonce}xyz,s=c2FsdHNhbHRzYWx0c2FsdA==,i=1000000000".encode())
    # A server signature that does not prove knowledge of the password.
    other = ScramClient("SCRAM-SHA-256", "broker", "pw")
    nonce = other.first().decode().split("r=", 1)[1]
    assert other.step(f"r={nonce}xyz,s=c2FsdHNhbHRzYWx0c2FsdA==,i=4096".encode())
    with pytest.raises(SaslClientFailure):
        other.step(b"v=AAAA")


def plan_and_config(settings: dict[str, str]):  # type: ignore[no-untyped-def]
    config = load_config(settings)
    return config, listener_plan(config)


def test_plaintext_inter_broker_needs_nothing() -> None:
    config, plan = plan_and_config({})
    security = inter_broker_security(config, plan)
    assert security.ssl_context is None and security.sasl is None


def test_sasl_inter_broker_credentials_from_the_listener_jaas() -> None:
    config, plan = plan_and_config(
        {
            "listeners": "SASL_PLAINTEXT://127.0.0.1:0",
            "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
            "listener.name.sasl_plaintext.scram-sha-512.sasl.jaas.config": SCRAM_JAAS,
        }
    )
    security = inter_broker_security(config, plan)
    assert security.sasl is not None
    assert (security.sasl.mechanism, security.sasl.username) == ("SCRAM-SHA-512", "broker")
    assert "b-secret" not in repr(security)


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({}, "set sasl.mechanism.inter.broker.protocol"),
        ({"sasl.mechanism.inter.broker.protocol": "GSSAPI"}, "not supported"),
        (
            {
                "sasl.mechanism.inter.broker.protocol": "PLAIN",
                "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            },
            "not in listener",
        ),
        ({"sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512"}, "username= and password="),
    ],
)
def test_sasl_inter_broker_misconfiguration_is_named(
    settings: dict[str, str], message: str
) -> None:
    config, plan = plan_and_config({"listeners": "SASL_PLAINTEXT://127.0.0.1:0", **settings})
    with pytest.raises(ValueError, match=message):
        inter_broker_security(config, plan)


def test_tls_inter_broker_checks_host_names_unless_told_not_to(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from sluice.secure import generate

    files = generate(tmp_path / "tls", ["127.0.0.1"])
    base = {
        "listeners": "SSL://127.0.0.1:0",
        "ssl.certificate.location": str(files.server_cert),
        "ssl.key.location": str(files.server_key),
        "ssl.ca.location": str(files.ca),
    }
    security = inter_broker_security(*plan_and_config(base))
    assert security.ssl_context is not None and security.ssl_context.check_hostname
    assert security.ssl_context.verify_mode == ssl.CERT_REQUIRED
    off = {**base, "ssl.endpoint.identification.algorithm": ""}
    context = inter_broker_security(*plan_and_config(off)).ssl_context
    assert context is not None and not context.check_hostname
    assert context.verify_mode == ssl.CERT_REQUIRED
    missing = {**base, "ssl.ca.location": str(tmp_path / "nope.pem")}
    with pytest.raises(ValueError, match="cannot load TLS files"):
        inter_broker_security(*plan_and_config(missing))


def test_tls_connection_to_a_server_with_an_unknown_ca_fails_as_authentication(  # type: ignore[no-untyped-def]
    tmp_path,
) -> None:
    from kio.schema.sasl_handshake.v1.request import SaslHandshakeRequest

    from broker.logs.classic.kafka_client import AuthenticationFailed, KafkaConnection
    from broker.security.tls import server_context
    from sluice.secure import generate

    theirs = generate(tmp_path / "theirs", ["127.0.0.1"])
    ours = generate(tmp_path / "ours", ["127.0.0.1"])
    server_config = load_config(
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.certificate.location": str(theirs.server_cert),
            "ssl.key.location": str(theirs.server_key),
        }
    )
    client_config, plan = plan_and_config(
        {
            "listeners": "SSL://127.0.0.1:0",
            "ssl.certificate.location": str(ours.server_cert),
            "ssl.key.location": str(ours.server_key),
            "ssl.ca.location": str(ours.ca),
        }
    )

    async def main() -> None:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            writer.close()

        server = await asyncio.start_server(
            serve, "127.0.0.1", 0, ssl=server_context(server_config, "SSL")
        )
        port = server.sockets[0].getsockname()[1]
        conn = KafkaConnection(
            "127.0.0.1", port, "test", inter_broker_security(client_config, plan)
        )
        try:
            with pytest.raises(AuthenticationFailed, match="TLS"):
                await conn.request(SaslHandshakeRequest(mechanism="PLAIN"), 5.0)
        finally:
            conn.close()
            server.close()
            await server.wait_closed()

    asyncio.run(main())
