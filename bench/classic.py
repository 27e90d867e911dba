"""Classic vs diskless topics on one 3-broker cluster (3 racks, 1 controller), one run.

Phases, each repeated ``--repeats`` times (medians printed):

- classic RF=3 acks=1, classic RF=3 acks=all, diskless acks=all: produce ``--mib`` MiB of
  1 KiB records (confluent-kafka, linger.ms=5), every record's produce→delivery latency
  taken (p50/p99 flat out: mostly time queued in the client), broker CPU (all three
  processes) per MiB moved;
- the same again, paced at half that phase's throughput for ``--latency-seconds``: the
  latency a producer sees when the brokers are not saturated;
- consume each topic back from the beginning (MiB/s).

The machine's own fsync'd local write (1 MiB writes, fsync each) is measured in the same
run; produce rates are also given as a ratio of it, so figures from different machines
can be compared. ``python -m bench.classic --quick`` or ``bench/run --targets classic``.
"""

from __future__ import annotations

import argparse
import os
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.cluster import LocalCluster

from .produce_consume import PARTITIONS, RECORD_SIZE, consume
from .stats import MiB, ProcStats, med, percentile

PHASES = (
    ("classic acks=1", False, "1"),
    ("classic acks=all", False, "all"),
    ("diskless acks=all", True, "all"),
)


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


def create(bootstrap: str, diskless: bool) -> str:
    name = f"bench-{'d' if diskless else 'c'}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if diskless:
        topic = NewTopic(name, PARTITIONS)
    else:
        topic = NewTopic(name, PARTITIONS, 3, config={"diskless.enable": "false"})
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
            # still applies, as it would for an application producing at this rate.
            wait = start + i * interval - perf()
            if wait > 0:
                producer.poll(wait)
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


def broker_cpu(cluster: LocalCluster) -> float:
    return sum(ProcStats(b.pid).tree_cpu_seconds() for b in cluster.brokers)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.classic", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=128, help="MiB produced per phase")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--budget", type=float, default=30.0, help="seconds per phase at most")
    ap.add_argument("--quick", action="store_true", help="32 MiB, 3 runs")
    ap.add_argument(
        "--latency-seconds", type=float, default=6.0, help="seconds of the half-load phase"
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.mib, args.latency_seconds = 32, 3.0
    root = Path(tempfile.mkdtemp(prefix="sluice-bench-classic-"))
    print(f"classic vs diskless: {args.mib:g} MiB x {args.repeats} runs, {PARTITIONS} partitions")
    fsync = med([fsync_write_mib_s(root) for _ in range(args.repeats)])
    print(f"  fsync'd local write (1 MiB + fsync): {fsync:.0f} MiB/s")
    cluster = LocalCluster(
        root / "cluster",
        3,
        ("az-a", "az-b", "az-c"),
        {"produce.commit.interval.ms": "20"},
        controllers=1,
    )
    cluster.up()
    try:
        results: dict[str, list[dict]] = {name: [] for name, _, _ in PHASES}
        for _run in range(args.repeats):
            for name, diskless, acks in PHASES:
                topic = create(cluster.bootstrap, diskless)
                cpu0 = broker_cpu(cluster)
                r = produce(cluster.bootstrap, topic, args.mib, acks, args.budget)
                r["cpu_s_per_mib"] = (broker_cpu(cluster) - cpu0) / max(r["mib"], 1e-9)
                got, seconds = consume(cluster.bootstrap, topic, r["records"], args.budget)
                r["consume_mib_s"] = got * RECORD_SIZE / MiB / seconds if seconds else 0.0
                half = r["mib_s"] / 2
                paced = produce(
                    cluster.bootstrap,
                    topic,
                    half * args.latency_seconds,
                    acks,
                    args.budget,
                    rate_mib_s=half,
                )
                r["half_p50_ms"], r["half_p99_ms"] = paced["p50_ms"], paced["p99_ms"]
                r["errors"] += paced["errors"]
                results[name].append(r)
        print(
            f"  {'phase':<20}{'produce MiB/s':>14}{'x fsync':>9}{'p50 ms':>9}{'p99 ms':>9}"
            f"{'CPU s/MiB':>11}{'consume MiB/s':>15}{'errors':>8}"
            f"{'p50/p99 ms at half load':>26}"
        )
        for name, _, _ in PHASES:
            rs = results[name]

            def m(key: str, rs: list[dict] = rs) -> float:
                return med([r[key] for r in rs])

            print(
                f"  {name:<20}{m('mib_s'):>14.1f}{m('mib_s') / fsync:>9.2f}{m('p50_ms'):>9.1f}"
                f"{m('p99_ms'):>9.1f}{m('cpu_s_per_mib'):>11.3f}{m('consume_mib_s'):>15.1f}"
                f"{sum(r['errors'] for r in rs):>8}"
                f"{m('half_p50_ms'):>17.1f} / {m('half_p99_ms'):.1f}"
            )
    finally:
        cluster.down()
        cluster.remove_data()
    return 0


if __name__ == "__main__":
    sys.exit(main())
