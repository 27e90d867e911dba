"""Fetch sessions (KIP-227): what an incremental fetch saves a consumer of many partitions.

    .venv/bin/python -m bench.fetch_sessions            # 1,000 partitions, 5 runs, with Kafka
    .venv/bin/python -m bench.fetch_sessions --quick    # 1 run of 30 fetches, ~1 min
    .venv/bin/python -m bench.fetch_sessions --no-kafka --partitions 2000

One consumer (a raw Fetch v16 client, by topic id, ``max_wait`` 0 so every fetch is
answered at once) reads one topic of ``--partitions`` partitions at its end, on a classic
and a diskless topic of one ``sluice dev`` and, unless ``--no-kafka``, on a one-node Apache
Kafka 4.4 (KRaft, the JVM Kafka's start script gives it) started in the same run. Two fetch
patterns:

- **idle**: nothing is produced; every fetch finds nothing new (a consumer's steady state
  between bursts);
- **busy**: before each fetch one record is produced to each of ``--changed`` partitions
  (a different set each time, acks=1, from another connection); the fetch returns them and
  the consumer moves its positions on.

Each pattern is fetched in two modes: **full** (sessionless: ``session_epoch`` -1, every
partition named in every request and answered in every response) and **session** (the
first fetch opens a session, epoch 0, with every partition; each later one names only the
partitions whose position moved and is answered only about partitions with something new).
Per fetch: the broker's CPU (``/proc``, the broker process over ``--fetches`` fetches, less
its background CPU measured with no request for 2 s before each run; in the busy pattern the
same produces run alone first and their CPU is subtracted too), the request and
response bytes on the wire (frames as sent and received, size prefix included), and the
client's round trip (p50). Medians of ``--repeats`` runs; the phases of a run one after the
other, after one unmeasured warm-up of each (Kafka's JIT).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import struct
import sys
import time
import uuid
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.harness import add_broker_options, broker_options, record_batch, say
from bench.kafka_wire import WireClient
from bench.stats import ProcStats, idle_cpu_rate, med, percentile
from bench.workdir import workdir

FETCH_VERSION = 16  # the highest Sluice serves (topic ids, KIP-516; sessions since v7)
PRODUCE_VERSION = 9
NO_ID = uuid.UUID(int=0)
PATTERNS = ("idle", "busy")
MODES = ("full", "session")
SLUICE_OPTIONS = {
    "auto.create.topics.enable": "false",
    "produce.commit.interval.ms": "20",
}
# Both sides keep their default session cache (1,000 sessions, whatever their sizes).
KAFKA_OVERRIDES = {
    "auto.create.topics.enable": "false",
}


class CountingClient(WireClient):
    """A WireClient that counts the bytes of every frame it sends and receives."""

    def __init__(self, host: str, port: int) -> None:
        super().__init__(host, port, "sluice-bench-fetch-sessions")
        self.sent = self.received = 0
        sock = self._sock
        real_sendall, real_recv_into = sock.sendall, sock.recv_into

        class Counted:
            def sendall(_self, data: bytes) -> None:
                self.sent += len(data)
                real_sendall(data)

            def recv_into(_self, view: memoryview) -> int:
                n = real_recv_into(view)
                self.received += n
                return n

            def __getattr__(_self, name: str) -> Any:
                return getattr(sock, name)

        self._sock = Counted()  # type: ignore[assignment]

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._sock.close()


@dataclass
class Phase:
    """One (target, pattern, mode) of one run, per fetch."""

    cpu_us: float
    request_bytes: float
    response_bytes: float
    p50_ms: float
    partitions_answered: float


# ------------------------------------------------------------------------------- the client


def one_record(value: bytes = b"v" * 100) -> bytes:
    """One v2 batch of one 100-byte record."""
    return record_batch([(b"k", value)])


def produce(client: WireClient, topic: str, partitions: Sequence[int], record: bytes) -> None:
    resp = client.call(
        0,
        PRODUCE_VERSION,
        {
            "transactional_id": None,
            "acks": 1,
            "timeout": 10_000,
            "topic_data": [
                {
                    "name": topic,
                    "partition_data": [{"index": p, "records": record} for p in partitions],
                }
            ],
        },
    )
    errors = {int(p.error_code) for t in resp.responses for p in t.partition_responses}
    if errors != {0}:
        raise RuntimeError(f"produce to {topic} refused: {errors}")


def fetch_request(
    topic_id: uuid.UUID,
    positions: dict[int, int],
    names: Sequence[int],
    session_id: int,
    epoch: int,
) -> dict[str, Any]:
    """A consumer's Fetch naming ``names`` (every partition on a full fetch, the moved ones
    on an incremental one) at their ``positions``."""
    return {
        "replica_id": -1,
        "max_wait": 0,
        "min_bytes": 1,
        "max_bytes": 52_428_800,
        "isolation_level": 0,
        "session_id": session_id,
        "session_epoch": epoch,
        "topics": [
            {
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition": p,
                        "current_leader_epoch": -1,
                        "fetch_offset": positions[p],
                        "last_fetched_epoch": -1,
                        "log_start_offset": -1,
                        "partition_max_bytes": 1 << 20,
                    }
                    for p in names
                ],
            }
        ]
        if names
        else [],
        "forgotten_topics_data": [],
        "rack_id": "",
    }


def next_offset(records: bytes | None, current: int) -> int:
    """The position after the batches a fetch returned (base offset + last offset delta +
    1 of the last whole batch)."""
    if not records:
        return current
    data = bytes(records)
    pos, out = 0, current
    while pos + 61 <= len(data):
        (base,) = struct.unpack_from(">q", data, pos)
        (length,) = struct.unpack_from(">i", data, pos + 8)
        if pos + 12 + length > len(data):
            break
        (delta,) = struct.unpack_from(">i", data, pos + 23)
        out = base + delta + 1
        pos += 12 + length
    return out


class Consumer:
    """Positions of every partition and, in session mode, the session."""

    def __init__(self, client: CountingClient, topic_id: uuid.UUID, positions: dict[int, int]):
        self.client = client
        self.topic_id = topic_id
        self.positions = dict(positions)
        self.session_id = 0
        self.epoch = -1
        self.moved: set[int] = set()

    def fetch(self, mode: str) -> int:
        """One fetch; returns how many partitions the response carried."""
        if mode == "full":
            body = fetch_request(self.topic_id, self.positions, list(self.positions), 0, -1)
        elif self.session_id == 0:  # open the session: every partition
            body = fetch_request(self.topic_id, self.positions, list(self.positions), 0, 0)
        else:
            body = fetch_request(
                self.topic_id, self.positions, sorted(self.moved), self.session_id, self.epoch
            )
        resp = self.client.call(1, FETCH_VERSION, body)
        if int(resp.error_code) != 0:
            raise RuntimeError(f"fetch refused: {resp.error_code!r}")
        if mode == "session":
            if self.session_id == 0:
                if int(resp.session_id) == 0:
                    raise RuntimeError("the broker opened no fetch session")
                self.session_id, self.epoch = int(resp.session_id), 1
            else:
                self.epoch += 1
        self.moved = set()
        answered = 0
        for t in resp.responses:
            for p in t.partitions:
                answered += 1
                if int(p.error_code) != 0:
                    raise RuntimeError(f"partition {p.partition_index}: {p.error_code!r}")
                new = next_offset(p.records, self.positions[p.partition_index])
                if new != self.positions[p.partition_index]:
                    self.positions[p.partition_index] = new
                    self.moved.add(p.partition_index)
        return answered


# ------------------------------------------------------------------------------- targets


@dataclass
class Target:
    name: str
    host: str
    port: int
    pid: int
    topic: str = ""
    topic_id: uuid.UUID = NO_ID


def create_topic(target: Target, partitions: int, configs: dict[str, str]) -> None:
    target.topic = f"fetch-sessions-{target.name}-{uuid.uuid4().hex[:6]}"
    with WireClient(target.host, target.port) as c:
        resp = c.call(
            19,
            5,
            {
                "topics": [
                    {
                        "name": target.topic,
                        "num_partitions": partitions,
                        "replication_factor": 1,
                        "assignments": [],
                        "configs": [{"name": k, "value": v} for k, v in configs.items()],
                    }
                ],
                "timeout": 120_000,
                "validate_only": False,
            },
        )
        if int(resp.topics[0].error_code) != 0:
            raise RuntimeError(f"create {target.topic}: {resp.topics[0]!r}")
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            md = c.call(
                3,
                12,
                {
                    "topics": [{"name": target.topic}],
                    "allow_auto_topic_creation": False,
                    "include_topic_authorized_operations": False,
                },
            )
            (t,) = md.topics
            if len(t.partitions) == partitions and all(p.leader_id >= 0 for p in t.partitions):
                target.topic_id = t.topic_id
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"{target.topic}: no leaders after 180 s")
        # One record in every partition (positions 1), as a consumer that has read them.
        record = one_record()
        deadline = time.monotonic() + 60
        while True:
            try:
                produce(c, target.topic, range(partitions), record)
                break
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.5)


IDLE_SECONDS = 2.0


def phase(
    target: Target,
    partitions: int,
    pattern: str,
    mode: str,
    fetches: int,
    changed: int,
    idle_rate: float = 0.0,
) -> Phase:
    proc = ProcStats(target.pid)
    record = one_record()
    producer = WireClient(target.host, target.port)
    client = CountingClient(target.host, target.port)
    try:
        # Where the consumer stands: the end of every partition.
        consumer = Consumer(client, target.topic_id, dict.fromkeys(range(partitions), 0))
        for _ in range(3):
            consumer.fetch("full")
        sets = [
            [(i * changed + k) % partitions for k in range(changed)] for i in range(fetches + 3)
        ]
        produce_cpu = 0.0
        if pattern == "busy":
            # The produces alone, to subtract their cost from the fetches'.
            before, started = proc.cpu_seconds(), time.perf_counter()
            for i in range(fetches):
                produce(producer, target.topic, sets[i], record)
            produce_cpu = proc.cpu_seconds() - before
            produce_cpu -= idle_rate * (time.perf_counter() - started)
            for _ in range(3):  # the consumer catches up with them, unmeasured
                consumer.fetch("full")
        if mode == "session":
            consumer.fetch("session")  # opens the session (a full fetch), unmeasured
            consumer.fetch("session")
        rtts: list[float] = []
        answered = 0
        sent0, received0 = client.sent, client.received
        cpu0, started = proc.cpu_seconds(), time.perf_counter()
        for i in range(fetches):
            if pattern == "busy":
                produce(producer, target.topic, sets[i], record)
            start = time.perf_counter()
            answered += consumer.fetch(mode)
            rtts.append(time.perf_counter() - start)
        cpu = proc.cpu_seconds() - cpu0 - produce_cpu
        cpu -= idle_rate * (time.perf_counter() - started)
        rtts.sort()
        return Phase(
            cpu_us=max(cpu, 0.0) / fetches * 1e6,
            request_bytes=(client.sent - sent0) / fetches,
            response_bytes=(client.received - received0) / fetches,
            p50_ms=percentile(rtts, 50) * 1000,
            partitions_answered=answered / fetches,
        )
    finally:
        client.close()
        producer.close()


# ------------------------------------------------------------------------------- the run


@contextlib.contextmanager
def targets(
    root: Path, partitions: int, kafka: bool, options: dict[str, str]
) -> Iterator[list[Target]]:
    from sluice.launch.kafka import BENCH_JVM, KafkaBroker
    from sluice.launch.process import SluiceProcess, free_port

    port = free_port()
    args = ["dev", "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(root / "dev")]
    for k, v in {**SLUICE_OPTIONS, **options}.items():
        args += ["-o", f"{k}={v}"]
    dev = SluiceProcess(args, root / "sluice.log", port)
    broker = KafkaBroker(root / "kafka", KAFKA_OVERRIDES, jvm=BENCH_JVM) if kafka else None
    try:
        dev.start(wait=False)
        if broker is not None:
            broker.start()
        dev.wait_ready()
        out = [
            Target("classic", dev.host, dev.port, dev.pid),
            Target("diskless", dev.host, dev.port, dev.pid),
        ]
        create_topic(out[0], partitions, {"diskless.enable": "false"})
        create_topic(out[1], partitions, {})
        if broker is not None:
            out.append(Target("kafka", broker.host, broker.port, broker.pid))
            create_topic(out[2], partitions, {})
        yield out
    finally:
        with contextlib.suppress(Exception):
            dev.stop()
        if broker is not None:
            broker.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.fetch_sessions", description=__doc__)
    ap.add_argument("--partitions", type=int, default=1000)
    ap.add_argument("--fetches", type=int, default=100, help="measured fetches per phase")
    ap.add_argument("--changed", type=int, default=10, help="partitions produced per fetch")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="1 run of 30 fetches")
    ap.add_argument("--no-kafka", action="store_true", help="Sluice only")
    ap.add_argument("--keep", action="store_true", help="keep the scratch directory")
    ap.add_argument("--json", type=Path, help="also write the medians there")
    add_broker_options(ap, "the sluice dev broker")
    args = ap.parse_args(argv)
    if args.quick:
        args.repeats, args.fetches = 1, 30
    results: dict[tuple[str, str, str], list[Phase]] = {}
    with (
        workdir(args.keep) as root,
        targets(root, args.partitions, not args.no_kafka, broker_options(args.options)) as ts,
    ):
        say(
            f"fetch sessions: {args.partitions} partitions, {args.fetches} fetches per phase, "
            f"busy = {args.changed} partitions produced before each fetch, "
            f"{args.repeats} run(s)"
        )
        for t in ts:  # warm-up, unmeasured
            for pattern in PATTERNS:
                for mode in MODES:
                    phase(t, args.partitions, pattern, mode, 10, args.changed)
        for run in range(args.repeats):
            idle = {
                pid: idle_cpu_rate(ProcStats(pid).cpu_seconds, IDLE_SECONDS)
                for pid in {t.pid for t in ts}
            }
            say(
                "  background CPU (no requests), subtracted: "
                + ", ".join(f"{t.name} {idle[t.pid] * 1000:.0f} ms/s" for t in ts)
            )
            for t in ts:
                for pattern in PATTERNS:
                    for mode in MODES:
                        p = phase(
                            t,
                            args.partitions,
                            pattern,
                            mode,
                            args.fetches,
                            args.changed,
                            idle[t.pid],
                        )
                        results.setdefault((t.name, pattern, mode), []).append(p)
            say(f"  run {run + 1}/{args.repeats} done")
    lines, medians = report(results)
    for line in lines:
        say(line)
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                [
                    {"target": t, "pattern": p, "mode": m, **vars(v)}
                    for (t, p, m), v in medians.items()
                ],
                indent=1,
            )
        )
    return 0


def report(
    results: dict[tuple[str, str, str], list[Phase]],
) -> tuple[list[str], dict[tuple[str, str, str], Phase]]:
    """The table of medians, and the medians."""
    lines = [
        "",
        f"  {'target':<9} {'pattern':<7} {'mode':<8} {'CPU us/fetch':>13} "
        f"{'request B':>10} {'response B':>11} {'partitions':>10} {'p50 ms':>7}",
    ]
    medians: dict[tuple[str, str, str], Phase] = {}
    for key, runs in results.items():
        medians[key] = Phase(
            med([r.cpu_us for r in runs]),
            med([r.request_bytes for r in runs]),
            med([r.response_bytes for r in runs]),
            med([r.p50_ms for r in runs]),
            med([r.partitions_answered for r in runs]),
        )
        m = medians[key]
        lines.append(
            f"  {key[0]:<9} {key[1]:<7} {key[2]:<8} {m.cpu_us:>13.0f} {m.request_bytes:>10.0f} "
            f"{m.response_bytes:>11.0f} {m.partitions_answered:>10.1f} {m.p50_ms:>7.2f}"
        )
    lines += ["", "  session / full (below 1: the session saves):"]
    for name, pattern, mode in medians:
        if mode != "session" or (name, pattern, "full") not in medians:
            continue
        s, f = medians[(name, pattern, "session")], medians[(name, pattern, "full")]
        lines.append(
            f"  {name:<9} {pattern:<7} CPU {_ratio(s.cpu_us, f.cpu_us)}  "
            f"request bytes {_ratio(s.request_bytes, f.request_bytes)}  "
            f"response bytes {_ratio(s.response_bytes, f.response_bytes)}"
        )
    return lines, medians


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3f}" if b > 0 else "  n/a"


if __name__ == "__main__":
    sys.exit(main())
