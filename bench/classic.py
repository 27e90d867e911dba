"""Classic vs diskless topics on one 3-broker cluster (3 racks, 1 controller), and Apache
Kafka (3 KRaft nodes, 3 racks) beside them, one run.

Phases, each repeated ``--repeats`` times (medians printed), the phases of a repeat one after
the other (so the machine's noise falls on all of them alike), after one unmeasured warm-up
produce per phase (Kafka's JIT, Sluice's caches):

- classic RF=3 acks=1, classic RF=3 acks=all (min.insync.replicas=2), diskless acks=all, and
  Kafka RF=3 acks=all (min.insync.replicas=2; ``--no-kafka`` leaves it out): produce
  ``--mib`` MiB of 1 KiB records (confluent-kafka, linger.ms=5), every record's
  produce→delivery latency taken (p50/p99 flat out: mostly time queued in the client),
  broker CPU (all three processes) per MiB moved;
- the same again, paced at half that phase's throughput for ``--latency-seconds``: the
  latency a producer sees when the brokers are not saturated;
- consume each topic back from the beginning (MiB/s), ``--consume-passes`` times (broker
  CPU per MiB fetched over all of them).

The machine's own fsync'd local write (1 MiB writes, fsync each) is measured in the same
run; produce rates are also given as a ratio of it, so figures from different machines
can be compared, and every phase as a ratio of Kafka's in the same run (throughput per
broker CPU second, p99 at half load), with the brokers' peak RSS (Kafka: its JVM, heap
and off-heap). ``python -m bench.classic --quick`` or ``bench/run --targets classic``.
"""

from __future__ import annotations

import argparse
import os
import statistics
import struct
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.cluster import LocalCluster
from sluice.launch.kafka import KafkaCluster
from sluice.launch.seaweedfs import roomy_volume_mb

from .harness import serve_until
from .perf_test import consumer_perf, producer_perf
from .produce_consume import PARTITIONS, RECORD_SIZE, consume
from .stats import MiB, ProcStats, idle_cpu_rate, med, percentile, wait_quiet

_NEVER = threading.Event()  # serve_until's stop, never set here

# (name, system, acks): system is "classic" / "diskless" (Sluice's topics) or "kafka".
PHASES = (
    ("classic acks=1", "classic", "1"),
    ("classic acks=all", "classic", "all"),
    ("diskless acks=all", "diskless", "all"),
    ("kafka acks=all", "kafka", "all"),
)
KAFKA = "kafka acks=all"


def fsync_write_mib_s(directory: Path, mib: int = 64) -> float:
    """Sequential 1 MiB writes, each fsync'd: what a durable local log costs here."""
    path = directory / "fsync.bin"
    chunk = os.urandom(MiB)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        start = time.perf_counter()
        for _ in range(mib):
            os.write(fd, chunk)
            os.fsync(fd)
        return mib / (time.perf_counter() - start)
    finally:
        os.close(fd)
        path.unlink()


def create(bootstrap: str, system: str) -> str:
    name = f"bench-{system[0]}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if system == "diskless":
        topic = NewTopic(name, PARTITIONS)
    else:
        # acks=all waits for two copies of three, as an operator runs RF=3 (both systems).
        config = {"min.insync.replicas": "2"}
        if system == "classic":
            config["diskless.enable"] = "false"
        topic = NewTopic(name, PARTITIONS, 3, config=config)
    admin.create_topics([topic])[name].result(30)
    time.sleep(1.0)  # leaders and followers in place before the clock starts
    return name


def produce(
    bootstrap: str, topic: str, mib: float, acks: str, budget_s: float, rate_mib_s: float = 0.0
) -> dict:
    """``mib`` MiB flat out, or paced at ``rate_mib_s`` when given."""
    n = int(mib * MiB) // RECORD_SIZE
    interval = RECORD_SIZE / (rate_mib_s * MiB) if rate_mib_s > 0 else 0.0
    payload = os.urandom(RECORD_SIZE)
    sent = [0.0] * n
    latencies: list[float] = []
    errors: list[str] = []
    perf = time.perf_counter

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        if err is not None:
            errors.append(str(err))
        else:
            latencies.append(perf() - sent[struct.unpack(">I", msg.key())[0]])

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "linger.ms": 5,
            "batch.size": 262_144,
            "queue.buffering.max.kbytes": 65_536,
        }
    )
    start = perf()
    deadline = start + budget_s
    for i in range(n):
        if interval and i % 100 == 0:
            # Paced in steps of 100 records (~0.1 MiB): the client's own batching (linger)
            # still applies, as it would for an application producing at this rate. Polled
            # until the step's time, not once: poll() returns at the first delivery report
            # (bench.rebalance.serve_until), which let a fast-acknowledging system run far
            # above "half load".
            serve_until(producer.poll, start + i * interval, _NEVER)
        while True:
            try:
                sent[i] = perf()
                producer.produce(topic, payload, struct.pack(">I", i), on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.005)
        if i % 1000 == 0:
            producer.poll(0)
            if perf() > deadline:
                break
    producer.flush(120)
    seconds = perf() - start
    latencies.sort()
    return {
        "mib": len(latencies) * RECORD_SIZE / MiB,
        "mib_s": len(latencies) * RECORD_SIZE / MiB / seconds,
        "p50_ms": percentile(latencies, 0.5) * 1000,
        "p99_ms": percentile(latencies, 0.99) * 1000,
        "records": len(latencies),
        "errors": len(errors),
    }


