"""A local multi-AZ cluster under one directory: PostgreSQL, SeaweedFS and N brokers.

``sluice cluster up`` starts the machine's PostgreSQL installation, ``weed mini`` (SeaweedFS,
S3-compatible) and N ``sluice broker`` processes on free ports, one rack per broker in turn,
with every config, data directory and log under ``--dir``; it leaves them running and writes
``cluster.json`` so that ``sluice cluster down`` can stop them. Tests and benchmarks use
:class:`LocalCluster` directly, as a context manager.

Layout of the directory::

    cluster.json            pids, ports, bootstrap (written by `up`, removed by `down`)
    ports.json              the ports of the last `up`, reused by the next one while free
    postgres/               LocalPostgres (data/, run/, postgres.log)
    seaweedfs/              LocalSeaweedFS (data/, s3.json, weed.log)
    broker-<id>/            broker.properties, data/, broker.log
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import secrets
import shutil
import signal
import socket
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import TYPE_CHECKING, Any

from .launch.postgres import OS_USER as POSTGRES_USER
from .launch.postgres import LocalPostgres
from .launch.process import (
    SluiceProcess,
    free_port,
    pid_alive,
    process_start_time,
    stop_pid,
)
from .launch.seaweedfs import LocalSeaweedFS

log = logging.getLogger(__name__)

DEFAULT_RACKS = ("az-a", "az-b", "az-c")
BUCKET = "sluice"
STATE_FILE = "cluster.json"
PORTS_FILE = "ports.json"

if TYPE_CHECKING:
    from storage.objects.s3 import S3Config


def _port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


class _PortBook:
    """Ports kept across ``down``/``up`` of one directory, so bootstrap servers and client
    configs stay valid; a remembered port another process took meanwhile is replaced."""

    def __init__(self, root: Path) -> None:
        try:
            self._remembered: dict[str, Any] = json.loads((root / PORTS_FILE).read_text())
        except (OSError, ValueError):
            self._remembered = {}

    def port(self, name: str) -> int:
        wanted = self._remembered.get(name)
        if isinstance(wanted, int) and 0 < wanted < 65536 and _port_free(wanted):
            return wanted
        return free_port()

    def ports(self, name: str) -> dict[str, int]:
        wanted = self._remembered.get(name)
        if isinstance(wanted, dict) and all(
            isinstance(p, int) and 0 < p < 65536 and _port_free(p) for p in wanted.values()
        ):
            return dict(wanted)
        return {}


class ClusterError(RuntimeError):
    pass


class BrokerProcess(SluiceProcess):
    """One ``sluice broker --config broker.properties`` of a local cluster."""

    def __init__(
        self,
        workdir: Path,
        node_id: int,
        port: int,
        rack: str | None,
        http_port: int | None = None,
    ) -> None:
        self.workdir = workdir
        self.node_id = node_id
        self.rack = rack
        self.http_port = http_port or free_port()
        self.config_path = workdir / "broker.properties"
        self.data_dir = workdir / "data"
        super().__init__(
            ["broker", "--config", str(self.config_path)], workdir / "broker.log", port
        )

    def http_get(self, path: str, timeout: float = 5.0) -> tuple[int, str]:
        """(status, body) of a GET on the broker's HTTP endpoint (/metrics, /readyz, ...)."""
        url = f"http://{self.host}:{self.http_port}{path}"
        try:
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def wait_serving(self, timeout: float = 60.0) -> None:
        """Until ``/readyz`` answers 200 (the broker is part of the cluster: registered,
        unfenced, reaching its coordinator)."""
        deadline = time.monotonic() + timeout
        status, body = 0, ""
        while time.monotonic() < deadline:
            try:
                status, body = self.http_get("/readyz", timeout=2.0)
            except OSError as exc:
                status, body = 0, str(exc)
            if status == 200:
                return
            time.sleep(0.1)
        raise ClusterError(f"broker {self.node_id} not ready within {timeout:.0f}s: {body.strip()}")

    def metrics(self) -> dict[str, float]:
        """Current samples, keyed like ``name{label="v",...}`` (labels sorted)."""
        from prometheus_client.parser import text_string_to_metric_families

        status, text = self.http_get("/metrics")
        if status != 200:
            raise ClusterError(f"broker {self.node_id} /metrics answered {status}")
        out = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return out

    def write_config(self, settings: Mapping[str, str]) -> None:
        _write_properties(self.workdir, self.config_path, settings)


