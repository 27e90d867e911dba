"""Start `sluice dev` as a real subprocess for the end-to-end tests.

The broker runs out of process on purpose: the tests must see exactly what a user sees (a TCP
port, a data dir, signals), and a crash in the broker must not take pytest down with it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

# kafka-python 3.0 loads its protocol schemas with deprecated importlib.resources calls, ~200
# warnings per run that would bury real ones. Import it once here, quietly: pytest's own
# filterwarnings ini is applied before this conftest loads, so adding a filter line is too late.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    import kafka.admin  # noqa: F401

# Short commit interval: produce latency is bounded by it, and the suite produces a lot of tiny
# batches; at the default (hundreds of ms) the suite would spend most of its time waiting.
DEFAULT_OPTIONS: dict[str, str] = {"produce.commit.interval.ms": "20"}
START_TIMEOUT_S = 20.0
STOP_TIMEOUT_S = 15.0
LOG_TAIL_CHARS = 20_000


def free_port() -> int:
    # Binding to port 0 lets the kernel pick; the tiny window before the broker binds it is an
    # accepted race for a test suite (nothing else on this machine grabs random high ports).
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def sluice_command() -> list[str]:
    # Prefer the console script pip put next to this interpreter (exactly what users run);
    # fall back to importing the entry point so a checkout without the script still works.
    script = Path(sys.executable).with_name("sluice")
    if script.exists():
        return [str(script)]
    return [sys.executable, "-c", "import sys; from sluice.cli import main; sys.exit(main())"]


class BrokerStartError(RuntimeError):
    pass


class SluiceBroker:
    """One `sluice dev` process; survives restarts on the same port and data dir."""

    def __init__(
        self, workdir: Path, options: Mapping[str, str] | None = None, port: int | None = None
    ) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.log_path = workdir / "broker.log"
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.options = {**DEFAULT_OPTIONS, **(options or {})}
        self.proc: subprocess.Popen[bytes] | None = None
        self.starts = 0
        # Exit codes of every stop, so tests can assert the shutdown was clean.
        self.exit_codes: list[int] = []
        # Byte offset in the log where the current test began: the shared broker's log holds
        # every test's output, and a failure report should show only the failing test's part.
        self.log_mark = 0

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def pid(self) -> int:
        assert self.proc is not None, "broker not started"
        return self.proc.pid

    def command(self) -> list[str]:
        cmd = [
            *sluice_command(),
            "dev",
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--data-dir",
            str(self.data_dir),
        ]
        for key, value in self.options.items():
            cmd += ["-o", f"{key}={value}"]
        return cmd

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def start(self) -> None:
        if self.alive():
            raise RuntimeError("broker already running")
        self.starts += 1
        cmd = self.command()
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(cmd)}\n".encode())
            log.flush()
            env = {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONFAULTHANDLER": "1"}
            # Own session so a Ctrl-C in the terminal running pytest does not also hit the
            # broker mid-test; we deliver signals to it explicitly.
            self.proc = subprocess.Popen(
                cmd,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=env,
                start_new_session=True,
            )
        self._wait_ready()

    def _wait_ready(self) -> None:
        assert self.proc is not None
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            rc = self.proc.poll()
            if rc is not None:
                self.exit_codes.append(rc)
                raise BrokerStartError(
                    f"sluice dev exited with code {rc} before accepting connections on "
                    f"{self.bootstrap}.\ncommand: {' '.join(self.command())}\n"
                    f"--- broker output ---\n{self.log_tail()}"
                )
            try:
                with socket.create_connection((self.host, self.port), timeout=0.5):
                    return
            except OSError:
                time.sleep(0.05)
        self.kill()
        raise BrokerStartError(
            f"sluice dev did not accept connections on {self.bootstrap} within "
            f"{START_TIMEOUT_S:.0f}s.\n--- broker output ---\n{self.log_tail()}"
        )

    def stop(self, sig: int = signal.SIGTERM, timeout: float = STOP_TIMEOUT_S) -> int:
        """Signal the broker and wait; escalates to SIGKILL so a hung shutdown cannot hang CI.

        Returns the exit code (negative = killed by that signal, as subprocess reports it).
        """
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
                raise RuntimeError(
                    f"sluice dev did not exit within {timeout:.0f}s of signal {sig}"
                ) from None
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
            return "(no broker output)"
        if not data:
            return "(no broker output during this test)"
        text = data[-chars:].decode(errors="replace")
        return text if len(data) <= chars else "...(truncated)...\n" + text

    def rss_peak_kib(self) -> int | None:
        """VmHWM of the running broker, to catch a frame length being trusted blindly."""
        try:
            for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    return int(line.split()[1])
        except (OSError, AssertionError):
            return None
        return None


@pytest.fixture(scope="session")
def _session_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SluiceBroker]:
    broker = SluiceBroker(tmp_path_factory.mktemp("sluice-session"))
    try:
        broker.start()
        yield broker
    finally:
        with contextlib.suppress(Exception):
            broker.stop()


@pytest.fixture
def broker(_session_broker: SluiceBroker) -> Iterator[SluiceBroker]:
    """The shared broker. Tests must use unique topic names and must not restart it.

    If the process died during a test, that test errors at teardown (so the crash is pinned on
    the test that caused it) and the broker is started again for the tests after it.
    """
    if not _session_broker.alive():
        _session_broker.start()
    _session_broker.log_mark = _session_broker.log_size()
    yield _session_broker
    if not _session_broker.alive():
        rc = _session_broker.proc.returncode if _session_broker.proc else None
        _session_broker.proc = None
        tail = _session_broker.log_tail(since=_session_broker.log_mark)
        _session_broker.start()
        pytest.fail(f"the shared broker died during this test (exit code {rc}):\n{tail}")


@pytest.fixture
def fresh_broker(tmp_path: Path) -> Iterator[SluiceBroker]:
    """A broker of the test's own, for tests that restart or kill it."""
    b = SluiceBroker(tmp_path / "sluice")
    try:
        b.start()
        yield b
    finally:
        with contextlib.suppress(Exception):
            b.stop()


