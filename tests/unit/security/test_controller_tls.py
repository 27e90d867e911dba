"""The controller's HTTP API over TLS with client certificates, on top of the shared
secret; SCRAM credentials written through it land in the metadata image as salted keys."""

from __future__ import annotations

from pathlib import Path

import pytest
import trustme

from broker.metadata.controller_client import (
    ControllerClient,
    ControllerRefused,
    ControllerRequestError,
    client_ssl_context,
)
from broker.security.scram import credential_from_password
from controller.requests import ScramDeletion, ScramUpsertion
from controller.service import ControllerService
from tests.fixtures.controller_settings import single_voter


@pytest.fixture
def pki(tmp_path: Path) -> dict[str, str]:
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    broker = ca.issue_cert("broker-1")
    files = {
        "ca": ca.cert_pem,
        "server.pem": server.cert_chain_pems[0],
        "server.key": server.private_key_pem,
        "broker.pem": broker.cert_chain_pems[0],
        "broker.key": broker.private_key_pem,
    }
    out = {}
    for name, blob in files.items():
        blob.write_to_path(str(tmp_path / name))
        out[name] = str(tmp_path / name)
    return out


async def test_tls_api_with_client_certificates_and_secret(
    tmp_path: Path, pki: dict[str, str]
) -> None:
    service = ControllerService(
        single_voter(
            tmp_path / "c",
            secret="the-secret",
            raft_options={"fsync": False},
            ssl_certificate_location=pki["server.pem"],
            ssl_key_location=pki["server.key"],
            ssl_ca_location=pki["ca"],
            ssl_client_auth="required",
        )
    )
    await service.start()
    await service.wait_active()
    address = [f"127.0.0.1:{service.http_port}"]
    good = ControllerClient(
        address,
        "the-secret",
        ssl_context=client_ssl_context(pki["ca"], pki["broker.pem"], pki["broker.key"]),
        deadline=3,
    )
    no_cert = ControllerClient(
        address, "the-secret", ssl_context=client_ssl_context(pki["ca"]), deadline=1
    )
    wrong_secret = ControllerClient(
        address,
        "not-it",
        ssl_context=client_ssl_context(pki["ca"], pki["broker.pem"], pki["broker.key"]),
        deadline=1,
    )
    plain_http = ControllerClient(address, "the-secret", deadline=1)
    try:
        assert "secret" not in repr(service.settings)
        made = credential_from_password("SCRAM-SHA-256", "pw", 4096)
        upsert = ScramUpsertion(
            "alice", made.mechanism, made.salt, made.stored_key, made.server_key, 4096
        )
        results, _ = await good.alter_scram_credentials([], [upsert])
        assert [r.error_code for r in results] == [0]
        entry = service.state.image.scram_credentials[("alice", "SCRAM-SHA-256")]
        assert (entry.salt, entry.stored_key, entry.server_key) == (
            made.salt,
            made.stored_key,
            made.server_key,
        )
        # Deleting what does not exist, and too few iterations, are refused per user.
        results, _ = await good.alter_scram_credentials(
            [ScramDeletion("nobody", "SCRAM-SHA-256")],
            [ScramUpsertion("bob", "SCRAM-SHA-256", b"s", b"k", b"k", 100)],
        )
        assert sorted((r.user, int(r.error_code)) for r in results) == [
            ("bob", 93),  # UNACCEPTABLE_CREDENTIAL
            ("nobody", 91),  # RESOURCE_NOT_FOUND
        ]
        for refused in (no_cert, plain_http):
            with pytest.raises(ControllerRefused):
                await refused.alter_scram_credentials([], [upsert])
        with pytest.raises(ControllerRequestError):  # TLS fine, secret wrong: 401
            await wrong_secret.alter_scram_credentials([], [upsert])
    finally:
        for client in (good, no_cert, wrong_secret, plain_http):
            await client.close()
        await service.stop()


async def test_the_raft_link_is_tls_when_the_controller_has_a_certificate(
    tmp_path: Path, pki: dict[str, str]
) -> None:
    """Raft messages carry the metadata log (SCRAM salts and stored keys): encrypted. A
    plaintext peer gets no challenge (the listener expects a TLS handshake); two voters
    with the controller's TLS settings exchange messages."""
    import asyncio

    from controller.raft.messages import VoteRequest
    from controller.raft.transport import TcpTransport

    settings = single_voter(
        tmp_path / "c",
        secret="the-secret-of-the-quorum",
        ssl_certificate_location=pki["server.pem"],
        ssl_key_location=pki["server.key"],
        ssl_ca_location=pki["ca"],
    )
    server_ssl, client_ssl = settings.raft_ssl_contexts()
    assert server_ssl is not None and client_ssl is not None
    got: list[object] = []
    secret = b"the-secret-of-the-quorum"
    receiver = TcpTransport(1, {}, secret=secret, on_message=got.append, server_ssl=server_ssl)
    host, port = await receiver.start("127.0.0.1", 0)
    sender = TcpTransport(
        2, {1: (host, port)}, secret=secret, on_message=lambda _m: None, client_ssl=client_ssl
    )
    await sender.start("127.0.0.1", 0)
    try:
        reader, writer = await asyncio.open_connection(host, port)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(reader.readexactly(16), 0.5)  # no plaintext challenge
        writer.close()
        msg = VoteRequest(5, 2, 1, 0, 0, True)
        for _ in range(100):
            if sender._peers[1].connected:
                break
            await asyncio.sleep(0.05)
        sender.send(msg)
        for _ in range(100):
            if got:
                break
            await asyncio.sleep(0.05)
        assert got == [msg]
    finally:
        await sender.close()
        await receiver.close()
    with pytest.raises(ValueError, match=r"ssl\.ca\.location"):
        single_voter(tmp_path / "c", ssl_certificate_location=pki["server.pem"]).raft_ssl_contexts()
