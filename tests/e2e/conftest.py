"""Start `sluice dev` as a real subprocess for the end-to-end tests.

The broker runs out of process on purpose: the tests must see exactly what a user sees (a TCP
port, a data dir, signals), and a crash in the broker must not take pytest down with it.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from sluice.launch.process import SluiceProcess, free_port

# kafka-python 3.0 loads its protocol schemas with deprecated importlib.resources calls, ~200
# warnings per run that would bury real ones. Import it once here, quietly: pytest's own
# filterwarnings ini is applied before this conftest loads, so adding a filter line is too late.
with warnings.catch_warnings():
    warnings.simplefilter("ignore", DeprecationWarning)
    import kafka
    import kafka.admin  # noqa: F401

# Short commit interval: produce latency is bounded by it, and the suite produces a lot of tiny
# batches; at the default (hundreds of ms) the suite would spend most of its time waiting.
# Timed-out transactions are swept every half second (Kafka: 10 s) so the timeout tests wait
# for the timeout they set, not for the sweep. A new consumer group is assigned at once, not
# after Kafka's 3 s initial rebalance delay (as tests/fixtures/cluster.py's FAST_LIVENESS).
DEFAULT_OPTIONS: dict[str, str] = {
    "produce.commit.interval.ms": "20",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "500",
    "group.initial.rebalance.delay.ms": "0",
}


class SluiceBroker(SluiceProcess):
    """One `sluice dev` process; survives restarts on the same port and data dir."""

    def __init__(
        self, workdir: Path, options: Mapping[str, str] | None = None, port: int | None = None
    ) -> None:
        self.workdir = workdir
        self.data_dir = workdir / "data"
        self.data_dir.mkdir(parents=True, exist_ok=True)
        self.options = {**DEFAULT_OPTIONS, **(options or {})}
        port = port or free_port()
        args = ["dev", "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(self.data_dir)]
        for key, value in self.options.items():
            args += ["-o", f"{key}={value}"]
        super().__init__(args, workdir / "broker.log", port)


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
    # Whatever a test sent, the broker must not have failed inside: a handler exception is
    # answered with a generic error or a closed connection that clients retry through, so
    # only the log shows it.
    logged = _session_broker.log_path.read_bytes()[_session_broker.log_mark :]
    if b"Traceback" in logged:
        at = logged.index(b"Traceback")
        excerpt = logged[max(0, at - 500) : at + 4000].decode(errors="replace")
        pytest.fail(f"the shared broker logged a traceback during this test:\n{excerpt}")
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
