"""Sluice processes started from Python: one ``sluice`` command per :class:`SluiceProcess`.

Used by ``sluice cluster up`` for its brokers, by the end-to-end tests for ``sluice dev``, and by
the benchmarks, so that starting, readiness, signals and logs work the same everywhere.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path

START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
LOG_TAIL_CHARS = 20_000


class ProcessStartError(RuntimeError):
    pass


# Ports this process has handed out: the kernel may return a port it just gave us again
# once our probe socket is closed, and two components of one cluster then collide (a broker
# once reached another component's HTTP server instead of its controller).
_HANDED_OUT: set[int] = set()


def free_port() -> int:
    """A port for a component of a local cluster to listen on, free when asked.

    Taken below the kernel's ephemeral range when there is room: a port the kernel picked
    for us (bind to port 0) is free only until the component binds it, and meanwhile any
    process's outgoing connection may get it as its local port (brokers open many: to
    PostgreSQL, the object store, the controller); such a collision once kept a broker of a
    test cluster from starting. Ports below the range are never handed out that way."""
    low, _high = _ephemeral_range()
    for _ in range(1000):
        if low > _PRIVATE_LOW + 1000:
            port = random.randrange(_PRIVATE_LOW, low)
            if not _claimable(port):
                continue
        else:
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind(("127.0.0.1", 0))
                port = int(s.getsockname()[1])
            if port in _HANDED_OUT:
                continue
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port found")


# Below the ephemeral range, above the ports services commonly use.
_PRIVATE_LOW = 20_000


def free_port_pair(offset: int) -> tuple[int, int]:
    """Two free ports ``p`` and ``p + offset``, for a component that derives one port from
    another (weed's admin server dials its gRPC port at HTTP port + 10000).

    Both are taken from, and recorded in, the ports this process hands out: a pair chosen
    on its own once landed on a port already given to a broker that had not bound it yet,
    and that broker could not start. ``p + offset`` stays below the ephemeral range when
    there is room, for the reason :func:`free_port` gives."""
    low, _high = _ephemeral_range()
    first, last = max(1024, _PRIVATE_LOW - offset), low - offset  # p + offset in [20000, low)
    if last - first < 1000:
        first, last = 1024, 65_536 - offset
    for _ in range(1000):
        port = random.randrange(first, last)
        pair = (port, port + offset)
        if not all(_claimable(p) for p in pair):
            continue
        _HANDED_OUT.update(pair)
        return pair
    raise RuntimeError(f"no free pair of ports {offset} apart found")


def _ephemeral_range() -> tuple[int, int]:
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def _claimable(port: int) -> bool:
    """Not handed out by this process yet, and nothing listens on it now."""
    return port not in _HANDED_OUT and _bindable(port)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def sluice_command() -> list[str]:
    """The console script next to this interpreter (exactly what users run), or the entry
    point imported through this interpreter when the script is not installed."""
    script = Path(sys.executable).with_name("sluice")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from sluice.cli import main; sys.exit(main())"]


def process_start_time(pid: int) -> int | None:
    """The kernel's start time of ``pid`` (clock ticks since boot), or None if it is gone.
    Kept with a pid so a later ``down`` never signals an unrelated process that reused it."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # Field 22; the command name (field 2) may contain spaces, so split after its ')'.
    return int(stat.rsplit(")", 1)[1].split()[19])


def pid_alive(pid: int, start_time: int | None = None) -> bool:
    actual = process_start_time(pid)
    if actual is None:
        return False
    if start_time is not None and actual != start_time:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def stop_pid(
    pid: int,
    steps: Sequence[tuple[int, float]] = ((signal.SIGTERM, STOP_TIMEOUT_S), (signal.SIGKILL, 5.0)),
    start_time: int | None = None,
) -> bool:
    """Signal a process that is not our child and wait for it to go, escalating through
    ``steps``. Returns False if it was already gone (or the pid was reused)."""
    if not pid_alive(pid, start_time):
        return False
    for sig, wait in steps:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not pid_alive(pid, start_time):
                return True
            time.sleep(0.05)
    return True


def stop_child(proc: subprocess.Popen[bytes], timeout: float) -> None:
    """Stop a child of ours: SIGTERM, up to ``timeout`` seconds to exit, then SIGKILL."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(10)


class SluiceProcess:
    """One ``sluice …`` process listening on ``host:port``, output appended to ``log_path``.

    Survives restarts on the same port. Ready means the port accepts connections.
    """

    def __init__(self, args: Sequence[str], log_path: Path, port: int, host: str = "127.0.0.1"):
        self.args = list(args)
        self.log_path = log_path
        self.port = port
        self.host = host
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        # Exit codes of every stop, so callers can check shutdowns were clean.
        self.exit_codes: list[int] = []
        # Where the current test (or phase) began in the log, for focused failure reports.
        self.log_mark = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "not started"
        return self.proc.pid

    def command(self) -> list[str]:
        return [*sluice_command(), *self.args]

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self, wait: bool = True) -> None:
        if self.alive():
            raise RuntimeError("already running")
        self.starts += 1
        cmd = self.command()
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
            # Own session: a Ctrl-C at the caller's terminal must not hit it too; signals
            # are delivered explicitly, in order.
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        if wait:
            self.wait_ready()

    def wait_ready(self, timeout: float = START_TIMEOUT_S) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                self.exit_codes.append(rc)
                raise ProcessStartError(
                    f"{' '.join(self.args[:1])} exited with code {rc} before accepting "
                    f"connections on {self.bootstrap}.\ncommand: {' '.join(self.command())}\n"
                    f"--- output ---\n{self.log_tail()}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise ProcessStartError(
            f"{' '.join(self.args[:1])} did not accept connections on {self.bootstrap} within "
            f"{timeout:.0f}s.\n--- output ---\n{self.log_tail()}"
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int:
        """Signal and wait; escalates to SIGKILL so a hung shutdown cannot hang the caller
        (and then raises). Returns the exit code (negative: killed by that signal)."""
        if self.proc is None:
            return 0
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self._append_log(f"===== did not exit {timeout:.0f}s after signal {sig}; SIGKILL")
                self.proc.kill()
                self.proc.wait(10)
                self.exit_codes.append(-signal.SIGKILL)
                self.proc = None
                raise RuntimeError(f"did not exit within {timeout:.0f}s of signal {sig}") from None
        rc = self.proc.returncode
        self.exit_codes.append(rc)
        self._append_log(f"===== exited with code {rc}")
        self.proc = None
        return rc

    def kill(self) -> int:
        return self.stop(signal.SIGKILL)

    def restart(self) -> int:
        rc = self.stop()
        self.start()
        return rc

    def _append_log(self, line: str) -> None:
        with open(self.log_path, "a") as log:
            log.write(line + "\n")

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except FileNotFoundError:
            return 0

    def log_tail(self, chars: int = LOG_TAIL_CHARS, since: int = 0) -> str:
        try:
            data = self.log_path.read_bytes()[since:]
        except FileNotFoundError:
            return "(no output)"
        if not data:
            return "(no output since the mark)"
        text = data[-chars:].decode(errors="replace")
        return text if len(data) <= chars else "...(truncated)...\n" + text

    def rss_peak_kib(self) -> int | None:
        """VmHWM (peak resident set) of the running process."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        except (OSError, AssertionError):
            return None
        return None
