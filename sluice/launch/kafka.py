"""Apache Kafka beside Sluice: KRaft nodes (broker and controller in one process each) on
free ports, with temporary log dirs. The differential tests run one node as the oracle; the
benchmarks (bench.classic) run three, rack-aware, for the same workload as Sluice's.

The jars come from Maven Central once (kafka-pom.xml beside this file, `mvn
dependency:copy-dependencies`) and are cached outside the repository, in
~/.cache/sluice/kafka-<version>/libs (override the root with SLUICE_TEST_KAFKA_CACHE).
Nothing of Kafka is committed.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from sluice.launch.process import free_port, stop_child

KAFKA_VERSION = "4.4.0"
POM = Path(__file__).with_name("kafka-pom.xml")
START_TIMEOUT_S = 120.0  # a cold JVM on a loaded 2-core machine takes ~30 s
STOP_TIMEOUT_S = 20.0


def cache_dir(version: str = KAFKA_VERSION) -> Path:
    root = Path(os.environ.get("SLUICE_TEST_KAFKA_CACHE", Path.home() / ".cache" / "sluice"))
    return root / f"kafka-{version}"


def ensure_jars(
    version: str = KAFKA_VERSION,
    pom: Path = POM,
    name: str = "kafka",
    version_property: str = "kafka.version",
) -> Path:
    """The directory of the runtime jars ``pom`` names (Kafka's by default; the e2e suite's
    Kafka Streams has its own pom and ``name``, Spark's Kafka connector its own
    ``version_property`` too), fetched with Maven on first use into
    ~/.cache/sluice/<name>-<version>/libs."""
    root = cache_dir(version).with_name(f"{name}-{version}")
    libs, stamp = root / "libs", root / ".complete"
    # The stamp names the pom it was fetched with: a dependency added later is fetched.
    wanted = f"{version} {hashlib.sha256(pom.read_bytes()).hexdigest()[:16]}\n"
    if stamp.exists() and stamp.read_text() == wanted:
        return libs
    if shutil.which("mvn") is None:
        raise RuntimeError(f"mvn not found: {name} {version} is fetched with Maven")
    partial = libs.with_name("libs.partial")
    shutil.rmtree(partial, ignore_errors=True)
    subprocess.run(
        [
            "mvn",
            "-q",
            "-B",
            "-Dstyle.color=never",
            "-f",
            str(pom),
            "dependency:copy-dependencies",
            f"-D{version_property}={version}",
            f"-DoutputDirectory={partial}",
            "-DincludeScope=runtime",
        ],
        check=True,
        timeout=900,
    )
    shutil.rmtree(libs, ignore_errors=True)
    partial.rename(libs)
    stamp.write_text(wanted)
    return libs


def java_command(main: str, *args: str) -> list[str]:
    """A command running ``main`` (a class, or a single-file Java source program) with
    Kafka's jars on the class path, sized for a short-lived tool. A source program is
    compiled once (:func:`compiled_program`) and its class run."""
    jars = f"{ensure_jars()}/*"
    classpath = jars
    if main.endswith(".java"):
        # After the jars: the class path the archive was made with stays its prefix.
        classpath = f"{jars}:{compiled_program(Path(main), jars)}"
        main = Path(main).stem
    archive = tools_archive(jars)
    return [
        java(),
        *TOOL_JVM,
        *([f"-XX:SharedArchiveFile={archive}", "-Xlog:disable"] if archive else []),
        "-cp",
        classpath,
        main,
        *args,
    ]


TOOL_JVM = ("-Xmx256m", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC")


def tools_archive(jars: str) -> Path | None:
    """A class data sharing archive (CDS, JDK 13+) of the classes a Kafka tool loads (its
    admin client, configs, network and security layers), made once into the cache by a
    training run; a tool started with it loads them mapped from the archive, about twice as
    fast to its first request as without. None if it could not be made (the tools then run
    without; a JVM that finds the archive stale ignores it)."""
    classpath = _expand(jars)
    key = hashlib.sha256("\0".join([*classpath, os.path.realpath(java())]).encode()).hexdigest()[
        :16
    ]
    archive = cache_dir().with_name("java-cds") / f"tools-{key}.jsa"
    if archive.exists():
        return archive
    archive.parent.mkdir(parents=True, exist_ok=True)
    partial = archive.with_name(f".{archive.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}")
    config = partial.with_suffix(".properties")
    # The training run: kafka-topics --list against a closed port loads the admin client and
    # everything under it, fails after two seconds and dumps what it loaded as it exits.
    config.write_text("default.api.timeout.ms=2000\nrequest.timeout.ms=1000\n")
    try:
        subprocess.run(
            [
                java(),
                *TOOL_JVM,
                f"-XX:ArchiveClassesAtExit={partial}",
                "-Xlog:disable",
                "-cp",
                jars,
                "org.apache.kafka.tools.TopicCommand",
                "--bootstrap-server",
                f"127.0.0.1:{free_port()}",
                "--command-config",
                str(config),
                "--list",
            ],
            capture_output=True,
            timeout=120,
            check=False,
        )
        if not partial.exists():
            return None
        partial.rename(archive)
    except (OSError, subprocess.TimeoutExpired):
        return None
    finally:
        config.unlink(missing_ok=True)
        partial.unlink(missing_ok=True)
    return archive


def _expand(classpath: str) -> list[str]:
    """The entries of a class path, ``dir/*`` replaced by the jars in ``dir``."""
    entries: list[str] = []
    for entry in classpath.split(":"):
        if entry.endswith("/*"):
            entries += sorted(str(p) for p in Path(entry[:-2]).glob("*.jar"))
        elif entry:
            entries.append(entry)
    return entries


def compiled_program(source: Path, classpath: str) -> Path:
    """The directory of a single-file Java program's classes (its main class is named as
    the file), compiled with the runtime's own javac (the ``jdk.compiler`` module the
    source launcher uses) against ``classpath`` (``dir/*`` entries allowed), into the cache
    under a key of the source, the class path and the runtime. ``java Program.java``
    compiles on every start, seconds of a short program's run; this compiles once."""
    entries = _expand(classpath)
    key = hashlib.sha256(
        "\0".join([source.read_text(), *entries, os.path.realpath(java())]).encode()
    ).hexdigest()[:16]
    classes = cache_dir().with_name("java-programs") / f"{source.stem}-{key}"
    if (classes / f"{source.stem}.class").exists():
        return classes
    classes.parent.mkdir(parents=True, exist_ok=True)
    partial = Path(tempfile.mkdtemp(prefix=f".{source.stem}-", dir=classes.parent))
    try:
        done = subprocess.run(
            [
                java(),
                *TOOL_JVM,
                "-m",
                "jdk.compiler/com.sun.tools.javac.Main",
                "-proc:none",
                "-nowarn",
                "-d",
                str(partial),
                "-cp",
                ":".join(entries),
                str(source),
            ],
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"javac {source} failed:\n{done.stdout}{done.stderr}")
        with contextlib.suppress(OSError):  # another process compiled it meanwhile
            partial.rename(classes)
    finally:
        shutil.rmtree(partial, ignore_errors=True)
    return classes


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    if home and (Path(home) / "bin" / "java").exists():
        return str(Path(home) / "bin" / "java")
    found = shutil.which("java")
    if found is None:
        raise RuntimeError("java not found: Apache Kafka 4.x needs Java 17 or later")
    return found


# A short-lived oracle answers a few hundred requests on a shared 2-core machine: small heap,
# C1 only. A benchmark gets the JVM Kafka ships with (kafka-server-start.sh: 1 GiB, G1).
ORACLE_JVM = ("-Xmx512m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
BENCH_JVM = ("-Xms1g", "-Xmx1g", "-XX:+UseG1GC", "-XX:MaxGCPauseMillis=20")


class KafkaBroker:
    """One KRaft node (broker and controller). Alone it is a one-node cluster; a
    :class:`KafkaCluster` gives each node its id, rack and the quorum's voters. Only the
    test's own process is ever signalled."""

    def __init__(
        self,
        workdir: Path,
        overrides: dict[str, str] | None = None,
        *,
        node_id: int = 1,
        rack: str | None = None,
        jvm: tuple[str, ...] = ORACLE_JVM,
    ) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.controller_port = free_port()
        self.host = "127.0.0.1"
        self.node_id = node_id
        self.rack = rack
        self.jvm = jvm
        self.voters = f"{node_id}@{self.host}:{self.controller_port}"
        self.log_path = workdir / "kafka.log"
        self.overrides = overrides or {}
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def properties(self) -> dict[str, str]:
        replicas = str(len(self.voters.split(",")))
        props = {
            "process.roles": "broker,controller",
            "node.id": str(self.node_id),
            "controller.quorum.voters": self.voters,
            "listeners": f"PLAINTEXT://{self.host}:{self.port},"
            f"CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.port}",
            "controller.listener.names": "CONTROLLER",
            "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "log.dirs": str(self.workdir / "data"),
            "num.partitions": "1",
            "offsets.topic.replication.factor": replicas,
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": replicas,
            "transaction.state.log.min.isr": "1" if replicas == "1" else "2",
            "transaction.state.log.num.partitions": "1",
            # Share groups' state topic (KIP-932): Kafka's defaults (3 replicas, min ISR 2)
            # cannot be met by one node, and its share groups then never assign anything.
            "share.coordinator.state.topic.replication.factor": replicas,
            "share.coordinator.state.topic.min.isr": "1" if replicas == "1" else "2",
            "share.coordinator.state.topic.num.partitions": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        if self.rack is not None:
            props["broker.rack"] = self.rack
        return {**props, **self.overrides}

    def start(self, cluster_id: str | None = None, wait: bool = True) -> None:
        self.launch(cluster_id or new_cluster_id())
        if wait:
            self._wait_ready()

    def launch(self, cluster_id: str) -> None:
        """Format the log dir and start the process; :meth:`_wait_ready` waits for it."""
        libs = ensure_jars()
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "server.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        jvm = [
            java(),
            *self.jvm,
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
            "-cp",
            f"{libs}/*",
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

    def _wait_ready(self) -> None:
        """Ready when the broker answers ApiVersions (it accepts connections earlier)."""
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"kafka exited ({self.proc.returncode}):\n{self.log_tail()}")
            if answers_api_versions(self.host, self.port):
                return
            time.sleep(0.25)
        self.stop()
        raise RuntimeError(f"kafka did not answer ApiVersions in {START_TIMEOUT_S}s")

    def stop(self) -> None:
        if self.proc is None:
            return
        stop_child(self.proc, STOP_TIMEOUT_S)
        self.proc = None

    def log_tail(self, chars: int = 5000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no output)"


def new_cluster_id() -> str:
    """A random cluster id as Kafka makes one (Uuid.randomUuid): never starting with "-",
    which kafka-storage's argument parser would take for an option (1 start in 64 failed)."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).rstrip(b"=").decode()
        if not cluster_id.startswith("-"):
            return cluster_id


class KafkaCluster:
    """``n`` KRaft nodes, each broker and controller (a three-voter quorum for n = 3), one
    rack each: Kafka as an operator would run it on three machines, on this one."""

    def __init__(
        self,
        workdir: Path,
        n: int = 3,
        racks: tuple[str, ...] = ("az-a", "az-b", "az-c"),
        overrides: dict[str, str] | None = None,
        jvm: tuple[str, ...] = BENCH_JVM,
    ) -> None:
        self.nodes = [
            KafkaBroker(
                workdir / f"kafka-{i}", overrides, node_id=i, rack=racks[(i - 1) % len(racks)],
                jvm=jvm,
            )
            for i in range(1, n + 1)
        ]  # fmt: skip
        voters = ",".join(f"{b.node_id}@{b.host}:{b.controller_port}" for b in self.nodes)
        for b in self.nodes:
            b.voters = voters

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.nodes)

    @property
    def pids(self) -> list[int]:
        return [b.pid for b in self.nodes]

    def up(self) -> None:
        """All nodes at once (a quorum of three elects its leader only once two run)."""
        cluster_id = new_cluster_id()
        try:
            for b in self.nodes:
                b.launch(cluster_id)
            for b in self.nodes:
                b._wait_ready()
        except BaseException:
            self.down()
            raise

    def down(self) -> None:
        for b in self.nodes:
            b.stop()


def answers_api_versions(host: str, port: int, timeout: float = 5.0) -> bool:
    """Whether a Kafka listener answers an ApiVersions v0 request with error 0."""
    client = b"sluice-launch"
    body = struct.pack(">hhih", 18, 0, 1, len(client)) + client
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(struct.pack(">i", len(body)) + body)
            head = _read(sock, 4)
            (size,) = struct.unpack(">i", head)
            answer = _read(sock, size)
    except OSError:
        return False
    # correlation id (int32), then ApiVersions v0's error code (int16)
    return len(answer) >= 6 and struct.unpack(">ih", answer[:6]) == (1, 0)


def _read(sock: socket.socket, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = sock.recv(n - len(out))
        if not chunk:
            raise OSError("connection closed")
        out += chunk
    return out
