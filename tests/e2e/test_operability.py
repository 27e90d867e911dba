"""What an operator sees: clear start errors, log lines that say which process wrote them."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from sluice.launch.process import free_port, sluice_command

from ._kafka import wait_until
from .conftest import SluiceBroker

pytestmark = pytest.mark.e2e


def test_unreachable_postgresql_is_named_and_the_broker_exits(tmp_path: Path) -> None:
    closed = free_port()  # nothing listens there
    config = tmp_path / "broker.properties"
    config.write_text(
        "coordinator=postgresql\n"
        f"coordinator.dsn=postgresql://sluice:hunter2@127.0.0.1:{closed}/meta\n"
        f"data.dir={tmp_path / 'data'}\nport={free_port()}\n"
    )
    done = subprocess.run(
        [*sluice_command(), "broker", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert f"PostgreSQL at 127.0.0.1:{closed}/meta" in done.stderr
    assert "cannot start broker 1" in done.stderr
    assert "hunter2" not in done.stderr + done.stdout


def test_unknown_config_key_is_refused_at_start(tmp_path: Path) -> None:
    done = subprocess.run(
        [*sluice_command(), "dev", "--data-dir", str(tmp_path), "-o", "retention.hours=1"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "unknown config 'retention.hours'" in done.stderr


def test_log_lines_name_the_process(fresh_broker: SluiceBroker) -> None:
    # The port opens a moment before the line is written.
    listening = "[broker 1] broker.node: sluice broker 1 listening"
    wait_until(lambda: listening in fresh_broker.log_tail(), "the listening line", 30)
    log = fresh_broker.log_tail()
    # `sluice dev` runs its controller in the same process: its lines say so.
    assert "[controller 1] controller.service:" in log
    assert "[broker 1] controller." not in log
    # The Raft log of `sluice dev` is in <data-dir>/controller/raft; the admin tool takes
    # either directory.
    for directory in (
        fresh_broker.data_dir / "controller",
        fresh_broker.data_dir / "controller" / "raft",
    ):
        done = subprocess.run(
            [sys.executable, "-m", "controller.raft.admin", "inspect", str(directory)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, done.stderr
        assert json.loads(done.stdout)["voters"] == [1]


def _sluice(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*sluice_command(), *args], capture_output=True, text=True, timeout=60)


def test_cli_help_version_and_one_line_errors(tmp_path: Path) -> None:
    version = _sluice("--version")
    assert version.returncode == 0 and version.stdout.startswith("sluice "), version
    top = _sluice("--help").stdout
    assert "``" not in top and "Kafka-compatible" in top
    assert "controller quorum" in top.split("cluster", 1)[1], top  # cluster names its controllers
    dev = _sluice("dev", "--help").stdout
    assert "single-voter controller" in dev and "log verbosity" in dev, dev

    a_file = tmp_path / "not-a-dir"
    a_file.write_text("")
    for args, says in (
        (["dev", "--log-level", "bogus"], "--log-level 'bogus'"),
        (["dev", "--data-dir", str(a_file)], "is not a directory"),
    ):
        done = _sluice(*args)
        assert done.returncode == 2, done
        assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
        assert says in done.stderr


def test_missing_bucket_is_named_and_the_broker_exits(tmp_path: Path, s3_server: Any) -> None:
    config = tmp_path / "broker.properties"
    config.write_text(
        "object.store=s3\n"
        f"s3.endpoint={s3_server.endpoint_url}\ns3.bucket=no-such-bucket\n"
        f"s3.access.key={s3_server.access_key}\ns3.secret.key={s3_server.secret_key}\n"
        f"data.dir={tmp_path / 'data'}\nport={free_port()}\n"
    )
    done = subprocess.run(
        [*sluice_command(), "broker", "--config", str(config)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, done.stderr
    assert f"S3 bucket 'no-such-bucket' at {s3_server.endpoint_url} is not usable" in done.stderr
    assert s3_server.secret_key not in done.stderr + done.stdout


@pytest.mark.parametrize("after_lock_s", [1.0, 0.0])
def test_sigterm_while_starting_stops_the_broker(tmp_path: Path, after_lock_s: float) -> None:
    # A broker whose start waits (here: for a controller quorum nobody runs) must still obey
    # SIGTERM; it used to keep waiting and ignore the signal.
    config = tmp_path / "broker.properties"
    config.write_text(
        f"data.dir={tmp_path / 'data'}\nport={free_port()}\nobject.store=local\n"
        f"coordinator=sqlite\ncontroller.quorum.bootstrap.servers=127.0.0.1:{free_port()}\n"
        "controller.secret=e2e-test-secret-0123456789\n"
    )
    proc = subprocess.Popen(
        [*sluice_command(), "broker", "--config", str(config)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "data" / ".lock").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        # 1 s: well into the start (storage opened, waiting for the controller). 0: at once,
        # while the process still builds the broker, before its event loop handles signals
        # (on a loaded machine that took seconds, and SIGTERM's default action killed it).
        time.sleep(after_lock_s)
        assert proc.poll() is None
        proc.send_signal(signal.SIGTERM)
        output, _ = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert "stopped while starting" in output


def test_broker_started_during_an_object_store_outage_serves_once_it_is_back(
    tmp_path: Path, s3_server: Any
) -> None:
    """Issue 24: a broker (re)started while S3 was down exited ("S3 check bucket failed after
    3 attempts") and stayed down after S3 came back. An outage is not a misconfiguration:
    the broker starts, says once that the store is unreachable, and diskless produce works
    as soon as the store answers (a missing bucket still stops the start, test above)."""
    from confluent_kafka import Producer

    from tests.nemesis.proxy import ProxyThread

    host, _, port = s3_server.endpoint_url.removeprefix("http://").partition(":")
    proxies = ProxyThread()
    proxies.start()
    try:
        proxy = proxies.add("s3", host, int(port), http=True)
        proxy.set(reset=True)  # every connection reset: the store is down
        kafka_port = free_port()
        config = tmp_path / "broker.properties"
        config.write_text(
            "object.store=s3\n"
            f"s3.endpoint=http://127.0.0.1:{proxy.port}\ns3.bucket={s3_server.new_bucket()}\n"
            f"s3.access.key={s3_server.access_key}\ns3.secret.key={s3_server.secret_key}\n"
            "s3.path.style=true\n"
            f"data.dir={tmp_path / 'data'}\nport={kafka_port}\n"
        )
        log = tmp_path / "broker.log"
        with log.open("w") as out:
            proc = subprocess.Popen(
                [*sluice_command(), "broker", "--config", str(config)],
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            wait_until(lambda: "listening on" in log.read_text(), "the broker listening", 60)
            assert proc.poll() is None, log.read_text()
            assert "not reachable at start" in log.read_text()
            proxy.clear()  # the store is back
            producer = Producer(
                {"bootstrap.servers": f"127.0.0.1:{kafka_port}", "message.timeout.ms": 60000}
            )
            delivered: list[Any] = []
            producer.produce("after-outage", b"v", on_delivery=lambda e, m: delivered.append(e))
            producer.flush(60)
            assert delivered == [None], log.read_text()
            wait_until(lambda: "reachable; its check" in log.read_text(), "the re-check", 30)
            assert "Traceback" not in log.read_text()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    finally:
        proxies.stop()
