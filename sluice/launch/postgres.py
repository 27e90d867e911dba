"""A local PostgreSQL server for `sluice cluster up` and the tests.

It runs Debian's (or any installed) PostgreSQL binaries on a data directory of our own:
``initdb`` once, then ``postgres`` listening on 127.0.0.1 only, on a free port, with
fsync on (the coordinator's durability is the product's durability). PostgreSQL refuses
to run as root, so when we are root the server runs as the ``postgres`` OS user and the
directory is handed to that user.

Start and stop block (they spawn and wait for processes); from async code call them
through ``asyncio.to_thread``.
"""

from __future__ import annotations

import asyncio
import contextlib
import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlsplit, urlunsplit

from .process import free_port

SUPERUSER = "postgres"
# initdb as a root-owned process is refused; this OS user owns the cluster instead.
OS_USER = "postgres"


class PostgresLaunchError(RuntimeError):
    pass


def find_bindir() -> Path:
    """Where initdb/postgres/pg_isready live: ``pg_config --bindir``, else the newest
    /usr/lib/postgresql/*/bin (Debian keeps them off PATH)."""
    pg_config = shutil.which("pg_config")
    if pg_config:
        out = subprocess.run([pg_config, "--bindir"], capture_output=True, text=True)
        bindir = Path(out.stdout.strip())
        if out.returncode == 0 and (bindir / "initdb").exists():
            return bindir
    candidates = sorted(
        glob.glob("/usr/lib/postgresql/*/bin"), key=lambda p: int(Path(p).parent.name)
    )
    for candidate in reversed(candidates):
        if (Path(candidate) / "initdb").exists():
            return Path(candidate)
    raise PostgresLaunchError("PostgreSQL server binaries not found (install `postgresql`)")


