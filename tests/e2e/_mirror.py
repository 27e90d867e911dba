"""Apache Kafka's MirrorMaker 2 in dedicated mode (org.apache.kafka.connect.mirror.MirrorMaker,
as connect-mirror-maker.sh runs it) between two clusters, for tests/e2e/test_mirror_maker.py.

Its jars come from Maven Central (tests/e2e/java/mirror-pom.xml) into a cache of their own
beside the broker's (sluice/launch/kafka.py's ensure_jars). Maven Central serves connect-mirror
up to 4.3.1, not the 4.4.0 of the Kafka broker the tests run, so MM2 runs on its own class
path, 4.3.1 throughout: it is a client of both clusters, as a user's MM2 of another release
would be.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping
from pathlib import Path

import pytest

from sluice.launch.kafka import ensure_jars, java
from sluice.launch.process import stop_child

MIRROR_VERSION = "4.3.1"
POM = Path(__file__).parent / "java" / "mirror-pom.xml"
STOP_TIMEOUT_S = 30.0

# Short intervals throughout so a test waits seconds, not MM2's minutes (its defaults: topics
# refreshed every 10 min, checkpoints every 60 s). Every topic MM2 creates takes the broker's
# default replication factor (-1), as docs/migrating-from-kafka.md recommends for a Sluice
# target (MM2 asks for 2 and 3 by default; a diskless topic takes -1, 1 or the rack count).
# offset.lag.max=0: an offset sync for every record, so a group's committed offset at the
# end of what was mirrored translates exactly (MM2 translates one past its latest sync at
# or before the offset, so a stale sync would make the group re-read records).
FAST: dict[str, str] = {
    "replication.factor": "-1",
    "checkpoints.topic.replication.factor": "-1",
    "heartbeats.topic.replication.factor": "-1",
    "offset-syncs.topic.replication.factor": "-1",
    "offset.storage.replication.factor": "-1",
    "status.storage.replication.factor": "-1",
    "config.storage.replication.factor": "-1",
    "refresh.topics.interval.seconds": "2",
    "refresh.groups.interval.seconds": "2",
    "sync.topic.configs.interval.seconds": "2",
    "sync.topic.acls.interval.seconds": "2",
    "emit.checkpoints.interval.seconds": "1",
    "emit.heartbeats.interval.seconds": "1",
    "sync.group.offsets.enabled": "true",
    "sync.group.offsets.interval.seconds": "1",
    "offset.lag.max": "0",
    "tasks.max": "2",
    # Find Connect's plugins by their ServiceLoader manifests (which all of MM2's have, as
    # its log says) rather than by scanning every class of the class path: ~7 s of CPU for
    # each of the config and the herder, at every start.
    "plugin.discovery": "service_load",
}
# Connect's worker settings of the herder that writes into a cluster: MM2 reads them only
# under that cluster's alias (``sluice.offset.flush.interval.ms``), a top-level one is
# ignored. The flush interval bounds how late offset syncs go out (MM2 sends those it held
# back when the task's offsets are flushed, 60 s by default): the group offsets' latency.
WORKER: dict[str, str] = {
    "plugin.discovery": "service_load",
    "offset.flush.interval.ms": "1000",
    "scheduled.rebalance.max.delay.ms": "1000",
}

# MM2's own classes at INFO (what it replicates, what it trips on); the clients' config dumps
# at every start would bury them.
LOGGING = (
    "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
    "-Dorg.slf4j.simpleLogger.showDateTime=true",
    "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients=warn",
    "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.common=warn",
    "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.connect.runtime.WorkerConfig=warn",
    "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.connect.mirror.MirrorMakerConfig=warn",
    "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.connect.mirror.Scheduler=warn",
)


def mirror_jars() -> Path:
    """connect-mirror and its dependencies, fetched with Maven on first use."""
    if shutil.which("mvn") is None:
        pytest.skip("mvn not found: MirrorMaker 2 is fetched with Maven")
    return ensure_jars(MIRROR_VERSION, POM, "kafka-mirror")


class MirrorMaker:
    """One MM2 process replicating between ``clusters`` (alias -> bootstrap) along ``flows``
    (``"kafka->sluice"``, ...), with the test's ``settings`` over :data:`FAST`."""

    def __init__(
        self,
        workdir: Path,
        clusters: Mapping[str, str],
        flows: list[str],
        settings: Mapping[str, str] | None = None,
    ) -> None:
        self.workdir = workdir
        self.clusters = dict(clusters)
        self.flows = flows
        self.settings = {**FAST, **(settings or {})}
        self.log_path = workdir / "mm2.log"
        self.proc: subprocess.Popen[bytes] | None = None

    def properties(self) -> dict[str, str]:
        props = {"clusters": ", ".join(self.clusters)}
        for alias, bootstrap in self.clusters.items():
            props[f"{alias}.bootstrap.servers"] = bootstrap
            props.update({f"{alias}.{key}": value for key, value in WORKER.items()})
        for source in self.clusters:
            for target in self.clusters:
                if source != target:
                    flow = f"{source}->{target}"
                    enabled = "true" if flow in self.flows else "false"
                    props[f"{flow}.enabled"] = enabled
                    # MM2 runs a herder for a disabled flow too, to emit its heartbeats,
                    # and that herder starts whatever connectors its config topic holds
                    # from an earlier run (a test's brokers outlive one MM2): none here.
                    props[f"{flow}.emit.heartbeats.enabled"] = enabled
        return {**props, **self.settings}

    def start(self) -> None:
        libs = mirror_jars()
        self.workdir.mkdir(parents=True, exist_ok=True)
        config = self.workdir / "mm2.properties"
        config.write_text("".join(f"{k}={v}\n" for k, v in self.properties().items()))
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [
                    java(),
                    "-Xmx384m",
                    "-XX:TieredStopAtLevel=1",
                    "-XX:+UseSerialGC",
                    *LOGGING,
                    "-cp",
                    f"{libs}/*",
                    "org.apache.kafka.connect.mirror.MirrorMaker",
                    str(config),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        if self.proc is None:
            return
        stop_child(self.proc, STOP_TIMEOUT_S)
        self.proc = None

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def problems(self) -> list[str]:
        """MM2's WARN and ERROR lines while it ran: what it tripped on (a broker answer it did
        not expect shows here first, retried quietly by the clients). Those after it began
        to stop are left out: its tasks' schedulers race the closing of their own clients
        (an admin call made as its client closes is logged as an error, whatever the
        broker)."""
        found: list[str] = []
        stopping = False
        for line in self.log().splitlines():
            if "Kafka MirrorMaker stopping" in line:
                stopping = True
            elif "Kafka MirrorMaker initializing" in line:
                stopping = False  # the next run, appended to the same log
            elif not stopping and (" WARN " in line or " ERROR " in line):
                found.append(line)
        return found