def _write_properties(workdir: Path, path: Path, settings: Mapping[str, str]) -> None:
    workdir.mkdir(parents=True, exist_ok=True)
    lines = [f"{key}={value}" for key, value in settings.items()]
    # 0600: it holds the S3 secret, the database password and the controller secret.
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write("# written by sluice cluster up\n" + "\n".join(lines) + "\n")


class ControllerProcess(SluiceProcess):
    """One ``sluice controller --config controller.properties`` (a Raft voter)."""

    def __init__(
        self,
        workdir: Path,
        node_id: int,
        raft_port: int | None = None,
        http_port: int | None = None,
    ) -> None:
        self.workdir = workdir
        self.node_id = node_id
        # Set when the API is HTTPS with client certificates (--secure).
        self.tls_ca: str | None = None
        self.tls_client: tuple[str, str] | None = None
        self.raft_port = raft_port or free_port()
        self.config_path = workdir / "controller.properties"
        self.data_dir = workdir / "data"
        # Ready when the HTTP API answers; that is the port SluiceProcess waits for.
        super().__init__(
            ["controller", "--config", str(self.config_path)],
            workdir / "controller.log",
            http_port or free_port(),
        )

    @property
    def url(self) -> str:
        return f"{'https' if self.tls_ca else 'http'}://{self.host}:{self.port}"

    def status(self) -> dict[str, Any]:
        import ssl

        context = ssl.create_default_context(cafile=self.tls_ca) if self.tls_ca else None
        if context is not None and self.tls_client is not None:
            context.load_cert_chain(*self.tls_client)
        with urllib.request.urlopen(
            self.url + "/v1/status", timeout=2, context=context
        ) as response:
            return dict(json.load(response))

    def write_config(self, settings: Mapping[str, str]) -> None:
        _write_properties(self.workdir, self.config_path, settings)


@dataclass(frozen=True)
class ExternalS3:
    """An S3 endpoint the cluster uses instead of starting SeaweedFS."""

    endpoint_url: str
    access_key: str
    secret_key: str
    region: str = "us-east-1"
    bucket: str = BUCKET

    def store_config(self, **overrides: Any) -> S3Config:
        """The object store's settings for a tool or test reading the cluster's bucket."""
        from storage.objects.s3 import S3Config

        settings: dict[str, Any] = {
            "endpoint_url": self.endpoint_url,
            "region": self.region,
            "bucket": self.bucket,
            "access_key": self.access_key,
            "secret_key": self.secret_key,
        }
        return S3Config(**(settings | overrides))