class BrokerFactory:
    """Starts brokers with extra `-o` options (e.g. auto.create.topics.enable=false)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.brokers: list[SluiceBroker] = []

    def __call__(self, **options: str) -> SluiceBroker:
        b = SluiceBroker(self.root / f"sluice{len(self.brokers)}", options=options)
        self.brokers.append(b)
        b.start()
        return b

    def stop_all(self) -> None:
        for b in self.brokers:
            with contextlib.suppress(Exception):
                b.stop()


@pytest.fixture
def broker_factory(tmp_path: Path) -> Iterator[BrokerFactory]:
    # Option names contain dots, so callers pass them as **{"a.b": "v"}.
    factory = BrokerFactory(tmp_path)
    try:
        yield factory
    finally:
        factory.stop_all()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    # On failure, attach the broker's output: most e2e failures are broker bugs and the
    # client's error alone rarely says which handler broke.
    outcome = yield
    report = outcome.get_result()  # type: ignore[attr-defined]
    if not report.failed:
        return
    funcargs = getattr(item, "funcargs", {})
    seen: set[int] = set()
    for value in funcargs.values():
        if isinstance(value, SluiceBroker):
            brokers = [value]
        elif isinstance(value, BrokerFactory):
            brokers = value.brokers
        else:
            continue
        for b in brokers:
            if id(b) in seen:
                continue
            seen.add(id(b))
            report.sections.append(
                (f"sluice broker output ({b.log_path})", b.log_tail(since=b.log_mark))
            )


@pytest.fixture
def topic(request: pytest.FixtureRequest) -> str:
    """A topic name no other test (or earlier run against the same data dir) uses."""
    from ._kafka import unique_topic

    return unique_topic(request.node.name)
