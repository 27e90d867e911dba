"""Authentication with stock clients: TLS and mTLS, SASL PLAIN / SCRAM / OAUTHBEARER, SCRAM
credentials managed through the Admin API, re-authentication (KIP-368).

One broker with five listeners (PLAINTEXT for setup, SASL_PLAINTEXT, SASL_SSL, SSL with
required client certificates, and REAUTH, a SASL_PLAINTEXT listener whose sessions last two
seconds). Certificates and the OAUTHBEARER signing key are made here, for this run only.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import ssl
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jwt
import pytest
import trustme
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.abc import AbstractTokenProvider as AioTokenProvider
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from cryptography.hazmat.primitives.asymmetric import rsa
from kafka import KafkaConsumer, KafkaProducer
from kafka.admin import KafkaAdminClient
from kafka.admin import ScramMechanism as KpScramMechanism
from kafka.admin import UserScramCredentialDeletion as KpDeletion
from kafka.admin import UserScramCredentialUpsertion as KpUpsertion
from kafka.net.sasl.oauth import AbstractTokenProvider as KpTokenProvider

from sluice.launch.process import free_port

from ._kafka import kcat, unique_topic, wait_until
from ._secure import (
    confluent_roundtrip,
    connect_errors,
    expected,
    is_auth_error,
    kcat_args,
    python_sasl_conf,
    sasl_conf,
)
from .conftest import SluiceBroker

pytestmark = pytest.mark.e2e

ALICE, ALICE_PW = "alice", "alice-secret"  # SCRAM-SHA-512 and -256, made in the fixture
BOB, BOB_PW = "bob", "bob-secret"  # PLAIN, from the JAAS config
AUDIENCE, ISSUER = "sluice-test", "https://issuer.test"
REAUTH_MS = 2000


@dataclass
class Secured:
    broker: SluiceBroker
    ports: dict[str, int]
    ca: Path
    client_cert: Path
    client_key: Path
    signing_key: rsa.RSAPrivateKey
    tmp: Path

    def bootstrap(self, listener: str) -> str:
        return f"127.0.0.1:{self.ports[listener]}"

    def token(
        self, sub: str = "svc-orders", key: rsa.RSAPrivateKey | None = None, **claims: Any
    ) -> str:
        now = int(time.time())
        body = {"sub": sub, "aud": AUDIENCE, "iss": ISSUER, "iat": now, "exp": now + 300, **claims}
        return jwt.encode(body, key or self.signing_key, algorithm="RS256", headers={"kid": "k1"})

    def ssl_context(self, client_cert: bool = False) -> ssl.SSLContext:
        context = ssl.create_default_context(cafile=str(self.ca))
        if client_cert:
            context.load_cert_chain(str(self.client_cert), str(self.client_key))
        return context


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Secured]:
    tmp = tmp_path_factory.mktemp("secured")
    ca = trustme.CA()
    ca.cert_pem.write_to_path(str(tmp / "ca.pem"))
    server = ca.issue_cert("localhost", "127.0.0.1")
    server.cert_chain_pems[0].write_to_path(str(tmp / "server.pem"))
    server.private_key_pem.write_to_path(str(tmp / "server.key"))
    client = ca.issue_cert("alice.example", common_name="alice", organization_unit_name="eng")
    client.cert_chain_pems[0].write_to_path(str(tmp / "client.pem"))
    client.private_key_pem.write_to_path(str(tmp / "client.key"))
    signing_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(signing_key.public_key()))
    (tmp / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k1", "use": "sig"}]}))
    # The JAAS config (it holds passwords) comes from a file, the documented way.
    (tmp / "jaas.conf").write_text(
        f'org.apache.kafka.common.security.plain.PlainLoginModule required user_{BOB}="{BOB_PW}";\n'
    )
    ports = {
        name: free_port() for name in ("PLAINTEXT", "SASL_PLAINTEXT", "SASL_SSL", "SSL", "REAUTH")
    }
    options = {
        "listeners": ",".join(f"{n}://127.0.0.1:{p}" for n, p in ports.items()),
        "listener.security.protocol.map": "REAUTH:SASL_PLAINTEXT",
        "ssl.certificate.location": str(tmp / "server.pem"),
        "ssl.key.location": str(tmp / "server.key"),
        "ssl.ca.location": str(tmp / "ca.pem"),
        "listener.name.ssl.ssl.client.auth": "required",
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512,OAUTHBEARER",
        "sasl.jaas.config": f"${{file:{tmp / 'jaas.conf'}}}",
        "sasl.oauthbearer.jwks.endpoint.url": f"file://{tmp / 'jwks.json'}",
        "sasl.oauthbearer.expected.audience": AUDIENCE,
        "sasl.oauthbearer.expected.issuer": ISSUER,
        "listener.name.reauth.connections.max.reauth.ms": str(REAUTH_MS),
    }
    broker = SluiceBroker(tmp / "broker", options=options, port=ports["PLAINTEXT"])
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{ports['PLAINTEXT']}"})
        futures = admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    ALICE,
                    ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 8192),
                    ALICE_PW.encode(),
                ),
                UserScramCredentialUpsertion(
                    ALICE,
                    ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096),
                    ALICE_PW.encode(),
                ),
            ]
        )
        for future in futures.values():
            future.result(20)
        yield Secured(
            broker, ports, tmp / "ca.pem", tmp / "client.pem", tmp / "client.key", signing_key, tmp
        )
    finally:
        with contextlib.suppress(Exception):
            broker.stop()
    logged = broker.log_path.read_text(errors="replace")
    assert "Traceback" not in logged, logged[logged.index("Traceback") - 500 :][:4000]
    # Passwords never reach the log, whatever happened above.
    for secret in (ALICE_PW, BOB_PW):
        assert secret not in logged


# ---------------------------------------------------------------- helpers


def kafka_python_roundtrip(conf: dict[str, Any], topic: str, n: int = 20) -> list[bytes]:
    producer = KafkaProducer(**conf)
    try:
        for i in range(n):
            producer.send(topic, f"v{i}".encode())
        producer.flush(30)
    finally:
        producer.close()
    # Iteration ends after 10 s without a record; it stops at the n-th (the caller compares
    # the first n, as it did when the loop also waited out those 10 s after the last one).
    consumer = KafkaConsumer(topic, auto_offset_reset="earliest", consumer_timeout_ms=10000, **conf)
    got: list[bytes] = []
    try:
        for m in consumer:
            got.append(m.value)
            if len(got) == n:
                break
        return got
    finally:
        consumer.close()


async def aiokafka_roundtrip(conf: dict[str, Any], topic: str, n: int = 20) -> list[bytes]:
    producer = AIOKafkaProducer(**conf)
    await producer.start()
    try:
        for i in range(n):
            await producer.send(topic, f"v{i}".encode())
        await producer.flush()
    finally:
        await producer.stop()
    consumer = AIOKafkaConsumer(topic, auto_offset_reset="earliest", **conf)
    await consumer.start()
    got: list[bytes] = []
    try:
        deadline = time.monotonic() + 30
        while len(got) < n and time.monotonic() < deadline:
            batch = await consumer.getmany(timeout_ms=500)
            for records in batch.values():
                got += [r.value for r in records]
    finally:
        await consumer.stop()
    return got


def kcat_roundtrip(args: list[str], topic: str, n: int = 20) -> list[bytes]:
    kcat(["-P", *args, "-t", topic], stdin=b"\n".join(expected(n)) + b"\n")
    out = kcat(["-C", *args, "-t", topic, "-e", "-o", "beginning", "-c", str(n)])
    return [line.encode() for line in out.splitlines()]


# ---------------------------------------------------------------- listeners


@pytest.mark.parametrize("listener", ["PLAINTEXT", "SASL_SSL", "SSL"])
def test_metadata_gives_the_address_of_the_listener_the_client_used(
    secured: Secured, listener: str
) -> None:
    conf: dict[str, Any] = {"bootstrap.servers": secured.bootstrap(listener)}
    if listener == "SASL_SSL":
        conf = scram_conf(secured)
    elif listener == "SSL":
        conf = mtls_conf(secured)
    brokers = AdminClient(conf).list_topics(timeout=10).brokers
    assert [(b.host, b.port) for b in brokers.values()] == [("127.0.0.1", secured.ports[listener])]


# ---------------------------------------------------------------- SCRAM over SASL_SSL


def scram_conf(s: Secured, mechanism: str = "SCRAM-SHA-512") -> dict[str, Any]:
    return sasl_conf(s.bootstrap("SASL_SSL"), mechanism, ALICE, ALICE_PW, s.ca)


def python_scram_conf(s: Secured) -> dict[str, Any]:
    """kafka-python's and aiokafka's form of ``scram_conf``."""
    return python_sasl_conf(
        s.bootstrap("SASL_SSL"), "SCRAM-SHA-512", ALICE, ALICE_PW, ssl_context=s.ssl_context()
    )


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-512", "SCRAM-SHA-256"])
def test_confluent_scram_over_sasl_ssl(secured: Secured, topic: str, mechanism: str) -> None:
    assert confluent_roundtrip(scram_conf(secured, mechanism), topic) == expected()


def test_kafka_python_scram_over_sasl_ssl(secured: Secured, topic: str) -> None:
    assert kafka_python_roundtrip(python_scram_conf(secured), topic) == expected()


def test_aiokafka_scram_over_sasl_ssl(secured: Secured, topic: str) -> None:
    assert asyncio.run(aiokafka_roundtrip(python_scram_conf(secured), topic)) == expected()


def test_kcat_scram_over_sasl_ssl(secured: Secured, topic: str) -> None:
    assert kcat_roundtrip(kcat_args(scram_conf(secured)), topic) == expected()


# ---------------------------------------------------------------- mTLS


def mtls_conf(s: Secured) -> dict[str, Any]:
    return {
        "bootstrap.servers": s.bootstrap("SSL"),
        "security.protocol": "SSL",
        "ssl.ca.location": str(s.ca),
        "ssl.certificate.location": str(s.client_cert),
        "ssl.key.location": str(s.client_key),
    }


def python_mtls_conf(s: Secured) -> dict[str, Any]:
    """kafka-python's and aiokafka's form of ``mtls_conf``."""
    return {
        "bootstrap_servers": s.bootstrap("SSL"),
        "security_protocol": "SSL",
        "ssl_context": s.ssl_context(client_cert=True),
    }


def test_confluent_mtls(secured: Secured, topic: str) -> None:
    assert confluent_roundtrip(mtls_conf(secured), topic) == expected()


def test_kafka_python_mtls(secured: Secured, topic: str) -> None:
    assert kafka_python_roundtrip(python_mtls_conf(secured), topic) == expected()


def test_aiokafka_mtls(secured: Secured, topic: str) -> None:
    assert asyncio.run(aiokafka_roundtrip(python_mtls_conf(secured), topic)) == expected()


def test_kcat_mtls(secured: Secured, topic: str) -> None:
    assert kcat_roundtrip(kcat_args(mtls_conf(secured)), topic) == expected()


def test_mtls_listener_refuses_a_client_without_a_certificate(secured: Secured) -> None:
    conf = {
        k: v for k, v in mtls_conf(secured).items() if "certificate" not in k and "key" not in k
    }
    admin = AdminClient(conf)
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)


# ---------------------------------------------------------------- PLAIN, OAUTHBEARER


def test_plain_over_sasl_plaintext(secured: Secured, topic: str) -> None:
    conf = sasl_conf(secured.bootstrap("SASL_PLAINTEXT"), "PLAIN", BOB, BOB_PW)
    assert confluent_roundtrip(conf, topic) == expected()
    kp = python_sasl_conf(secured.bootstrap("SASL_PLAINTEXT"), "PLAIN", BOB, BOB_PW)
    assert kafka_python_roundtrip(kp, topic + "-kp") == expected()


@pytest.mark.parametrize(
    ("mechanism", "user", "password"),
    [("PLAIN", BOB, BOB_PW), ("SCRAM-SHA-512", ALICE, ALICE_PW)],
)
def test_unframed_sasl_tokens_after_handshake_v0(
    secured: Secured, topic: str, mechanism: str, user: str, password: str
) -> None:
    """A client pinned to Kafka 0.10 (kafka-python's api_version) uses SaslHandshake v0 and
    then sends bare SASL tokens, as Kafka still accepts."""
    admin = KafkaAdminClient(
        **python_sasl_conf(secured.bootstrap("SASL_PLAINTEXT"), mechanism, user, password),
        api_version=(0, 10, 1),
        request_timeout_ms=10000,
    )
    try:
        mark = secured.broker.log_size()
        admin.list_topics()
        logged = secured.broker.log_path.read_bytes()[mark:].decode(errors="replace")
        assert "closing connection" not in logged
    finally:
        admin.close()


def oauth_conf(s: Secured, oauth_cb: Callable[[str], tuple[str, float]]) -> dict[str, Any]:
    """confluent-kafka's OAUTHBEARER settings, the token from ``oauth_cb``."""
    return {
        "bootstrap.servers": s.bootstrap("SASL_PLAINTEXT"),
        "security.protocol": "SASL_PLAINTEXT",
        "sasl.mechanisms": "OAUTHBEARER",
        "oauth_cb": oauth_cb,
    }


def test_oauthbearer_confluent(secured: Secured, topic: str) -> None:
    def oauth_cb(_config: str) -> tuple[str, float]:
        return secured.token(), time.time() + 300

    assert confluent_roundtrip(oauth_conf(secured, oauth_cb), topic) == expected()


def test_oauthbearer_kafka_python_and_aiokafka(secured: Secured, topic: str) -> None:
    class KpProvider(KpTokenProvider):
        def token(self) -> str:
            return secured.token()

    class AioProvider(AioTokenProvider):
        async def token(self) -> str:
            return secured.token()

    kp = {
        "bootstrap_servers": secured.bootstrap("SASL_PLAINTEXT"),
        "security_protocol": "SASL_PLAINTEXT",
        "sasl_mechanism": "OAUTHBEARER",
        "sasl_oauth_token_provider": KpProvider(),
    }
    assert kafka_python_roundtrip(kp, topic) == expected()
    aio = {**kp, "sasl_oauth_token_provider": AioProvider()}
    assert asyncio.run(aiokafka_roundtrip(aio, topic + "-aio")) == expected()


@pytest.mark.parametrize(
    "problem", ["foreign signing key", "wrong audience", "expired", "wrong issuer"]
)
def test_oauthbearer_refuses_bad_tokens(secured: Secured, problem: str) -> None:
    if problem == "foreign signing key":
        token = secured.token(key=rsa.generate_private_key(public_exponent=65537, key_size=2048))
    elif problem == "wrong audience":
        token = secured.token(aud="someone-else")
    elif problem == "expired":
        token = secured.token(exp=int(time.time()) - 600)
    else:
        token = secured.token(iss="https://evil.test")

    conf = oauth_conf(secured, lambda _config: (token, time.time() + 300))
    _, errors = connect_errors(conf, is_auth_error)
    auth = [e for e in errors if is_auth_error(e)]
    assert auth, f"no authentication error among {errors}"
    assert "invalid token" in auth[0].str()


# ---------------------------------------------------------------- failures


def test_wrong_password_is_sasl_authentication_failed(secured: Secured) -> None:
    conf = {**scram_conf(secured), "sasl.password": "not-the-password"}
    _, errors = connect_errors(conf, is_auth_error)
    auth = [e for e in errors if is_auth_error(e)]
    assert auth, f"no authentication error among {errors}"
    # The broker's message (SaslAuthenticate's error_message) reaches the user.
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in auth[0].str()

    # PLAIN answers with its own message.
    plain = sasl_conf(secured.bootstrap("SASL_PLAINTEXT"), "PLAIN", BOB, "wrong")
    _, errors = connect_errors(plain, is_auth_error)
    assert any("Invalid username or password" in e.str() for e in errors), errors


def test_plaintext_client_on_a_tls_port_is_closed_quickly(secured: Secured) -> None:
    """A client configured for PLAINTEXT against a TLS listener is disconnected at once
    (its bytes fail the TLS handshake) instead of hanging until its own timeout."""
    conf = {"bootstrap.servers": secured.bootstrap("SASL_SSL"), "socket.timeout.ms": 30000}
    down = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    elapsed, errors = connect_errors(conf, lambda e: e.code() in down, timeout=20)
    assert any(e.code() in down for e in errors), errors
    assert elapsed < 3, f"disconnected only after {elapsed:.1f} s"


def test_silent_connection_to_a_tls_port_is_dropped(secured: Secured) -> None:
    """Not a Kafka client at all: a socket that never starts the TLS handshake is closed by
    the broker's handshake timeout, so idle sockets cannot pile up."""
    with socket.create_connection(("127.0.0.1", secured.ports["SSL"]), timeout=30) as s:
        started = time.monotonic()
        assert s.recv(1) == b""  # EOF: the broker closed it
        assert time.monotonic() - started < 20


# ---------------------------------------------------------------- re-authentication (KIP-368)


def test_reauthenticating_clients_keep_working_past_the_session_lifetime(
    secured: Secured, topic: str
) -> None:
    conf = sasl_conf(secured.bootstrap("REAUTH"), "SCRAM-SHA-256", ALICE, ALICE_PW)
    mark = secured.broker.log_size()
    producer = Producer(conf)
    for round_ in range(3):
        producer.produce(topic, f"v{round_}".encode())
        assert producer.flush(20) == 0
        time.sleep(REAUTH_MS * 1.5 / 1000)  # past a session lifetime each round
    consumer = Consumer({**conf, "group.id": unique_topic("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 20
    while len(got) < 3 and time.monotonic() < deadline:
        m = consumer.poll(0.5)
        if m is not None and not m.error():
            got.append(m.value())
    consumer.close()
    assert got == [b"v0", b"v1", b"v2"]
    # They re-authenticated in time: the broker closed none of their connections.
    logged = secured.broker.log_path.read_bytes()[mark:].decode(errors="replace")
    assert "SASL session expired" not in logged


def test_a_session_that_does_not_reauthenticate_is_closed_when_used(secured: Secured) -> None:
    """aiokafka does not implement KIP-368. Its connection works within the session
    lifetime; used after it, the broker closes it (as Kafka does: an idle expired connection
    is only closed once it is used for anything but re-authentication)."""
    from aiokafka.conn import CloseReason, create_conn
    from aiokafka.protocol.metadata import MetadataRequest

    async def run() -> Any:
        closed: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

        def on_close(_conn: Any, reason: Any, _exc: Any = None) -> None:
            if not closed.done():
                closed.set_result(reason)

        conn = await create_conn(
            "127.0.0.1",
            secured.ports["REAUTH"],
            security_protocol="SASL_PLAINTEXT",
            sasl_mechanism="SCRAM-SHA-256",
            sasl_plain_username=ALICE,
            sasl_plain_password=ALICE_PW,
            on_close=on_close,
        )
        answer = await conn.send(MetadataRequest([]))
        assert answer.brokers, "served within the session"
        await asyncio.sleep(REAUTH_MS / 1000 + 0.5)
        with pytest.raises(Exception):  # noqa: B017 - aiokafka's connection errors
            await asyncio.wait_for(conn.send(MetadataRequest([])), 10)
        return await asyncio.wait_for(closed, 10)

    assert asyncio.run(run()) == CloseReason.CONNECTION_BROKEN  # the broker closed it


# ---------------------------------------------------------------- SCRAM credential management


def test_scram_credentials_made_with_kafka_python_admin_then_used_and_deleted(
    secured: Secured, topic: str
) -> None:
    admin = KafkaAdminClient(bootstrap_servers=secured.bootstrap("PLAINTEXT"))
    try:
        result = admin.alter_user_scram_credentials(
            [KpUpsertion("carol", KpScramMechanism.SCRAM_SHA_256, "carol-pw", iterations=4096)]
        )
        assert not any("error" in str(v).lower() and "none" not in str(v).lower() for v in [result])
        described = admin.describe_user_scram_credentials(["carol"])
        assert "carol" in str(described) and "4096" in str(described)
        carol = sasl_conf(
            secured.bootstrap("SASL_SSL"), "SCRAM-SHA-256", "carol", "carol-pw", secured.ca
        )
        assert confluent_roundtrip(carol, topic, 5) == expected(5)
        admin.alter_user_scram_credentials([KpDeletion("carol", KpScramMechanism.SCRAM_SHA_256)])
    finally:
        admin.close()
    _, errors = connect_errors(carol, is_auth_error)
    assert any(is_auth_error(e) for e in errors), errors


def test_scram_credentials_survive_a_broker_restart(tmp_path: Path, topic: str) -> None:
    """Credentials are in the metadata log: a broker started later over the same log has
    them (here the `sluice dev` broker and its embedded controller, restarted)."""
    plain, sasl = free_port(), free_port()
    broker = SluiceBroker(
        tmp_path / "b",
        options={"listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}"},
        port=plain,
    )
    broker.start()
    try:
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{plain}"})
        for f in admin.alter_user_scram_credentials(
            [
                UserScramCredentialUpsertion(
                    "dave", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"dave-pw"
                )
            ]
        ).values():
            f.result(20)
        broker.stop()
        broker.start()
        conf = sasl_conf(f"127.0.0.1:{sasl}", "SCRAM-SHA-512", "dave", "dave-pw")
        wait_until(lambda: broker.alive(), "broker up", 10)
        assert confluent_roundtrip(conf, topic, 5) == expected(5)
    finally:
        broker.stop()
    assert "dave-pw" not in broker.log_path.read_text(errors="replace")
