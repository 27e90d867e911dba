"""The per-connection SASL state machine: handshakes, exchanges, failures, KIP-368 sessions."""

from __future__ import annotations

from typing import Any

import pytest

from broker.config import load_config
from broker.security.sasl import (
    MAX_TOKEN_BYTES,
    CloseConnection,
    SaslAuthenticator,
    SaslSession,
)
from broker.security.scram import credential_from_password

JAAS = (
    'org.apache.kafka.common.security.plain.PlainLoginModule required user_bob="pw" user_eve="pw";'
)


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def session(reauth_ms: int = 0) -> tuple[SaslSession, Clock]:
    config = load_config(
        {
            "sasl.jaas.config": JAAS,
            "connections.max.reauth.ms": str(reauth_ms),
        }
    )
    alice = credential_from_password("SCRAM-SHA-256", "alice-pw", 4096)
    authenticator = SaslAuthenticator(
        config,
        "SASL_PLAINTEXT",
        lambda user, mech: alice if (user, mech) == ("alice", "SCRAM-SHA-256") else None,
    )
    clock = Clock()
    return SaslSession(authenticator, clock), clock


def test_plain_login_and_principal() -> None:
    s, _ = session()
    assert s.handshake(1, "PLAIN")["error_code"] == 0
    answer, close = s.authenticate(2, b"\x00bob\x00pw")
    assert (answer["error_code"], close) == (0, False)
    assert s.principal == "User:bob" and s.expires_at is None
    assert answer["session_lifetime"] == 0


@pytest.mark.parametrize(
    ("token", "message"),
    [
        (b"\x00bob\x00wrong", "Invalid username or password"),
        (b"\x00nobody\x00pw", "Invalid username or password"),
        (b"eve\x00bob\x00pw", "authorization id"),
        (b"no separators", "invalid SASL/PLAIN message"),
        (b"\x00bob\x00" + b"x" * MAX_TOKEN_BYTES, "too large"),
    ],
)
def test_plain_failures_close_with_a_message(token: bytes, message: str) -> None:
    s, _ = session()
    s.handshake(1, "PLAIN")
    answer, close = s.authenticate(2, token)
    assert answer["error_code"] == 58 and close
    assert message in answer["error_message"]
    assert not s.authenticated


def test_unknown_mechanism_and_protocol_violations() -> None:
    s, _ = session()
    answer = s.handshake(1, "GSSAPI")
    assert answer["error_code"] == 33 and "PLAIN" in answer["mechanisms"]
    answer, close = s.authenticate(2, b"\x00bob\x00pw")  # no handshake accepted yet
    assert answer["error_code"] == 34 and close  # ILLEGAL_SASL_STATE
    s.handshake(1, "PLAIN")
    with pytest.raises(CloseConnection):
        s.handshake(1, "PLAIN")  # a second handshake in the middle of an exchange


def test_scram_exchange_through_scramp_client() -> None:
    import scramp

    s, _ = session()
    s.handshake(1, "SCRAM-SHA-256")
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "alice-pw")
    answer, close = s.authenticate(1, client.get_client_first().encode())
    assert answer["error_code"] == 0 and not close and not s.authenticated
    client.set_server_first(answer["auth_bytes"].decode())
    answer, close = s.authenticate(1, client.get_client_final().encode())
    assert answer["error_code"] == 0 and not close
    client.set_server_final(answer["auth_bytes"].decode())  # the server proved itself too
    assert s.principal == "User:alice"


def test_scram_wrong_password_fails() -> None:
    import scramp

    s, _ = session()
    s.handshake(1, "SCRAM-SHA-256")
    client = scramp.ScramClient(["SCRAM-SHA-256"], "alice", "not-it")
    answer, _ = s.authenticate(1, client.get_client_first().encode())
    client.set_server_first(answer["auth_bytes"].decode())
    answer, close = s.authenticate(1, client.get_client_final().encode())
    assert answer["error_code"] == 58 and close
    assert "invalid credentials with SASL mechanism SCRAM-SHA-256" in answer["error_message"]