class LocalCluster:
    """PostgreSQL + SeaweedFS + ``brokers`` broker processes under ``root``.

    ``broker_options`` are broker configs every broker gets (e.g. a short commit interval);
    ``postgres_dsn`` / ``s3`` point at existing servers instead of starting local ones;
    ``seaweed_volume_mb`` sets the local SeaweedFS's volume size (weed mini's own otherwise).
    """

    def __init__(
        self,
        root: str | os.PathLike[str],
        brokers: int = 3,
        racks: Sequence[str] = DEFAULT_RACKS,
        broker_options: Mapping[str, str] | None = None,
        *,
        postgres_dsn: str | None = None,
        s3: ExternalS3 | None = None,
        controllers: int = 0,
        controller_options: Mapping[str, str] | None = None,
        secure: bool = False,
        seaweed_volume_mb: int | None = None,
    ) -> None:
        if brokers < 0:
            raise ClusterError("the number of brokers cannot be negative")
        if secure and not controllers:
            raise ClusterError("--secure needs a controller quorum (--controllers 1, 3 or 5)")
        # --secure: brokers listen on SASL_SSL only, the controllers' API is HTTPS with
        # client certificates, and a SCRAM admin user exists before the first broker starts.
        self.secure = secure
        self.root = Path(root).absolute()
        self.broker_options = dict(broker_options or {})
        self.postgres: LocalPostgres | None = None
        self.seaweed: LocalSeaweedFS | None = None
        self._postgres_dsn = postgres_dsn
        self._s3 = s3
        self._seaweed_volume_mb = seaweed_volume_mb
        if controllers not in (0, 1, 3, 5):
            raise ClusterError("a controller quorum has 1, 3 or 5 voters (0: none)")
        self.controller_options = dict(controller_options or {})
        self.secret = secrets.token_urlsafe(16)
        self._ports = _PortBook(self.root)
        self.controllers = [
            ControllerProcess(
                self.root / f"controller-{i}",
                i,
                self._ports.port(f"controller-{i}.raft"),
                self._ports.port(f"controller-{i}.http"),
            )
            for i in range(1, controllers + 1)
        ]
        racks = list(racks) or [""]
        self.brokers = [
            BrokerProcess(
                self.root / f"broker-{node_id}",
                node_id,
                self._ports.port(f"broker-{node_id}"),
                racks[i % len(racks)] or None,
                self._ports.port(f"broker-{node_id}.http"),
            )
            for i, node_id in enumerate(range(1, brokers + 1))
        ]

    # ---------------------------------------------------------------- addresses

    @property
    def bootstrap(self) -> str:
        return ",".join(b.bootstrap for b in self.brokers)

    @property
    def dsn(self) -> str:
        if self._postgres_dsn:
            return self._postgres_dsn
        if self.postgres is None:
            raise ClusterError("PostgreSQL is not started")
        return self.postgres.dsn

    @property
    def s3(self) -> ExternalS3:
        if self._s3 is not None:
            return self._s3
        if self.seaweed is None:
            raise ClusterError("SeaweedFS is not started")
        return ExternalS3(
            self.seaweed.endpoint_url,
            self.seaweed.access_key,
            self.seaweed.secret_key,
            self.seaweed.region,
        )

    def broker(self, node_id: int) -> BrokerProcess:
        for b in self.brokers:
            if b.node_id == node_id:
                return b
        raise KeyError(node_id)

    @property
    def tls(self) -> Any:
        """The generated CA, certificates and admin password (``--secure``)."""
        from .secure import SecureFiles

        return SecureFiles(self.root / "tls")

    def broker_settings(self, b: BrokerProcess) -> dict[str, str]:
        """The config file of one broker: shared storage, its own port, rack and data dir."""
        s3 = self.s3
        settings = {
            "node.id": str(b.node_id),
            "host": b.host,
            "port": str(b.port),
            "data.dir": str(b.data_dir),
            "http.port": str(b.http_port),
            "object.store": "s3",
            "s3.endpoint": s3.endpoint_url,
            "s3.region": s3.region,
            "s3.bucket": s3.bucket,
            "s3.access.key": s3.access_key,
            "s3.secret.key": s3.secret_key,
            "coordinator": "postgresql",
            "coordinator.dsn": self.dsn,
            # No cluster.brokers: brokers find each other through the controllers (if any)
            # or the database.
        }
        if self.controllers:
            settings["controller.quorum.bootstrap.servers"] = ",".join(
                f"{c.host}:{c.port}" for c in self.controllers
            )
            settings["controller.secret"] = self.secret
        if self.secure:
            from .secure import broker_settings

            settings.update(broker_settings(self.tls, b.host, b.port))
        if b.rack:
            settings["broker.rack"] = b.rack
        settings.update(self.broker_options)
        if self.secure:
            from .secure import BROKER_USER

            # Super users given as options add to the brokers' own principal: without it,
            # an authorizer would refuse replication (CLUSTER_ACTION).
            supers = [s.strip() for s in settings["super.users"].split(";") if s.strip()]
            if f"User:{BROKER_USER}" not in supers:
                supers.append(f"User:{BROKER_USER}")
            settings["super.users"] = ";".join(supers)
        return settings

    def controller_settings(self, c: ControllerProcess) -> dict[str, str]:
        settings = {
            "node.id": str(c.node_id),
            "controller.quorum.voters": ",".join(
                f"{o.node_id}@{o.host}:{o.raft_port}" for o in self.controllers
            ),
            "host": c.host,
            "http.port": str(c.port),
            "data.dir": str(c.data_dir),
            "controller.secret": self.secret,
        }
        if self.secure:
            from .secure import controller_settings

            settings.update(controller_settings(self.tls))
        settings.update(self.controller_options)
        return settings

    def active_controller(self) -> ControllerProcess | None:
        for c in self.controllers:
            if c.alive():
                with contextlib.suppress(OSError, ValueError):
                    if c.status().get("role") == "leader":
                        return c
        return None

    # ---------------------------------------------------------------- lifecycle

    def up(self) -> None:
        """Start everything and wait until every broker accepts connections and is ready
        (registered and unfenced): a topic created before a broker is unfenced gets no
        replica led by it."""
        self.root.mkdir(parents=True, exist_ok=True)
        try:
            if self._postgres_dsn is None and self.brokers:
                self.postgres = LocalPostgres(
                    _postgres_dir(self.root / "postgres"), port=self._ports.port("postgres")
                )
                self.postgres.start()
            if self._s3 is None and self.brokers:
                self.seaweed = LocalSeaweedFS(
                    self.root / "seaweedfs", volume_size_limit_mb=self._seaweed_volume_mb
                )
                self.seaweed.ports = self._ports.ports("seaweedfs")
                self.seaweed.start()
                self.seaweed.create_bucket(BUCKET)
            if self.secure:
                from .secure import generate

                generate(self.root / "tls", sorted({c.host for c in self.controllers}))
                for c in self.controllers:
                    c.tls_ca = str(self.tls.ca)
                    c.tls_client = (str(self.tls.client_cert), str(self.tls.client_key))
            for c in self.controllers:
                c.write_config(self.controller_settings(c))
                c.start(wait=False)
            for c in self.controllers:
                c.wait_ready()
            if self.secure:
                self._create_admin()
            for b in self.brokers:
                b.write_config(self.broker_settings(b))
                b.start(wait=False)  # in parallel: each takes a second or two to import
            for b in self.brokers:
                b.wait_ready()
            for b in self.brokers:
                b.wait_serving()
        except BaseException:
            self.down()
            raise
        self._remember_ports()
        log.info("cluster up: %s", self.bootstrap)

    def _create_admin(self) -> None:
        import asyncio

        from .secure import create_admin, write_client_properties

        asyncio.run(create_admin(self.tls, [c.url for c in self.controllers], self.secret))
        write_client_properties(self.tls, self.bootstrap)

    def _remember_ports(self) -> None:
        ports: dict[str, Any] = {}
        for b in self.brokers:
            ports[f"broker-{b.node_id}"] = b.port
            ports[f"broker-{b.node_id}.http"] = b.http_port
        for c in self.controllers:
            ports[f"controller-{c.node_id}.raft"] = c.raft_port
            ports[f"controller-{c.node_id}.http"] = c.port
        if self.postgres is not None and self.postgres.port is not None:
            ports["postgres"] = self.postgres.port
        if self.seaweed is not None:
            ports["seaweedfs"] = dict(self.seaweed.ports)
        tmp = self.root / (PORTS_FILE + ".tmp")
        tmp.write_text(json.dumps(ports, indent=2, sort_keys=True) + "\n")
        os.replace(tmp, self.root / PORTS_FILE)

    def down(self) -> None:
        """Stop brokers first (they flush what producers were promised), then storage."""
        errors = []
        for b in self.brokers:
            try:
                b.stop()
            except Exception as exc:
                errors.append(f"broker {b.node_id}: {exc}")
        for c in self.controllers:
            try:
                c.stop()
            except Exception as exc:
                errors.append(f"controller {c.node_id}: {exc}")
        if self.seaweed is not None:
            self.seaweed.stop()
        if self.postgres is not None:
            self.postgres.stop()
        if errors:
            raise ClusterError("; ".join(errors))

    def remove_data(self) -> None:
        """Delete everything under ``root`` (and PostgreSQL's directory if it lives
        elsewhere); for throwaway clusters, after :meth:`down`."""
        pg = self.root / "postgres"
        if pg.is_symlink():
            shutil.rmtree(pg.resolve(), ignore_errors=True)
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LocalCluster:
        self.up()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.down()

    # ---------------------------------------------------------------- detached (CLI)

    def detach(self) -> dict[str, Any]:
        """Leave every process running after this one exits; write and return the state
        ``sluice cluster down`` needs to stop them."""
        processes = []
        for b in self.brokers:
            processes.append(_entry(f"broker-{b.node_id}", b.pid, signal.SIGTERM))
            b.proc = None
        state: dict[str, Any] = {"bootstrap": self.bootstrap, "brokers": [], "processes": []}
        if self.secure:
            state["security"] = {
                "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512",
                "username": "admin",
                "password_file": str(self.tls.admin_password_file),
                "ssl.ca.location": str(self.tls.ca),
                "client_properties": str(self.tls.client_properties),
            }
        state["brokers"] = [
            {
                "node_id": b.node_id,
                "port": b.port,
                "http_port": b.http_port,
                "rack": b.rack,
                "log": str(b.log_path),
            }
            for b in self.brokers
        ]
        for c in self.controllers:
            processes.append(_entry(f"controller-{c.node_id}", c.pid, signal.SIGTERM))
            c.proc = None
        state["controllers"] = [
            {"node_id": c.node_id, "http_port": c.port, "raft_port": c.raft_port}
            for c in self.controllers
        ]
        # Storage stops after the brokers: they flush on SIGTERM.
        if self.seaweed is not None:
            state["seaweedfs"] = {
                "endpoint": self.seaweed.endpoint_url,
                "ports": self.seaweed.ports,
            }
            processes.append(_entry("seaweedfs", self.seaweed.detach(), signal.SIGTERM))
        if self.postgres is not None:
            state["postgres"] = {"port": self.postgres.port}
            processes.append(_entry("postgres", self.postgres.detach(), signal.SIGINT))
        state["processes"] = processes
        path = self.root / STATE_FILE
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state, indent=2) + "\n")
        os.replace(tmp, path)
        return state