class LocalPostgres:
    """One PostgreSQL server on ``directory`` (``data/`` cluster, ``run/`` socket dir,
    ``postgres.log``). The directory and the port survive :meth:`restart`."""

    def __init__(
        self,
        directory: str | Path,
        *,
        database: str = "sluice",
        port: int | None = None,
        settings: Mapping[str, str] | None = None,
        startup_timeout: float = 20.0,
    ) -> None:
        self.directory = Path(directory).absolute()
        self.database = database
        self.port = port
        self.settings = {"fsync": "on", **(settings or {})}
        self.startup_timeout = startup_timeout
        self.bindir = find_bindir()
        self._process: subprocess.Popen[bytes] | None = None
        self._run_as = OS_USER if os.geteuid() == 0 else None
        if self._run_as is not None:
            try:
                pwd.getpwnam(self._run_as)
            except KeyError:
                raise PostgresLaunchError(
                    f"running as root, PostgreSQL needs an OS user {self._run_as!r} to run as"
                ) from None

    # ---------------------------------------------------------------- addresses

    @property
    def data_dir(self) -> Path:
        return self.directory / "data"

    @property
    def socket_dir(self) -> Path:
        return self.directory / "run"

    @property
    def log_path(self) -> Path:
        return self.directory / "postgres.log"

    @property
    def password_path(self) -> Path:
        return self.directory / "password"

    def dsn_for(self, database: str) -> str:
        if self.port is None:
            raise PostgresLaunchError("not started")
        password = self.password_path.read_text().strip()
        # No TLS on loopback.
        return (
            f"postgresql://{SUPERUSER}:{password}@127.0.0.1:{self.port}/{quote(database)}"
            "?sslmode=disable"
        )

    @property
    def dsn(self) -> str:
        return self.dsn_for(self.database)

    @property
    def admin_dsn(self) -> str:
        return self.dsn_for("postgres")

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # ---------------------------------------------------------------- lifecycle

    def start(self) -> None:
        if self.running:
            return
        self.directory.mkdir(parents=True, exist_ok=True)
        self.socket_dir.mkdir(exist_ok=True)
        if self._run_as is not None:
            _chown_tree(self.directory, self._run_as)
        if not (self.data_dir / "PG_VERSION").exists():
            self._initdb()
        if self.port is None:
            self.port = free_port()
        self._spawn()
        self._wait_ready()
        _run_blocking(ensure_database(self.admin_dsn, self.database))

    def stop(self, timeout: float = 10.0) -> None:
        """Fast shutdown (SIGINT: roll back open transactions, checkpoint), then
        immediate (SIGQUIT: crash-like, recovered from WAL at next start), then SIGKILL."""
        proc, self._process = self._process, None
        if proc is None or proc.poll() is not None:
            return
        for sig, wait in ((signal.SIGINT, timeout), (signal.SIGQUIT, 5.0), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError):
                proc.send_signal(sig)
            try:
                proc.wait(wait)
                return
            except subprocess.TimeoutExpired:
                continue

    def restart(self) -> None:
        """Stop and start again on the same directory and port (clients reconnect)."""
        self.stop()
        self.start()

    def detach(self) -> int:
        """Leave the server running after this process exits (``sluice cluster up``); returns
        its pid. Stop it later by pid: SIGINT is a fast shutdown."""
        if self._process is None:
            raise PostgresLaunchError("not running")
        pid, self._process = self._process.pid, None
        return pid

    def __enter__(self) -> LocalPostgres:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---------------------------------------------------------------- internals

    def _run(self, args: list[str]) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            args, capture_output=True, text=True, user=self._run_as, cwd=self.directory
        )

    def _initdb(self) -> None:
        # A password even on loopback: with trust, any local user would be a database
        # superuser, and a superuser can run programs as the server's OS user.
        self.password_path.write_text(secrets.token_urlsafe(24) + "\n")
        self.password_path.chmod(0o600)
        if self._run_as is not None:
            _chown_tree(self.directory, self._run_as)
        out = self._run(
            [
                str(self.bindir / "initdb"),
                "-D",
                str(self.data_dir),
                "--username",
                SUPERUSER,
                f"--pwfile={self.password_path}",
                "--auth=scram-sha-256",
                "--encoding=UTF8",
                "--locale=C",
            ]
        )
        if out.returncode != 0:
            raise PostgresLaunchError(
                f"initdb failed ({out.returncode}):\n{out.stdout}{out.stderr}"
                + _access_hint(self.directory, self._run_as)
            )

    def _spawn(self) -> None:
        args = [
            str(self.bindir / "postgres"),
            "-D",
            str(self.data_dir),
            "-p",
            str(self.port),
            "-k",
            str(self.socket_dir),
            "-c",
            "listen_addresses=127.0.0.1",
        ]
        for key, value in self.settings.items():
            args += ["-c", f"{key}={value}"]
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                args,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                user=self._run_as,
                cwd=self.directory,
                # Its own session: a Ctrl-C meant for us must not shut it down before
                # we do, in order.
                start_new_session=True,
            )

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self.startup_timeout
        isready = [
            str(self.bindir / "pg_isready"),
            "-q",
            "-h",
            "127.0.0.1",
            "-p",
            str(self.port),
            "-U",
            SUPERUSER,
            "-d",
            "postgres",
            "-t",
            "1",
        ]
        while True:
            assert self._process is not None
            if self._process.poll() is not None:
                code = self._process.returncode
                self._process = None
                raise PostgresLaunchError(
                    f"postgres exited with {code} while starting:\n{self.log_tail()}"
                )
            if subprocess.run(isready, capture_output=True).returncode == 0:
                return
            if time.monotonic() > deadline:
                self.stop()
                raise PostgresLaunchError(
                    f"postgres not ready after {self.startup_timeout} s:\n{self.log_tail()}"
                )
            time.sleep(0.05)

    def log_tail(self, lines: int = 30) -> str:
        try:
            text = self.log_path.read_text(errors="replace")
        except OSError:
            return "(no log)"
        return "\n".join(text.splitlines()[-lines:])


async def ensure_database(dsn_admin: str, name: str) -> str:
    """Create database ``name`` unless it exists; returns its DSN (``dsn_admin`` with
    the database name replaced)."""
    import asyncpg  # the launcher is importable without the driver

    conn = await asyncpg.connect(dsn_admin, timeout=10)
    try:
        exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
        if not exists:
            try:
                # Identifiers cannot be parameters; quote_ident on the server side.
                sql = await conn.fetchval("SELECT format('CREATE DATABASE %I', $1::text)", name)
                await conn.execute(sql)
            except asyncpg.DuplicateDatabaseError:
                pass  # created concurrently by another starter: what we wanted
    finally:
        await conn.close()
    return replace_database(dsn_admin, name)


def replace_database(dsn: str, name: str) -> str:
    """``dsn`` (a postgresql:// URL) pointing at database ``name``."""
    parts = urlsplit(dsn)
    return urlunsplit(parts._replace(path="/" + quote(name)))


def _run_blocking(coro: Any) -> Any:
    # A thread of its own has no running loop, so this works both from plain code and
    # from a coroutine that called start() directly.
    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def _chown_tree(directory: Path, user: str) -> None:
    entry = pwd.getpwnam(user)
    for root, dirs, files in os.walk(directory):
        os.chown(root, entry.pw_uid, entry.pw_gid)
        for name in dirs + files:
            os.chown(os.path.join(root, name), entry.pw_uid, entry.pw_gid, follow_symlinks=False)


def _access_hint(directory: Path, user: str | None) -> str:
    if user is None:
        return ""
    return (
        f"\n(the server runs as OS user {user!r}: every parent of {directory} must be "
        "searchable by it; private temp dirs such as pytest's are not)"
    )
