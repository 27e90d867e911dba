"""The side doors of a deployment, probed as a penetration tester would, against real
processes on 127.0.0.1: each probe must be refused as Kafka (or plain prudence) would.

- a controller without a secret does not start; with one, its API and /metrics answer
  strangers 401, and a forged Raft frame is dropped without changing anything;
- 2,000 idle sockets from one address against ``max.connections.per.ip``: the broker keeps
  the limit's worth, closes the rest at once, and serves again when they go;
- idle connections and half-finished SASL logins are closed;
- a principal without DESCRIBE on a transactional id gets
  TRANSACTIONAL_ID_AUTHORIZATION_FAILED from DescribeTransactions (the answer used to be
  unencodable: closed connection, a traceback per request).

The static checks of the compose files are in tests/unit/test_deploy.py; forged and
replayed Raft frames in tests/unit/raft/test_node.py; the DeleteTopics name leak and
DescribeCluster in tests/unit/test_authorization_handlers.py.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
import struct
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sluice.launch.process import SluiceProcess, free_port, sluice_command

from ._kafka import wait_until
from .conftest import BrokerFactory, SluiceBroker

pytestmark = pytest.mark.e2e

SECRET = "side-doors-secret-0123456789"
API_VERSIONS_V0 = struct.pack(">hhih", 18, 0, 7, 5) + b"probe"


def test_a_controller_without_a_secret_does_not_start(tmp_path: Path) -> None:
    run = subprocess.run(
        [
            *sluice_command(),
            "controller",
            "-o",
            f"controller.quorum.voters=1@127.0.0.1:{free_port()}",
            "-o",
            f"http.port={free_port()}",
            "-o",
            f"data.dir={tmp_path}",
        ],
        capture_output=True,
        timeout=60,
        text=True,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert "controller.secret is not set" in run.stderr


class Controller(SluiceProcess):
    def __init__(self, root: Path) -> None:
        self.raft_port = free_port()
        http_port = free_port()
        args = [
            "controller",
            "-o",
            f"controller.quorum.voters=1@127.0.0.1:{self.raft_port}",
            "-o",
            f"http.port={http_port}",
            "-o",
            f"data.dir={root / 'data'}",
            "-o",
            f"controller.secret={SECRET}",
        ]
        super().__init__(args, root / "controller.log", http_port)

    def get(self, path: str, **headers: str) -> tuple[int, bytes]:
        request = urllib.request.Request(f"http://127.0.0.1:{self.port}{path}", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def post(self, path: str, body: dict) -> int:  # type: ignore[type-arg]
        request = urllib.request.Request(
            f"http://127.0.0.1:{self.port}{path}",
            data=json.dumps(body).encode(),
            headers={"Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(request, timeout=5) as response:
                return response.status
        except urllib.error.HTTPError as exc:
            return exc.code


@pytest.fixture
def controller(tmp_path: Path) -> Iterator[Controller]:
    c = Controller(tmp_path)
    c.start()
    try:
        wait_until(lambda: c.get("/readyz")[0] == 200, "the controller ready", 30)
        yield c
    finally:
        c.stop()


def test_the_controller_answers_strangers_nothing(controller: Controller) -> None:
    registration = {"node_id": 66, "host": "evil", "port": 9092, "rack": None}
    assert controller.post("/v1/brokers/register", registration) == 401
    assert controller.get("/v1/metadata")[0] == 401
    assert controller.get("/metrics")[0] == 401
    status, _body = controller.get("/metrics", Authorization=f"Bearer {SECRET}")
    assert status == 200
    assert controller.get("/healthz")[0] == 200


def test_a_forged_raft_frame_is_dropped(controller: Controller) -> None:
    term_before = json.loads(controller.get("/v1/status")[1])["term"]
    with socket.create_connection(("127.0.0.1", controller.raft_port), timeout=5) as sock:
        challenge = b""
        while len(challenge) < 16:
            challenge += sock.recv(16 - len(challenge))
        payload = b"sluice-raft/2" + struct.pack(">i", 2)
        forged = hmac.new(b"a-guess", challenge + struct.pack(">Q", 0) + payload, hashlib.sha256)
        sock.sendall(struct.pack(">I", 32 + len(payload)) + forged.digest() + payload)
        assert sock.recv(1) == b""  # closed by the controller
    time.sleep(0.5)
    assert json.loads(controller.get("/v1/status")[1])["term"] == term_before


def _api_versions_answered(sock: socket.socket) -> bool:
    sock.sendall(struct.pack(">i", len(API_VERSIONS_V0)) + API_VERSIONS_V0)
    try:
        head = sock.recv(4)
        return len(head) == 4
    except OSError:
        return False


def _closed(sock: socket.socket, within: float) -> bool:
    """Whether the broker closes the connection within ``within`` seconds (answers it
    sends before that are read and dropped)."""
    deadline = time.monotonic() + within
    try:
        while (left := deadline - time.monotonic()) > 0:
            sock.settimeout(left)
            if sock.recv(65536) == b"":
                return True
        return False
    except TimeoutError:
        return False
    except OSError:
        return True


def test_two_thousand_idle_sockets_against_max_connections_per_ip(
    broker_factory: BrokerFactory,
) -> None:
    broker: SluiceBroker = broker_factory(**{"max.connections.per.ip": "100"})
    sockets = []
    try:
        for _ in range(2000):
            sockets.append(socket.create_connection(("127.0.0.1", broker.port), timeout=5))
        kept = [s for s in sockets[:100]]
        refused = sockets[100:]
        assert all(_closed(s, 2.0) for s in refused[-50:])
        assert all(_api_versions_answered(s) for s in kept[:5])
    finally:
        for s in sockets:
            s.close()

    # The slots come back: a client is served again.
    def served() -> bool:
        with socket.create_connection(("127.0.0.1", broker.port), timeout=5) as s:
            return _api_versions_answered(s)

    wait_until(served, "a new connection served", 10)


def test_idle_and_half_authenticated_connections_are_closed(tmp_path: Path) -> None:
    jaas = tmp_path / "jaas.conf"
    jaas.write_text(
        'org.apache.kafka.common.security.plain.PlainLoginModule required user_bob="bob-pw";\n'
    )
    plain, sasl = free_port(), free_port()
    options = {
        "listeners": f"PLAINTEXT://127.0.0.1:{plain},SASL_PLAINTEXT://127.0.0.1:{sasl}",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.jaas.config": f"${{file:{jaas}}}",
        "connections.max.idle.ms": "2000",
        "connections.max.unauthenticated.ms": "1500",
    }
    broker = SluiceBroker(tmp_path / "broker", options=options, port=plain)
    broker.start()
    idle = socket.create_connection(("127.0.0.1", plain), timeout=5)
    half = socket.create_connection(("127.0.0.1", sasl), timeout=5)
    try:
        # The login never finishes: a handshake and nothing after it.
        handshake = struct.pack(">hhih", 17, 1, 1, 5) + b"probe" + struct.pack(">h", 5) + b"PLAIN"
        half.sendall(struct.pack(">i", len(handshake)) + handshake)
        assert _closed(half, 5.0)
        assert _closed(idle, 5.0)
    finally:
        idle.close()
        half.close()
        broker.stop()
