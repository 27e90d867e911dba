"""`sluice cluster up` keeps its ports across down/up of one directory."""

from __future__ import annotations

import json
import socket
from pathlib import Path

from sluice.cluster import PORTS_FILE, LocalCluster
from sluice.launch.process import free_port


def test_remembered_ports_are_reused_and_taken_ones_replaced(tmp_path: Path) -> None:
    kept, http, raft, ctl = free_port(), free_port(), free_port(), free_port()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        (tmp_path / PORTS_FILE).write_text(
            json.dumps(
                {
                    "broker-1": kept,
                    "broker-1.http": http,
                    "broker-2": busy,
                    "controller-1.raft": raft,
                    "controller-1.http": ctl,
                }
            )
        )
        cluster = LocalCluster(tmp_path, brokers=2, controllers=1)
    assert (cluster.brokers[0].port, cluster.brokers[0].http_port) == (kept, http)
    assert cluster.brokers[1].port != busy
    assert (cluster.controllers[0].raft_port, cluster.controllers[0].port) == (raft, ctl)


def test_weed_never_gets_a_port_already_handed_to_a_broker(monkeypatch) -> None:
    """Cluster ports are chosen before weed starts; weed's admin pair (HTTP, HTTP + 10000)
    once landed on a broker's port, and that broker could not bind it."""
    from sluice.launch import process, seaweedfs

    broker_port = free_port()  # handed out, not bound yet
    offset = seaweedfs._ADMIN_GRPC_OFFSET
    offered: list[int] = []
    real = process.random.randrange

    def randrange(a: int, b: int) -> int:
        # The pair's first candidate is the one that collides with the broker's port.
        if b + offset <= process._ephemeral_range()[0] and a + offset >= process._PRIVATE_LOW:
            offered.append(broker_port - offset if not offered else real(a, b))
            return offered[-1]
        return real(a, b)

    monkeypatch.setattr(process.random, "randrange", randrange)
    ports = seaweedfs._allocate_ports()
    assert offered[0] == broker_port - offset and len(offered) >= 2
    assert broker_port not in ports.values()
    assert ports["admin_grpc"] == ports["admin"] + offset
    assert len(set(ports.values())) == len(ports)
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    assert all(p < low for p in ports.values())  # no outgoing connection can take them