def test_reauthentication_extends_the_session_and_keeps_the_principal() -> None:
    s, clock = session(reauth_ms=2000)
    s.handshake(1, "PLAIN")
    answer, _ = s.authenticate(1, b"\x00bob\x00pw")
    assert answer["session_lifetime"] == 2000
    clock.now += 1.9
    assert not s.expired()
    s.handshake(1, "PLAIN")  # re-authentication on the live connection
    answer, close = s.authenticate(1, b"\x00bob\x00pw")
    assert answer["error_code"] == 0 and not close
    clock.now += 1.9
    assert not s.expired()  # the new session runs from the re-authentication
    clock.now += 0.2
    assert s.expired()


def test_reauthentication_cannot_change_principal_or_mechanism() -> None:
    s, _ = session(reauth_ms=2000)
    s.handshake(1, "PLAIN")
    s.authenticate(1, b"\x00bob\x00pw")
    s.handshake(1, "PLAIN")
    answer, close = s.authenticate(1, b"\x00eve\x00pw")
    assert answer["error_code"] == 58 and close and s.principal == "User:bob"
    s2, _ = session(reauth_ms=2000)
    s2.handshake(1, "PLAIN")
    s2.authenticate(1, b"\x00bob\x00pw")
    with pytest.raises(CloseConnection):
        s2.handshake(1, "SCRAM-SHA-256")


def test_no_reauthentication_without_a_session_lifetime() -> None:
    s, _ = session(reauth_ms=0)
    s.handshake(1, "PLAIN")
    s.authenticate(1, b"\x00bob\x00pw")
    with pytest.raises(CloseConnection):
        s.handshake(1, "PLAIN")


def test_handshake_v0_then_bare_tokens() -> None:
    s, _ = session()
    s.handshake(0, "PLAIN")
    assert s.raw_tokens
    assert s.authenticate_raw(b"\x00bob\x00pw") == b""
    assert s.principal == "User:bob" and not s.raw_tokens


def oauth_session(tmp_path: Any, **settings: str) -> tuple[SaslSession, Any]:
    import json

    import jwt
    from cryptography.hazmat.primitives.asymmetric import rsa

    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [{**jwk, "kid": "k"}]}))
    config = load_config(
        {
            "sasl.enabled.mechanisms": "OAUTHBEARER",
            "sasl.oauthbearer.jwks.endpoint.url": f"file://{tmp_path / 'jwks.json'}",
            **settings,
        }
    )
    authenticator = SaslAuthenticator(config, "SASL_SSL", lambda u, m: None)
    return SaslSession(authenticator), key


def bearer(key: Any, **claims: Any) -> bytes:
    import time

    import jwt

    body = {"exp": int(time.time()) + 600, **claims}
    token = jwt.encode(body, key, algorithm="RS256", headers={"kid": "k"})
    return f"n,,\x01auth=Bearer {token}\x01\x01".encode()


def test_oauthbearer_subject_claim_and_token_bound_session(tmp_path: Any) -> None:
    s, key = oauth_session(
        tmp_path,
        **{"sasl.oauthbearer.sub.claim.name": "client_id", "connections.max.reauth.ms": "3600000"},
    )
    s.handshake(1, "OAUTHBEARER")
    answer, close = s.authenticate(1, bearer(key, client_id="svc-orders", sub="ignored"))
    assert answer["error_code"] == 0 and not close
    assert s.principal == "User:svc-orders"
    # The session ends no later than the token does (600 s), not after the hour.
    assert 590_000 <= answer["session_lifetime"] <= 600_000


def test_oauthbearer_refuses_unsigned_and_hmac_tokens(tmp_path: Any) -> None:
    import jwt

    s, _key = oauth_session(tmp_path)
    for token in (
        jwt.encode({"sub": "x", "exp": 4_000_000_000}, None, algorithm="none"),
        jwt.encode({"sub": "x", "exp": 4_000_000_000}, "k" * 32, algorithm="HS256"),
    ):
        s.handshake(1, "OAUTHBEARER")
        answer, close = s.authenticate(1, f"n,,\x01auth=Bearer {token}\x01\x01".encode())
        assert answer["error_code"] == 58 and close
        s = oauth_session(tmp_path)[0]
