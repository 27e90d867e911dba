"""Run every session against Apache Kafka and against Sluice (a diskless and a classic
broker), once, and keep what each answered."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sluice.launch.kafka import KafkaBroker
from sluice.launch.process import SluiceProcess, free_port

from .catalog import KIND_FREE, SESSIONS
from .side import Side, common_versions
from .wire import Connection, api_versions

# Both brokers: no auto-creation (a probe of an unknown topic must not create it), and
# Sluice's short commit interval from the e2e suite (produce latency is bounded by it).
# Both: the timeout sweep every 500 ms (the transaction sessions let one time out), and a
# new group's first rebalance without the initial delay (Kafka's oracle has it at 0 in its
# server.properties, kafka.py).
SWEEPS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
KAFKA_OVERRIDES = {"auto.create.topics.enable": "false", **SWEEPS}
# num.partitions=1: Kafka's oracle names it in its server.properties (kafka.py), which
# DescribeConfigs then reports as a static broker config; Sluice's gets the same.
SLUICE_OPTIONS = {
    "auto.create.topics.enable": "false",
    "produce.commit.interval.ms": "20",
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    **SWEEPS,
}
KINDS = {"diskless": {}, "classic": {"log.diskless.enable": "false"}}

# recordings[session][target] = {label: recorded step}; targets: "kafka", and the kinds.
Recordings = dict[str, dict[str, dict[str, Any]]]


def sluice(workdir: Path, options: dict[str, str]) -> SluiceProcess:
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    port = free_port()
    args = ["dev", "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data)]
    for k, v in {**SLUICE_OPTIONS, **options}.items():
        args += ["-o", f"{k}={v}"]
    return SluiceProcess(args, workdir / "broker.log", port)


@contextlib.contextmanager
def brokers(workdir: Path) -> Iterator[dict[str, tuple[str, int]]]:
    """Kafka and one Sluice per kind, started together and always stopped."""
    kafka = KafkaBroker(workdir / "kafka", KAFKA_OVERRIDES)
    sluices = {kind: sluice(workdir / f"sluice-{kind}", opts) for kind, opts in KINDS.items()}
    try:
        for s in sluices.values():
            s.start(wait=False)
        kafka.start()
        for s in sluices.values():
            s.wait_ready()
        yield {
            "kafka": (kafka.host, kafka.port),
            **{kind: (s.host, s.port) for kind, s in sluices.items()},
        }
    finally:
        for s in sluices.values():
            with contextlib.suppress(Exception):
                s.stop()
        kafka.stop()


def record_all(workdir: Path, only: set[str] | None = None) -> tuple[Recordings, dict[str, int]]:
    with brokers(workdir) as addrs:
        tables = {}
        for target, (host, port) in addrs.items():
            conn = Connection(host, port)
            tables[target] = api_versions(conn)
            conn.close()
        versions = common_versions(*tables.values())
        out: Recordings = {}
        for name, run in SESSIONS.items():
            if only and name not in only:
                continue
            targets = ["kafka", "diskless"] if name in KIND_FREE else list(addrs)
            out[name] = {}
            for target in targets:
                side = Side(target, *addrs[target], versions)
                try:
                    run(side)
                except Exception as exc:  # recorded, so the comparison names the session
                    side.steps["(session error)"] = f"{type(exc).__name__}: {exc}"
                finally:
                    side.close()
                out[name][target] = side.steps
        return out, versions
