"""Transactions: what a transactional producer costs against an idempotent one, and what
read_committed fetching costs against read_uncommitted, in the same run.

    .venv/bin/python -m bench.transactions                    # dev and s3, ~4 min
    .venv/bin/python -m bench.transactions --targets dev --repeats 1 --seconds 4

For each target (``dev``: ``sluice dev``, local directory + SQLite; ``s3``: one broker of a
LocalCluster on SeaweedFS + PostgreSQL), per run:

1. an idempotent producer (confluent-kafka, 1 KiB records, linger 5 ms) flat out for
   --seconds: the reference throughput;
2. a transactional producer flat out, committing every 100 ms, then every 1 s: throughput
   (as a ratio of 1.) and commit latency p50/p99: commit_transaction after the records were
   flushed, i.e. the EndTxn round trip (one object of markers, one coordinator call);
3. one consumer from the start of the transactional topic (every 10th transaction aborted),
   read_uncommitted and read_committed alternately, twice each: broker CPU per MiB of log
   served, and the ratio.

Figures are medians of --repeats runs.
"""

from __future__ import annotations

import argparse
import tempfile
import time
import uuid
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

from .commit_latency import Broker, dev_broker, s3_broker
from .harness import say
from .produce_consume import RECORD_SIZE, create_topic
from .stats import ProcStats, med, percentile

PARTITIONS = 6
ABORT_EVERY = 10  # every 10th transaction is aborted (read_committed must filter it)


@dataclass
class Produced:
    mib_s: float
    records: int  # committed
    commits_ms: list[float]
    seconds: float
    aborted: int = 0  # records of aborted transactions


def _producer(bootstrap: str, **extra: object) -> object:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 64 * 1024,
            "queue.buffering.max.kbytes": 16 * 1024,
            **extra,
        }
    )


def _fill_for(producer: object, topic: str, seconds: float, payload: bytes) -> int:
    """Produce as fast as the client's queue takes for ``seconds``; returns records."""
    sent = 0
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        try:
            producer.produce(topic, payload, partition=sent % PARTITIONS)  # type: ignore[attr-defined]
            sent += 1
        except BufferError:
            producer.poll(0.001)  # type: ignore[attr-defined]
    return sent


def idempotent(bootstrap: str, topic: str, seconds: float) -> Produced:
    producer = _producer(bootstrap, **{"enable.idempotence": True})
    payload = bytes(RECORD_SIZE)
    started = time.perf_counter()
    sent = _fill_for(producer, topic, seconds, payload)
    producer.flush(120)  # type: ignore[attr-defined]
    took = time.perf_counter() - started
    return Produced(sent * RECORD_SIZE / 2**20 / took, sent, [], took)


def transactional(bootstrap: str, topic: str, seconds: float, commit_every: float) -> Produced:
    producer = _producer(bootstrap, **{"transactional.id": f"bench-{uuid.uuid4().hex[:8]}"})
    producer.init_transactions(60)  # type: ignore[attr-defined]
    payload = bytes(RECORD_SIZE)
    commits: list[float] = []
    sent = 0
    aborted = 0
    count = 0
    started = time.perf_counter()
    while time.perf_counter() - started < seconds:
        producer.begin_transaction()  # type: ignore[attr-defined]
        n = _fill_for(producer, topic, commit_every, payload)
        count += 1
        # commit_transaction flushes what the client still queues first; the latency
        # measured is the commit itself (EndTxn: one marker object, one coordinator call).
        producer.flush(120)  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        if count % ABORT_EVERY == 0:
            producer.abort_transaction(120)  # type: ignore[attr-defined]
            aborted += n
        else:
            producer.commit_transaction(120)  # type: ignore[attr-defined]
            sent += n
            commits.append((time.perf_counter() - t0) * 1000)
    took = time.perf_counter() - started
    return Produced(sent * RECORD_SIZE / 2**20 / took, sent, sorted(commits), took, aborted)


