"""One process per data directory: a second one exits 2 and touches nothing."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from sluice.launch.process import free_port, sluice_command

from ._kafka import confluent_consume, confluent_produce, standard_messages, unique_topic

pytestmark = pytest.mark.e2e


def _snapshot(directory: Path) -> dict[str, tuple[int, int]]:
    """Every file under ``directory`` with its size and modification time (ns)."""
    return {
        str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
        for p in sorted(directory.rglob("*"))
        if p.is_file() and p.name != ".lock"
    }


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(sluice_command() + args, capture_output=True, text=True, timeout=60)


def test_second_dev_on_the_same_data_dir_exits_without_touching_it(fresh_broker) -> None:  # type: ignore[no-untyped-def]
    topic = unique_topic("lock")
    confluent_produce(fresh_broker.bootstrap, topic, standard_messages(20))
    before = _snapshot(fresh_broker.data_dir)
    second = _run(["dev", "--port", str(free_port()), "--data-dir", str(fresh_broker.data_dir)])
    assert second.returncode == 2, second.stderr
    assert "in use by another process" in second.stderr
    assert f"pid {fresh_broker.pid}" in second.stderr
    assert "Traceback" not in second.stderr
    # Nothing of the first process's state was read-modified-written by the second: the
    # Raft log, the catalog, the coordinator database and the objects are as they were.
    assert _snapshot(fresh_broker.data_dir) == before
    assert len(confluent_consume(fresh_broker.bootstrap, topic)) == 27  # 20 + edge cases
    # Once the owner stops, the directory is free again (a SIGKILL frees it as well: the
    # kernel drops the lock with the process).
    fresh_broker.kill()
    fresh_broker.start()
    assert len(confluent_consume(fresh_broker.bootstrap, topic)) == 27  # 20 + edge cases


def test_second_controller_on_the_same_data_dir_exits(tmp_path: Path) -> None:
    data = tmp_path / "controller"
    config = tmp_path / "controller.properties"
    raft, http = free_port(), free_port()
    config.write_text(
        "node.id=1\n"
        f"controller.quorum.voters=1@127.0.0.1:{raft}\n"
        "host=127.0.0.1\n"
        f"http.port={http}\n"
        f"data.dir={data}\n"
        "controller.secret=e2e-test-secret-0123456789\n"
    )
    first = subprocess.Popen(
        [*sluice_command(), "controller", "--config", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # The first holds the lock from before it opens its log until it exits.
        start = time.monotonic()
        while not (data / ".lock").exists() and time.monotonic() - start < 60:
            time.sleep(0.05)
        second = _run(["controller", "--config", str(config)])
        assert second.returncode == 2, second.stderr
        assert "in use by another process" in second.stderr
        assert first.poll() is None
    finally:
        first.terminate()
        first.wait(30)