def _postgres_dir(wanted: Path) -> Path:
    """Where PostgreSQL's files go. Run as root, the server runs as the ``postgres`` user,
    which must be able to reach its directory; when ``wanted`` is under a private directory
    (a home or pytest's temp dirs) the files go to a temp dir and ``wanted`` links there."""
    if wanted.is_symlink():
        return wanted.resolve()
    if os.geteuid() != 0 or wanted.exists() or _reachable_by(wanted.parent, POSTGRES_USER):
        return wanted
    real = Path(tempfile.mkdtemp(prefix="sluice-cluster-pg-"))
    os.chmod(real, 0o755)
    wanted.symlink_to(real)
    return real


def _reachable_by(directory: Path, user: str) -> bool:
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        return True  # LocalPostgres reports the missing user itself
    for path in [directory, *directory.parents]:
        st = path.stat()
        if st.st_uid == entry.pw_uid:
            bit = 0o100
        elif st.st_gid == entry.pw_gid:
            bit = 0o010
        else:
            bit = 0o001
        if not st.st_mode & bit:
            return False
    return True


def _entry(name: str, pid: int, stop_signal: int) -> dict[str, Any]:
    return {
        "name": name,
        "pid": pid,
        "start_time": process_start_time(pid),
        "stop_signal": int(stop_signal),
    }


