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
