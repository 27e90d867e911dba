"""`sluice cluster up --secure`: `up` and `status` name the admin password's file, 0600, and
never print the password itself (a terminal's scrollback or a CI log would keep it); its
brokers run Kafka's StandardAuthorizer."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from broker.config import load_config
from sluice.cli import _print_addresses
from sluice.secure import AUTHORIZER, broker_settings, generate


def test_admin_password_is_in_a_private_file_and_not_printed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    files = generate(tmp_path / "tls", ["127.0.0.1"])
    password = files.admin_password()
    assert len(password) >= 20
    assert stat.S_IMODE(files.admin_password_file.stat().st_mode) == 0o600
    # The state `up` writes (LocalCluster.detach) and `status` reads back.
    state = {
        "bootstrap": "127.0.0.1:40001",
        "brokers": [{"node_id": 1, "port": 40001, "http_port": 40002, "rack": "az-a"}],
        "controllers": [{"node_id": 1, "http_port": 40003, "raft_port": 40004}],
        "security": {
            "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512",
            "username": "admin",
            "password_file": str(files.admin_password_file),
            "ssl.ca.location": str(files.ca),
            "client_properties": str(files.client_properties),
        },
    }
    _print_addresses(state)
    out = capsys.readouterr()
    assert password not in out.out + out.err
    assert str(files.admin_password_file) in out.out
    assert "sasl.username=admin" in out.out


def test_secure_brokers_run_the_standard_authorizer(tmp_path: Path) -> None:
    """Only the brokers' own principal (replication) and admin are exempt from ACLs: any
    other SCRAM user may do only what admin grants it."""
    files = generate(tmp_path / "tls", ["127.0.0.1"])
    settings = broker_settings(files, "127.0.0.1", 40001)
    config = load_config(
        {**settings, "controller.quorum.bootstrap.servers": "127.0.0.1:40003"},
        {"controller.secret": "x" * 32},
    )
    assert config.authorizer_class_name == AUTHORIZER
    assert set(config.super_users.split(";")) == {"User:broker", "User:admin"}
    # The CA's key is not among the files brokers and controllers are pointed at.
    assert not (files.root / "ca.key").exists() and files.ca_key.exists()