def read_state(root: str | os.PathLike[str]) -> dict[str, Any]:
    path = Path(root).absolute() / STATE_FILE
    try:
        return dict(json.loads(path.read_text()))
    except FileNotFoundError:
        raise ClusterError(f"no cluster is up in {path.parent} (no {STATE_FILE})") from None


def status(root: str | os.PathLike[str]) -> list[tuple[str, int, bool]]:
    """(name, pid, running) of every process ``up`` left running."""
    return [
        (p["name"], p["pid"], pid_alive(p["pid"], p["start_time"]))
        for p in read_state(root)["processes"]
    ]


def down_detached(root: str | os.PathLike[str]) -> list[str]:
    """Stop what ``sluice cluster up`` left running in ``root``, in order; returns the
    names of the processes that were still running."""
    root = Path(root).absolute()
    state = read_state(root)
    stopped = []
    for p in state["processes"]:
        steps = ((p["stop_signal"], 15.0), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0))
        if stop_pid(p["pid"], steps, p["start_time"]):
            stopped.append(p["name"])
    if "seaweedfs" in state:
        weed = LocalSeaweedFS(root / "seaweedfs")
        weed.ports = dict(state["seaweedfs"]["ports"])
        weed.remove_sockets()
    (root / STATE_FILE).unlink()
    return stopped
