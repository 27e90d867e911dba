"""The reference client: Apache Kafka's Java client (kafka-clients 4.4 from Maven Central, the
jars the differential tests cache) against Sluice, diskless and classic topics: AdminClient,
an idempotent producer, a transactional producer that commits and aborts, and consumer
groups reading read_committed and read_uncommitted (classic and KIP-848 protocols). The
program is tests/e2e/java/ClientCheck.java, a single-file source program (compiled once)."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sluice.cluster import LocalCluster
from sluice.launch.kafka import ensure_jars, java_command
from tests.fixtures.cluster import fast_cluster

pytestmark = pytest.mark.e2e

PROGRAM = Path(__file__).parent / "java" / "ClientCheck.java"


def run_java(bootstrap: str, topic: str, mode: str, *args: str) -> dict[str, Any]:
    cmd = java_command(str(PROGRAM), bootstrap, topic, mode, *args)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)
    assert done.returncode == 0, f"{mode} exited {done.returncode}:\n{done.stderr[-4000:]}"
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    assert lines, f"{mode} printed no result:\n{done.stdout}\n{done.stderr[-2000:]}"
    result: dict[str, Any] = json.loads(lines[-1])
    return result


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    ensure_jars()
    with fast_cluster(
        tmp_path_factory,
        "java",
        brokers=3,
        racks=("az-a", "az-b", "az-c"),
        controllers=1,
        broker_options={"transaction.version": "2"},
    ) as local:
        yield local


@pytest.mark.parametrize("kind", ["diskless", "classic"])
def test_java_client(cluster: LocalCluster, topic: str, kind: str) -> None:
    boot = cluster.bootstrap
    name = f"{topic}-{kind}"
    admin = run_java(boot, name, "admin", kind)
    assert admin["brokers"] == 3 and admin["partitions"] == 3 and admin["listed"]
    assert admin["cluster_id"]
    assert run_java(boot, name, "idempotent", "300") == {"acknowledged": 300}
    # Transaction version 2 (KIP-890 part 2), which the cluster finalizes: the client adds
    # partitions through Produce v12 and every end bumps the epoch (0 -> 2 here).
    assert run_java(boot, name, "transactions") == {"committed": 10, "aborted": 10, "epoch": 2}

    committed = run_java(boot, name, "consume", f"g-rc-{kind}", "read_committed", "310")
    idem = {f"idem-{i}" for i in range(300)}
    txn = {f"committed-{i}" for i in range(10)}
    assert sorted(committed["values"]) == sorted(idem | txn)  # each once, no aborted one
    # Committed offsets cover the whole log (markers included): 300 + 10 + 10 + 2 markers per
    # partition that took transactional records.
    assert committed["committed_sum"] >= 320

    # The same with KIP-848's consumer group protocol (group.protocol=consumer).
    kip848 = run_java(boot, name, "consume", f"g-848-{kind}", "read_committed", "310", "consumer")
    assert sorted(kip848["values"]) == sorted(idem | txn)
    assert kip848["committed_sum"] >= 320

    everything = run_java(boot, name, "consume", f"g-ru-{kind}", "read_uncommitted", "320")
    aborted = {f"aborted-{i}" for i in range(10)}
    assert sorted(everything["values"]) == sorted(idem | txn | aborted)

    # Consume-transform-produce with the input offsets in each transaction (every third one
    # aborted and read again): the output, read_committed, has each input value once.
    run_java(boot, f"{name}-out", "admin", kind)
    ctp = run_java(boot, name, "ctp", f"g-ctp-{kind}", "310")
    assert ctp["processed"] == 310 and ctp["aborted_transactions"] >= 1
    out = run_java(boot, f"{name}-out", "consume", f"g-out-{kind}", "read_committed", "310")
    assert sorted(out["values"]) == sorted(v.upper() for v in idem | txn)


@pytest.mark.parametrize("kind", ["diskless", "classic"])
def test_java_producer_killed_mid_transaction_is_fenced_by_its_next_instance(
    cluster: LocalCluster, topic: str, kind: str
) -> None:
    """SIGKILL of a transactional producer with records sent in its open transaction: the
    next instance (same transactional.id) aborts it at initTransactions and commits its own;
    a zombie of that instance cannot commit once a third one initialises. read_committed
    sees exactly the committed records."""
    boot = cluster.bootstrap
    name = f"{topic}-kill-{kind}"
    run_java(boot, name, "admin", kind)
    tid = f"java-kill-{name}"
    hung = subprocess.Popen(
        java_command(str(PROGRAM), boot, name, "hang", tid),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert hung.stdout is not None
        ready = hung.stdout.readline()  # printed once its records are acknowledged
        assert ready.startswith('{"ready"'), hung.stderr.read() if hung.stderr else ready
    finally:
        hung.kill()
        hung.wait(30)
    assert run_java(boot, name, "fence", tid) == {"committed": 10, "fenced": True}
    got = run_java(boot, name, "consume", f"g-kill-{kind}", "read_committed", "10")
    assert sorted(got["values"]) == sorted(f"next-{i}" for i in range(10))
