"""The cluster under test: 3 controllers and 3 brokers in 3 racks (sluice.cluster.LocalCluster)
on PostgreSQL and SeaweedFS, with a fault proxy in front of each of the two.

PostgreSQL and SeaweedFS are started here, not by LocalCluster, so the brokers can be pointed
at the proxies (LocalCluster's ``postgres_dsn`` / ``s3`` options) and the nemesis can kill and
restart them. Every process runs in its own session (the launchers start them so): a signal
sent to its process group reaches all of it (PostgreSQL's backends included).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from confluent_kafka.admin import AdminClient

from sluice.cluster import BUCKET, ExternalS3, LocalCluster
from sluice.launch.postgres import LocalPostgres
from sluice.launch.seaweedfs import LocalSeaweedFS

from .netns import PG_IP, S3_IP, Network
from .proxy import FaultProxy, ProxyThread

# Faster than Kafka's defaults (session 9 s, replica lag 30 s) so a run sees many faults, in
# Kafka's proportions: a broker paused for less than its session stays registered (and its
# replicas in the ISRs) while its fetches stop; one paused longer than replica.lag.time.max.ms
# leaves the ISRs.
SESSION_MS = 4000
REPLICA_LAG_MS = 5000
BROKER_OPTIONS = {
    "produce.commit.interval.ms": "20",
    "broker.heartbeat.interval.ms": "400",
    "broker.session.timeout.ms": str(SESSION_MS),
    "metadata.refresh.interval.ms": "500",
    "replica.lag.time.max.ms": str(REPLICA_LAG_MS),
    "replica.fetch.backoff.ms": "200",
    # Tiered topics: copy rolled segments and apply local retention quickly.
    "remote.log.manager.task.interval.ms": "1000",
    "log.retention.check.interval.ms": "1000",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "1000",
}
CONTROLLER_OPTIONS = {"broker.session.timeout.ms": str(SESSION_MS)}
RACKS = ("az-a", "az-b", "az-c")


@dataclass
class Proc:
    """One process the nemesis can signal: its pid (a process group leader) and how to start
    it again after a SIGKILL."""

    name: str
    pid_of: Any  # () -> int | None
    restart: Any  # () -> None
    reap: Any  # () -> None: wait for the killed process so it leaves no zombie


class NemesisCluster:
    """``netns``: every broker and controller in a network namespace of its own (see
    netns.py), so the nemesis can cut links; needs root."""

    def __init__(self, root: Path | None = None, netns: bool = False) -> None:
        # 0755: PostgreSQL runs as the `postgres` OS user when we are root and must reach it.
        self.root = Path(root or tempfile.mkdtemp(prefix="sluice-nemesis-"))
        self.root.mkdir(parents=True, exist_ok=True)
        os.chmod(self.root, 0o755)
        self.postgres = LocalPostgres(self.root / "postgres")
        self.seaweed = LocalSeaweedFS(self.root / "seaweedfs")
        self.proxies = ProxyThread()
        self.pg_proxy: FaultProxy | None = None
        self.s3_proxy: FaultProxy | None = None
        self.cluster: LocalCluster | None = None
        self.stopped: set[str] = set()  # names of SIGSTOPped processes
        self.killed: set[str] = set()  # names of SIGKILLed processes not restarted yet
        self.unexpected: list[str] = []  # processes that exited on their own, restarted
        names = [f"broker-{i}" for i in (1, 2, 3)] + [f"controller-{i}" for i in (1, 2, 3)]
        self.net = Network(names) if netns else None

    # ------------------------------------------------------------------ lifecycle

    def up(self) -> None:
        try:
            self.postgres.start()
            self.seaweed.start()
            self.seaweed.create_bucket(BUCKET)
            self.proxies.start()
            pg_ip, s3_ip = "127.0.0.1", "127.0.0.1"
            if self.net is not None:
                self.net.up()
                pg_ip, s3_ip = PG_IP, S3_IP
            assert self.postgres.port is not None
            self.pg_proxy = self.proxies.add(
                "postgres", "127.0.0.1", self.postgres.port, bind=pg_ip
            )
            s3_port = int(self.seaweed.endpoint_url.rsplit(":", 1)[1])
            self.s3_proxy = self.proxies.add("s3", "127.0.0.1", s3_port, http=True, bind=s3_ip)
            dsn = self.postgres.dsn.replace(
                f"127.0.0.1:{self.postgres.port}", f"{pg_ip}:{self.pg_proxy.port}"
            )
            s3 = ExternalS3(
                f"http://{s3_ip}:{self.s3_proxy.port}",
                self.seaweed.access_key,
                self.seaweed.secret_key,
                self.seaweed.region,
            )
            self.cluster = LocalCluster(
                self.root / "cluster",
                brokers=3,
                racks=RACKS,
                broker_options=BROKER_OPTIONS,
                postgres_dsn=dsn,
                s3=s3,
                controllers=3,
                controller_options=CONTROLLER_OPTIONS,
            )
            if self.net is not None:
                self._into_namespaces(self.cluster, self.net)
            self.cluster.up()
        except BaseException:
            self.down()
            raise

    @staticmethod
    def _into_namespaces(cluster: LocalCluster, net: Network) -> None:
        """Each broker and controller listens on its namespace's address and runs in it."""
        for proc, name in [(b, f"broker-{b.node_id}") for b in cluster.brokers] + [
            (c, f"controller-{c.node_id}") for c in cluster.controllers
        ]:
            proc.host = net.ips[name]
            plain = proc.command
            proc.command = lambda plain=plain, name=name: net.command(name, plain())  # type: ignore[method-assign]

    def down(self) -> None:
        self.heal_all(restart=False)
        if self.cluster is not None:
            with contextlib.suppress(Exception):
                self.cluster.down()
        self.proxies.stop()
        self.seaweed.stop()
        self.postgres.stop()
        if self.net is not None:
            self.net.down()

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)

    @property
    def bootstrap(self) -> str:
        assert self.cluster is not None
        return self.cluster.bootstrap

    # ------------------------------------------------------------------ processes

    def procs(self) -> dict[str, Proc]:
        assert self.cluster is not None
        out: dict[str, Proc] = {}
        for b in self.cluster.brokers:
            out[f"broker-{b.node_id}"] = Proc(
                f"broker-{b.node_id}",
                lambda b=b: b.proc.pid if b.proc is not None else None,
                lambda b=b: b.start(wait=False),
                lambda b=b: _reap(b.proc),
            )
        for c in self.cluster.controllers:
            out[f"controller-{c.node_id}"] = Proc(
                f"controller-{c.node_id}",
                lambda c=c: c.proc.pid if c.proc is not None else None,
                lambda c=c: c.start(wait=False),
                lambda c=c: _reap(c.proc),
            )
        out["postgres"] = Proc(
            "postgres",
            lambda: self.postgres._process.pid if self.postgres._process else None,
            self.postgres.start,
            lambda: _reap(self.postgres._process),
        )
        out["s3"] = Proc(
            "s3", lambda: self.seaweed.pid, self.seaweed.start, lambda: _reap(self.seaweed._proc)
        )
        return out

    def signal(self, name: str, sig: int) -> None:
        proc = self.procs()[name]
        pid = proc.pid_of()
        if pid is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, sig)
        if sig == signal.SIGSTOP:
            self.stopped.add(name)
        elif sig == signal.SIGCONT:
            self.stopped.discard(name)
        elif sig == signal.SIGKILL:
            self.stopped.discard(name)
            self.killed.add(name)
            proc.reap()

    def restart(self, name: str) -> None:
        if name in self.killed:
            self.procs()[name].restart()
            self.killed.discard(name)

    def heal_all(self, restart: bool = True) -> None:
        """SIGCONT every stopped process, clear the proxies' faults, restart killed ones."""
        for name in list(self.stopped):
            self.signal(name, signal.SIGCONT)
        for proxy in (self.pg_proxy, self.s3_proxy):
            if proxy is not None:
                proxy.clear()
        if self.net is not None:
            self.net.heal()
        if restart:
            # Storage first: brokers and controllers reconnect to it.
            for name in sorted(self.killed, key=lambda n: n not in ("postgres", "s3")):
                self.restart(name)

    # ------------------------------------------------------------------ metadata

    def admin(self) -> AdminClient:
        return AdminClient({"bootstrap.servers": self.bootstrap})

    def active_controller(self) -> str | None:
        assert self.cluster is not None
        c = self.cluster.active_controller()
        return f"controller-{c.node_id}" if c is not None else None

    def wait_healthy(self, topics: list[str], timeout: float = 120.0) -> float:
        """Until every process runs (one that exited on its own is noted in ``unexpected``
        and started again), every broker is ready (/readyz: registered, unfenced) and every
        partition of ``topics`` has a leader and its full replica set in the ISR; returns the
        seconds it took. A broker just restarted may still be in the ISR and in Metadata (its
        session has not expired): only its /readyz says it is back."""
        assert self.cluster is not None
        started = time.monotonic()
        admin = self.admin()
        last = ""
        while time.monotonic() - started < timeout:
            self._restart_exited()
            try:
                ok = True
                for b in self.cluster.brokers:
                    status, body = b.http_get("/readyz", timeout=2.0)
                    if status != 200:
                        ok, last = False, f"broker {b.node_id} not ready: {body.strip()[:200]}"
                md = admin.list_topics(timeout=5)
                if len(md.brokers) != 3:
                    ok, last = False, f"brokers in Metadata: {sorted(md.brokers)}"
                for t in topics:
                    for p in md.topics[t].partitions.values():
                        if p.leader < 0 or sorted(p.isrs) != sorted(p.replicas):
                            ok = False
                            last = f"{t}-{p.id} leader {p.leader} isr {p.isrs} of {p.replicas}"
                if ok:
                    return time.monotonic() - started
            except Exception as exc:
                last = str(exc)
            time.sleep(0.5)
        raise TimeoutError(f"cluster not healthy after {timeout:.0f} s: {last}")

    def _restart_exited(self) -> None:
        """A process that is neither killed by the nemesis nor running exited on its own (a
        broker that could not start during a storage outage, a crash): noted, restarted."""
        assert self.cluster is not None
        for proc in [*self.cluster.brokers, *self.cluster.controllers]:
            name = type(proc).__name__.replace("Process", "").lower() + f"-{proc.node_id}"
            if name in self.killed or proc.alive():
                continue
            code = proc.proc.poll() if proc.proc is not None else None
            self.unexpected.append(f"{time.strftime('%H:%M:%S')} {name} exited ({code})")
            proc.proc = None
            proc.start(wait=False)

    def log_paths(self) -> list[Path]:
        assert self.cluster is not None
        paths = [b.log_path for b in self.cluster.brokers]
        paths += [c.log_path for c in self.cluster.controllers]
        return paths


def _reap(proc: subprocess.Popen[bytes] | None) -> None:
    if proc is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)