def fetch_cpu_ms_per_mib(
    broker: Broker, topic: str, isolation: str, expected: int, served: int
) -> float:
    """Broker CPU per MiB of log served (``served`` records: both isolation levels are sent
    the whole log, aborted records included) while a consumer reads ``expected`` records."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:8]}",
            "enable.auto.commit": False,
            "isolation.level": isolation,
            "fetch.max.bytes": 16 * 2**20,
        }
    )
    proc = ProcStats(broker.pid)
    cpu0 = proc.cpu_seconds()
    consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
    got = 0
    deadline = time.monotonic() + 300
    while got < expected and time.monotonic() < deadline:
        for m in consumer.consume(10_000, 0.5):
            if m.error() is None:
                got += 1
    cpu = proc.cpu_seconds() - cpu0
    consumer.close()
    if got < expected:
        raise RuntimeError(f"{isolation} consumer read {got} of {expected} records")
    return cpu * 1000 / max(served * RECORD_SIZE / 2**20, 1e-9)


def run_once(broker: Broker, seconds: float) -> dict[str, float]:
    out: dict[str, float] = {}
    plain = idempotent(broker.bootstrap, create_topic(broker.bootstrap, PARTITIONS), seconds)
    out["idempotent MiB/s"] = plain.mib_s
    topic = create_topic(broker.bootstrap, PARTITIONS)
    committed = 0
    aborted = 0
    for every in (0.1, 1.0):
        txn = transactional(broker.bootstrap, topic, seconds, every)
        label = f"{every * 1000:.0f} ms"
        out[f"txn {label} MiB/s"] = txn.mib_s
        out[f"txn {label} ratio"] = txn.mib_s / plain.mib_s
        out[f"txn {label} commit p50 ms"] = percentile(txn.commits_ms, 0.5)
        out[f"txn {label} commit p99 ms"] = percentile(txn.commits_ms, 0.99)
        committed += txn.records
        aborted += txn.aborted
    # read_uncommitted delivers the aborted records too; read_committed filters them out.
    total = committed + aborted
    # Alternated, twice each: the first read of the log also warms caches (page cache,
    # block cache) that the second would otherwise get for free.
    rounds: dict[str, list[float]] = {"read_uncommitted": [], "read_committed": []}
    for isolation in ("read_uncommitted", "read_committed") * 2:
        expected = total if isolation == "read_uncommitted" else committed
        rounds[isolation].append(fetch_cpu_ms_per_mib(broker, topic, isolation, expected, total))
    uncommitted = med(rounds["read_uncommitted"])
    read_committed = med(rounds["read_committed"])
    out["fetch read_uncommitted CPU ms/MiB"] = uncommitted
    out["fetch read_committed CPU ms/MiB"] = read_committed
    out["fetch read_committed / read_uncommitted"] = read_committed / uncommitted
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.transactions", description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="dev,s3")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=8, help="seconds per producer phase")
    args = ap.parse_args(argv)
    targets: dict[str, Callable[[Path, str, dict[str, str]], AbstractContextManager[Broker]]] = {
        "dev": dev_broker,
        "s3": s3_broker,
    }
    for target in args.targets.split(","):
        runs: list[dict[str, float]] = []
        with tempfile.TemporaryDirectory(prefix="sluice-bench-txn-") as tmp:
            for i in range(args.repeats):
                with targets[target](Path(tmp) / f"run{i}", "adaptive", {}) as broker:
                    runs.append(run_once(broker, args.seconds))
        _report(target, runs)
    return 0


def _report(target: str, runs: list[dict[str, float]]) -> None:
    say(
        f"\n== transactions: {target}, 1 KiB records, {PARTITIONS} partitions, medians of "
        f"{len(runs)}"
    )
    for key in runs[0]:
        values = [r[key] for r in runs]
        fmt = "{:.0%}" if key.endswith(("ratio", "read_uncommitted")) else "{:.2f}"
        say(
            f"  {key:<44}{fmt.format(med(values)):>10}   runs: "
            + " ".join(fmt.format(v) for v in values)
        )


if __name__ == "__main__":
    raise SystemExit(main())
