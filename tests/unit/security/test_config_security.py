"""Listener parsing, JAAS parsing, secrets in configs, SCRAM keys and certificate principals."""

from __future__ import annotations

from pathlib import Path

import pytest
import scramp
import trustme

from broker.config import BrokerConfig, load_config
from broker.security.listeners import SecurityProtocol, listener_plan
from broker.security.sasl import parse_jaas, plain_users
from broker.security.scram import credential_from_password, credential_from_salted_password
from broker.security.tls import certificate_principal

# --- listeners ---------------------------------------------------------------------------


def test_no_listeners_is_the_single_plaintext_port_of_before() -> None:
    plan = listener_plan(BrokerConfig(host="10.0.0.5", port=9999, advertised_host="kafka-1"))
    (only,) = plan.bound
    assert (only.name, only.protocol, only.host, only.port) == (
        "PLAINTEXT",
        SecurityProtocol.PLAINTEXT,
        "10.0.0.5",
        9999,
    )
    assert plan.advertised["PLAINTEXT"].host == "kafka-1"
    assert plan.inter_broker == "PLAINTEXT"


def test_listeners_advertised_and_custom_names() -> None:
    config = load_config(
        {
            "listeners": "PLAINTEXT://:9092,SASL_SSL://0.0.0.0:9093,internal://127.0.0.1:9094",
            "advertised.listeners": "SASL_SSL://kafka.example.com:19093",
            "listener.security.protocol.map": "INTERNAL:SASL_PLAINTEXT",
            "inter.broker.listener.name": "internal",
            "advertised.host": "node-1",
        }
    )
    plan = listener_plan(config)
    assert [(b.name, b.protocol, b.host, b.port) for b in plan.bound] == [
        ("PLAINTEXT", SecurityProtocol.PLAINTEXT, "", 9092),
        ("SASL_SSL", SecurityProtocol.SASL_SSL, "0.0.0.0", 9093),
        ("INTERNAL", SecurityProtocol.SASL_PLAINTEXT, "127.0.0.1", 9094),
    ]
    assert str(plan.advertised["SASL_SSL"]) == "SASL_SSL://kafka.example.com:19093"
    # Not advertised explicitly: the bind host, or advertised.host for "every interface".
    assert plan.advertised["PLAINTEXT"].host == "node-1"
    assert plan.advertised["INTERNAL"].host == "127.0.0.1"
    assert plan.inter_broker == "INTERNAL"


@pytest.mark.parametrize(
    ("settings", "complaint"),
    [
        ({"listeners": "PLAINTEXT://:9092,PLAINTEXT://:9093"}, "twice"),
        ({"listeners": "CUSTOM://:9092"}, "not in listener.security.protocol.map"),
        ({"listeners": "PLAINTEXT//:9092"}, "expected NAME://host:port"),
        ({"listeners": "PLAINTEXT://:99999"}, "expected NAME://host:port"),
        ({"listeners": "PLAINTEXT://:9092", "advertised.listeners": "SSL://h:1"}, "not in"),
        ({"listeners": "PLAINTEXT://:9092", "inter.broker.listener.name": "SSL"}, "not in"),
        ({"listeners": "X://:1", "listener.security.protocol.map": "X:TLS"}, "protocol must"),
        ({"listeners": "SSL://0.0.0.0:9093", "advertised.host": "0.0.0.0"}, "cannot be"),
        ({"advertised.listeners": "PLAINTEXT://h:1"}, "need listeners"),
    ],
)
def test_bad_listener_settings_are_refused(settings: dict[str, str], complaint: str) -> None:
    with pytest.raises(ValueError, match=complaint):
        listener_plan(load_config(settings))


def test_per_listener_prefix_overrides_the_broker_wide_value() -> None:
    config = load_config(
        {
            "ssl.client.auth": "none",
            "listener.name.SSL.ssl.client.auth": "required",
        }
    )
    assert config.listener_config("SSL", "ssl.client.auth") == "required"
    assert config.listener_config("ssl", "ssl.client.auth") == "required"
    assert config.listener_config("SASL_SSL", "ssl.client.auth") == "none"


# --- JAAS --------------------------------------------------------------------------------


def test_plain_login_module_users() -> None:
    entry = parse_jaas(
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        'username="admin" password="admin-secret" user_admin="admin-secret" '
        'user_alice="p=w;\\"x" user_bob=bare;'
    )
    assert entry.login_module.endswith("PlainLoginModule") and entry.flag == "required"
    assert plain_users(entry) == {"admin": "admin-secret", "alice": 'p=w;"x', "bob": "bare"}


@pytest.mark.parametrize(
    "text",
    [
        'org.Module required user_a="x"',  # no ';'
        'org.Module user_a="x";',  # no flag
        'org.Module sometimes user_a="x";',  # unknown flag
        'org.Module required user_a="x"; trailing',
        'org.Module required user_a="unterminated;',
    ],
)
def test_malformed_jaas_is_refused_without_echoing_values(text: str) -> None:
    with pytest.raises(ValueError) as refused:
        parse_jaas(text)
    assert '"x"' not in str(refused.value) and "unterminated" not in str(refused.value)


