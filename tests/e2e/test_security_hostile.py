"""Hostile bytes on a SASL listener. Stock clients cannot send these (a request before
authenticating, a huge SASL token, a huge frame before authenticating), so this is the one
place a hand-rolled socket is right, as in test_hostile_input.py."""

from __future__ import annotations

import socket
import struct
from collections.abc import Iterator

import pytest

from sluice.launch.process import free_port

from .conftest import SluiceBroker
from .test_hostile_input import IO_TIMEOUT_S, closed_or_answers, frame, header_v1, recv_frame

pytestmark = pytest.mark.e2e

USER, PASSWORD = "bob", "bob-pw"


@pytest.fixture(scope="module")
def sasl_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    tmp = tmp_path_factory.mktemp("sasl-hostile")
    plain, sasl = free_port(), free_port()
    # From a file: on the command line the password would be in every process listing.
    jaas = tmp / "jaas.conf"
    jaas.write_text(
        "org.apache.kafka.common.security.plain.PlainLoginModule "
        f'required user_{USER}="{PASSWORD}";'
    )
    broker = SluiceBroker(
        tmp / "b",
        options={
            "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": f"${{file:{jaas}}}",
        },
        port=plain,
    )
    broker.start()
    try:
        yield sasl
    finally:
        broker.stop()
    log = broker.log_path.read_text(errors="replace")
    assert "Traceback" not in log
    assert PASSWORD not in log


def connect(port: int) -> socket.socket:
    return socket.create_connection(("127.0.0.1", port), timeout=IO_TIMEOUT_S)


def handshake_v1(s: socket.socket, mechanism: bytes = b"PLAIN") -> int:
    body = struct.pack(">h", len(mechanism)) + mechanism
    s.sendall(frame(header_v1(17, 1, 1) + body))
    resp = recv_frame(s)
    (cid, err) = struct.unpack_from(">ih", resp, 0)
    assert cid == 1
    return err


def authenticate_v0(s: socket.socket, token: bytes) -> bytes | None:
    s.sendall(frame(header_v1(36, 0, 2) + struct.pack(">i", len(token)) + token))
    return closed_or_answers(s)


def is_closed(s: socket.socket) -> bool:
    s.settimeout(IO_TIMEOUT_S)
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


def test_a_request_before_authentication_closes_the_connection(sasl_port: int) -> None:
    with connect(sasl_port) as s:
        # Metadata v0, all topics: fine on PLAINTEXT, not before SASL.
        s.sendall(frame(header_v1(3, 0, 7) + struct.pack(">i", -1)))
        assert closed_or_answers(s) is None


def test_a_huge_token_is_refused_and_the_connection_closed(sasl_port: int) -> None:
    with connect(sasl_port) as s:
        assert handshake_v1(s) == 0
        answer = authenticate_v0(s, b"\x00bob\x00" + b"x" * 100_000)
        assert answer is not None
        (_cid, err) = struct.unpack_from(">ih", answer, 0)
        assert err == 58  # SASL_AUTHENTICATION_FAILED
        assert b"too large" in answer
        assert is_closed(s)


def test_a_huge_frame_before_authentication_is_closed_unread(sasl_port: int) -> None:
    with connect(sasl_port) as s:
        # Claims 50 MiB (allowed after authentication): closed at the length prefix.
        s.sendall(struct.pack(">i", 50 * 1024 * 1024) + b"\x00" * 1024)
        assert closed_or_answers(s) is None


def test_wrong_password_answers_then_closes(sasl_port: int) -> None:
    with connect(sasl_port) as s:
        assert handshake_v1(s) == 0
        answer = authenticate_v0(s, b"\x00bob\x00wrong")
        assert answer is not None
        (_cid, err) = struct.unpack_from(">ih", answer, 0)
        assert err == 58 and b"Invalid username or password" in answer
        assert is_closed(s)


def test_unknown_mechanism_is_refused_with_the_enabled_list(sasl_port: int) -> None:
    with connect(sasl_port) as s:
        assert handshake_v1(s, b"GSSAPI") == 33  # UNSUPPORTED_SASL_MECHANISM


def test_right_password_then_requests_are_served(sasl_port: int) -> None:
    with connect(sasl_port) as s:
        assert handshake_v1(s) == 0
        answer = authenticate_v0(s, f"\x00{USER}\x00{PASSWORD}".encode())
        assert answer is not None and struct.unpack_from(">ih", answer, 0)[1] == 0
        s.sendall(frame(header_v1(3, 0, 7) + struct.pack(">i", 0)))
        answer = closed_or_answers(s)
        assert answer is not None and struct.unpack_from(">i", answer, 0)[0] == 7