class Client:
    """The load generator of every phase: confluent-kafka (``produce`` above, ``consume``
    of bench.produce_consume) or Kafka's perf-test tools (bench/perf_test.py)."""

    def __init__(self, kind: str, batch_size: int = 0) -> None:
        self.kind = kind
        self.props = {"linger.ms": "5"}
        if batch_size:
            self.props["batch.size"] = str(batch_size)

    def produce(
        self, bootstrap: str, topic: str, mib: float, acks: str, budget_s: float,
        rate_mib_s: float = 0.0,
    ) -> dict:  # fmt: skip
        if self.kind == "confluent":
            return produce(bootstrap, topic, mib, acks, budget_s, rate_mib_s)
        records = int(mib * MiB) // RECORD_SIZE
        rate = rate_mib_s * MiB / RECORD_SIZE if rate_mib_s > 0 else -1
        return producer_perf(
            bootstrap, topic, records, RECORD_SIZE, acks, rate, self.props, budget_s * 4
        )

    def consume(self, bootstrap: str, topic: str, records: int, budget_s: float) -> float:
        """MiB/s read back from the beginning."""
        if self.kind == "confluent":
            got, seconds = consume(bootstrap, topic, records, budget_s)
            return got * RECORD_SIZE / MiB / seconds if seconds else 0.0
        return consumer_perf(bootstrap, topic, records, budget_s * 4)["fetch_mib_s"]


def cpu_seconds(pids: list[int]) -> float:
    return sum(ProcStats(pid).tree_cpu_seconds() for pid in pids)