# --- secrets -----------------------------------------------------------------------------


def test_secrets_from_files_and_environment(tmp_path: Path) -> None:
    secret_file = tmp_path / "s3.key"
    secret_file.write_text("from-a-file\n")
    config = load_config(
        {"s3.secret.key": f"${{file:{secret_file}}}", "ssl.key.password": "${env:KEY_PW}"},
        env={"KEY_PW": "from-the-env"},
    )
    assert config.s3_secret_key == "from-a-file"
    assert config.ssl_key_password == "from-the-env"
    with pytest.raises(ValueError, match="MISSING is not set"):
        load_config({"ssl.key.password": "${env:MISSING}"}, env={})


def test_secrets_never_appear_in_the_config_repr() -> None:
    config = load_config(
        {
            "s3.secret.key": "s3-secret-value",
            "coordinator.dsn": "postgresql://u:db-password@h/db",
            "ssl.key.password": "key-password-value",
            "sasl.jaas.config": 'm required user_a="jaas-password";',
            "listener.name.sasl_ssl.plain.sasl.jaas.config": 'm required user_b="per-listener";',
            "controller.secret": "controller-secret-value",
        }
    )
    text = repr(config) + str(config)
    for secret in (
        "s3-secret-value",
        "db-password",
        "key-password-value",
        "jaas-password",
        "per-listener",
        "controller-secret-value",
    ):
        assert secret not in text


def test_describe_configs_hides_secrets() -> None:
    from broker.admin.configs import _broker_configs

    config = load_config(
        {"ssl.key.password": "key-password-value", "sasl.jaas.config": "x required;"}
    )
    shown = {c["name"]: c for c in _broker_configs(config, None, True)}
    for key in ("ssl.key.password", "sasl.jaas.config", "s3.secret.key", "coordinator.dsn"):
        assert shown[key]["value"] is None and shown[key]["is_sensitive"]
        assert all(s["value"] is None for s in shown[key]["synonyms"])  # set ones too
    assert shown["ssl.client.auth"]["value"] == "none"
    assert "listener.name.configs" not in shown


# --- SCRAM keys --------------------------------------------------------------------------


@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
def test_keys_from_a_salted_password_match_scramp(mechanism: str) -> None:
    """AlterUserScramCredentials sends Hi(password, salt, i); the keys kept from it are the
    ones a password login checks against."""
    from scramp.core import hi

    made = credential_from_password(mechanism, "pencil", 4096)
    hf = scramp.ScramMechanism(mechanism).hf
    salted = hi(hf, b"pencil", made.salt, 4096)
    derived = credential_from_salted_password(mechanism, made.salt, salted, 4096)
    assert derived == made
    with pytest.raises(ValueError):
        credential_from_salted_password(mechanism, made.salt, salted[:-1], 4096)


# --- certificate principals ----------------------------------------------------------------


def test_certificate_principal_is_the_rfc2253_subject() -> None:
    ca = trustme.CA()
    cert = ca.issue_cert(
        "alice.example",
        common_name="alice",
        organization_name="Example",
        organization_unit_name="eng",
    )
    from cryptography import x509
    from cryptography.hazmat.primitives.serialization import Encoding

    der = x509.load_pem_x509_certificate(cert.cert_chain_pems[0].bytes()).public_bytes(Encoding.DER)
    assert certificate_principal(der) == "User:CN=alice,OU=eng,O=Example"
    assert certificate_principal(None) == "User:ANONYMOUS"


def test_tls_context_with_an_encrypted_key(tmp_path: Path) -> None:
    import ssl

    from cryptography.hazmat.primitives import serialization

    from broker.security.tls import server_context

    ca = trustme.CA()
    cert = ca.issue_cert("localhost")
    cert.cert_chain_pems[0].write_to_path(str(tmp_path / "server.pem"))
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), None)
    (tmp_path / "server.key").write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.BestAvailableEncryption(b"key-pass"),
        )
    )
    ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
    settings = {
        "ssl.certificate.location": str(tmp_path / "server.pem"),
        "ssl.key.location": str(tmp_path / "server.key"),
        "ssl.ca.location": str(tmp_path / "ca.pem"),
        "listener.name.ssl.ssl.client.auth": "required",
    }
    context = server_context(load_config({**settings, "ssl.key.password": "key-pass"}), "SSL")
    assert context.verify_mode == ssl.CERT_REQUIRED
    with pytest.raises(ValueError) as refused:
        server_context(load_config({**settings, "ssl.key.password": "wrong-pass"}), "SSL")
    assert "wrong-pass" not in str(refused.value)
    with pytest.raises(ValueError, match=r"needs ssl\.ca\.location"):
        server_context(
            load_config({**settings, "ssl.ca.location": "", "ssl.key.password": "key-pass"}),
            "SSL",
        )
