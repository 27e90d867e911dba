"""A real Apache Kafka broker for the differential tests: one KRaft node (broker and
controller in one process) on free ports, with a temporary log dir.

The jars come from Maven Central once (pom.xml beside this file, `mvn dependency:copy-dependencies`)
and are cached outside the repository, in ~/.cache/sluice/kafka-<version>/libs (override the
root with SLUICE_TEST_KAFKA_CACHE). Nothing of Kafka is committed.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import subprocess
import time
import uuid
from pathlib import Path

from sluice.launch.process import free_port

from .wire import Connection, api_versions

KAFKA_VERSION = "4.4.0"
POM = Path(__file__).with_name("pom.xml")
START_TIMEOUT_S = 120.0  # a cold JVM on a loaded 2-core machine takes ~30 s
STOP_TIMEOUT_S = 20.0


def cache_dir(version: str = KAFKA_VERSION) -> Path:
    root = Path(os.environ.get("SLUICE_TEST_KAFKA_CACHE", Path.home() / ".cache" / "sluice"))
    return root / f"kafka-{version}"


def ensure_jars(version: str = KAFKA_VERSION) -> Path:
    """The directory of Kafka's runtime jars, fetched with Maven on first use."""
    libs = cache_dir(version) / "libs"
    stamp = cache_dir(version) / ".complete"
    # The stamp names the pom it was fetched with: a dependency added later is fetched.
    wanted = f"{version} {hashlib.sha256(POM.read_bytes()).hexdigest()[:16]}\n"
    if stamp.exists() and stamp.read_text() == wanted:
        return libs
    if shutil.which("mvn") is None:
        raise RuntimeError("mvn not found: the differential tests fetch Apache Kafka with Maven")
    partial = libs.with_name("libs.partial")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "-Dstyle.color=never",
            "-f",
            str(POM),
            "dependency:copy-dependencies",
            f"-Dkafka.version={version}",
            f"-DoutputDirectory={partial}",
            "-DincludeScope=runtime",
        ],
        check=True,
    )
    shutil.rmtree(libs, ignore_errors=True)
    partial.rename(libs)
    stamp.write_text(wanted)
    return libs


def java_command(main: str, *args: str) -> list[str]:
    """A command running ``main`` (a class, or a single-file Java source program) with
    Kafka's jars on the class path, sized for a short-lived tool."""
    return [
        java(),
        "-Xmx256m",
        "-XX:TieredStopAtLevel=1",
        "-XX:+UseSerialGC",
        "-cp",
        f"{ensure_jars()}/*",
        main,
        *args,
    ]


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise RuntimeError("java not found: Apache Kafka 4.x needs Java 17 or later")
    return found


class KafkaBroker:
    """One KRaft node. Only the test's own process is ever signalled."""

    def __init__(self, workdir: Path, overrides: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.controller_port = free_port()
        self.host = "127.0.0.1"
        self.log_path = workdir / "kafka.log"
        self.overrides = overrides or {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    def properties(self) -> dict[str, str]:
        return {
            "process.roles": "broker,controller",
            "node.id": "1",
            "controller.quorum.voters": f"1@{self.host}:{self.controller_port}",
            "listeners": f"PLAINTEXT://{self.host}:{self.port},"
            f"CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
            **self.overrides,
        }

    def start(self) -> None:
        libs = ensure_jars()
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        classpath = f"{libs}/*"
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        # Small heap and C1 only: this JVM answers a few hundred requests, and the machine is
        # shared (2 cores).
        jvm = [
            java(),
            "-Xmx512m",
            "-XX:+UseSerialGC",
            "-XX:TieredStopAtLevel=1",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            classpath,
        ]
        with open(self.log_path, "ab") as log:
            subprocess.run(
                [*jvm, "kafka.tools.StorageTool", "format", "-t", cluster_id, "-c", str(config)],
                stdout=log,
                stderr=subprocess.STDOUT,
                check=True,
                timeout=START_TIMEOUT_S,
            )
            self.proc = subprocess.Popen(
                [*jvm, "kafka.Kafka", str(config)],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        """Ready when the broker answers ApiVersions (it accepts connections earlier)."""
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kafka exited ({self.proc.returncode}):\n{self.log_tail()}")
            try:
                conn = Connection(self.host, self.port)
                try:
                    api_versions(conn)
                    return
                finally:
                    conn.close()
            except OSError:
                time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"kafka did not answer ApiVersions in {START_TIMEOUT_S}s")

    def stop(self) -> None:
        if self.proc is None:
            return
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self.proc.wait(10)
        self.proc = None

    def log_tail(self, chars: int = 5000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no output)"