def peak_rss_mib(pids: list[int]) -> float:
    """The largest peak RSS of the processes (one broker's, not their sum)."""
    return max(ProcStats(pid).peak_rss_mib() for pid in pids)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.classic", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=128, help="MiB produced per phase")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", type=float, default=30.0, help="seconds per phase at most")
    ap.add_argument("--quick", action="store_true", help="32 MiB, 3 runs")
    ap.add_argument(
        "--latency-seconds", type=float, default=6.0, help="seconds of the half-load phase"
    )
    ap.add_argument("--no-kafka", action="store_true", help="without the Apache Kafka phase")
    ap.add_argument(
        "--consume-passes",
        type=int,
        default=1,
        help="read each topic back this many times (a longer fetch measurement without "
        "producing more: at 100-200 MiB/s one pass of 128 MiB is about a second)",
    )
    ap.add_argument(
        "--client",
        choices=("confluent", "perf-test"),
        default="confluent",
        help="confluent-kafka (librdkafka), or Kafka's kafka-producer-perf-test and "
        "kafka-consumer-perf-test (the Java client, its defaults; bench/perf_test.py)",
    )
    ap.add_argument(
        "--batch-size",
        type=int,
        default=0,
        help="perf-test: the producer's batch.size (default: the Java client's, 16384)",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.mib, args.latency_seconds = 32, 3.0
    phases = [p for p in PHASES if not (args.no_kafka and p[1] == "kafka")]
    root = Path(tempfile.mkdtemp(prefix="sluice-bench-classic-"))
    batch = f", batch.size {args.batch_size}" if args.batch_size else ""
    print(
        f"classic vs diskless: {args.mib:g} MiB x {args.repeats} runs, {PARTITIONS} partitions, "
        f"{args.consume_passes} consume pass(es), "
        f"client {args.client}{batch if args.client == 'perf-test' else ''}"
    )
    client = Client(args.client, args.batch_size)
    fsync = med([fsync_write_mib_s(root) for _ in range(args.repeats)])
    print(f"  fsync'd local write (1 MiB + fsync): {fsync:.0f} MiB/s")
    cluster = LocalCluster(
        root / "cluster",
        3,
        ("az-a", "az-b", "az-c"),
        {"produce.commit.interval.ms": "20"},
        controllers=1,
        seaweed_volume_mb=roomy_volume_mb(root),
    )
    kafka = None if args.no_kafka else KafkaCluster(root / "kafka")
    cluster.up()
    try:
        if kafka is not None:
            kafka.up()
        # Each system's bootstrap servers and broker processes, chosen once.
        sluice = (cluster.bootstrap, [b.pid for b in cluster.brokers])
        target = {"kafka": (kafka.bootstrap, kafka.pids)} if kafka is not None else {}
        # Warm-up, not measured: the JVM's JIT compiles Kafka's hot paths in its first
        # seconds of load (and Sluice's caches fill), so neither is timed cold.
        for _name, system, acks in phases:
            warm, _pids = target.get(system, sluice)
            client.produce(warm, create(warm, system), min(args.mib, 32), acks, args.budget)
        results: dict[str, list[dict]] = {name: [] for name, _, _ in phases}
        for _run in range(args.repeats):
            for name, system, acks in phases:
                bootstrap, pids = target.get(system, sluice)
                topic = create(bootstrap, system)
                # The brokers' background, subtracted: one consume pass lasts about a
                # second, in which three brokers' idle work counts as much as the reads.
                idle = idle_cpu_rate(lambda pids=pids: cpu_seconds(pids))
                cpu0, t0 = cpu_seconds(pids), time.perf_counter()
                r = client.produce(bootstrap, topic, args.mib, acks, args.budget)
                # Replication still running after an acks=1 answer is the produce's work.
                wait_quiet(lambda pids=pids: cpu_seconds(pids), idle)
                work = cpu_seconds(pids) - cpu0 - idle * (time.perf_counter() - t0)
                r["cpu_s_per_mib"] = max(work, 0.0) / max(r["mib"], 1e-9)
                cpu0, t0 = cpu_seconds(pids), time.perf_counter()
                rates = [
                    client.consume(bootstrap, topic, r["records"], args.budget)
                    for _ in range(args.consume_passes)
                ]
                work = cpu_seconds(pids) - cpu0 - idle * (time.perf_counter() - t0)
                r["consume_mib_s"] = statistics.median(rates)
                fetched = r["mib"] * args.consume_passes
                r["fetch_cpu_s_per_mib"] = max(work, 0.0) / max(fetched, 1e-9)
                half = r["mib_s"] / 2
                paced = client.produce(
                    bootstrap, topic, half * args.latency_seconds, acks, args.budget,
                    rate_mib_s=half,
                )  # fmt: skip
                r["half_p50_ms"], r["half_p99_ms"] = paced["p50_ms"], paced["p99_ms"]
                r["errors"] += paced["errors"]
                r["peak_rss_mib"] = peak_rss_mib(pids)
                results[name].append(r)
                print(
                    f"    run {_run + 1} {name}: broker CPU ms per MiB produced "
                    f"{r['cpu_s_per_mib'] * 1000:.2f}, "
                    f"fetched {r['fetch_cpu_s_per_mib'] * 1000:.2f}",
                    flush=True,
                )
        report(results, phases, fsync)
    finally:
        cluster.down()
        cluster.remove_data()
        if kafka is not None:
            kafka.down()
    return 0


def report(
    results: dict[str, list[dict]], phases: list[tuple[str, str, str]], fsync: float
) -> None:
    """Medians per phase; then each phase against Kafka's of the same run, when it ran:
    produce MiB per broker CPU second (CPU s/MiB inverted: per core, as issue 29 asks),
    p99 at half load, the largest broker's peak RSS."""

    def m(name: str, key: str) -> float:
        return med([r[key] for r in results[name]])

    print(
        f"  {'phase':<20}{'produce MiB/s':>14}{'x fsync':>9}{'p50 ms':>9}{'p99 ms':>9}"
        f"{'CPU s/MiB':>11}{'consume MiB/s':>15}{'fetch CPU s/MiB':>17}{'errors':>8}"
        f"{'p50/p99 ms at half load':>26}{'peak RSS MiB':>14}"
    )
    for name, _, _ in phases:
        print(
            f"  {name:<20}{m(name, 'mib_s'):>14.1f}{m(name, 'mib_s') / fsync:>9.2f}"
            f"{m(name, 'p50_ms'):>9.1f}{m(name, 'p99_ms'):>9.1f}{m(name, 'cpu_s_per_mib'):>11.4f}"
            f"{m(name, 'consume_mib_s'):>15.1f}{m(name, 'fetch_cpu_s_per_mib'):>17.4f}"
            f"{sum(r['errors'] for r in results[name]):>8}"
            f"{m(name, 'half_p50_ms'):>17.1f} / {m(name, 'half_p99_ms'):.1f}"
            f"{m(name, 'peak_rss_mib'):>14.0f}"
        )
    if KAFKA not in results:
        return
    print("  ratios to Kafka (same run; > 1 is better for MiB per CPU s, < 1 for the rest)")
    print(
        f"  {'phase':<20}{'produced MiB per CPU s':>23}{'fetched MiB per CPU s':>22}"
        f"{'MiB/s':>9}{'half-load p99':>15}{'peak RSS':>10}"
    )

    def per_core(name: str, key: str) -> float:
        return (1 / max(m(name, key), 1e-9)) / (1 / max(m(KAFKA, key), 1e-9))

    for name, system, _ in phases:
        if system == "kafka":
            continue
        print(
            f"  {name:<20}{per_core(name, 'cpu_s_per_mib'):>23.2f}"
            f"{per_core(name, 'fetch_cpu_s_per_mib'):>22.2f}"
            f"{m(name, 'mib_s') / m(KAFKA, 'mib_s'):>9.2f}"
            f"{m(name, 'half_p99_ms') / m(KAFKA, 'half_p99_ms'):>15.2f}"
            f"{m(name, 'peak_rss_mib') / m(KAFKA, 'peak_rss_mib'):>10.2f}"
        )


if __name__ == "__main__":
    sys.exit(main())
