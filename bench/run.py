"""Throughput, latency and cost of the broker with a stock client, against this machine's limits.

    .venv/bin/python -m bench.run            # every target, 256 MiB per run, 3 runs
    .venv/bin/python -m bench.run --quick    # ~1 min smoke run
    bench/run --targets s3 --batch-sizes 16384 -o fetch.cache.max.bytes=67108864

Targets, each measured in the same run as the machine limits it is compared with:

``dev``  ``sluice dev`` (local directory + SQLite): produce and consume 1 KiB records with
         confluent-kafka into a 6-partition topic, against loopback TCP and fsync'd writes.
``s3``   one ``sluice broker`` of a :class:`sluice.cluster.LocalCluster` on SeaweedFS
         (``weed mini``) and PostgreSQL. Per run: produce flat out (throughput, CPU, RSS),
         raw PUTs to the same store of the size the broker's objects had with as many in
         flight as the broker had, single Fetches of the tail just produced (cache hits),
         consume it all back (CPU per MiB fetched), then produce at half that rate for
         latency. Upload, commit_file and find_batches times come from the broker's own
         histograms (/metrics), per phase. The issue's targets are judged on the medians.
``commit`` produce latency across loads for both group-commit modes (bench.commit_latency).
``scale`` 1 vs 2 broker processes on this host behind the same storage (bench.scale_out).
``tls``  produce/consume MiB/s and broker CPU per MiB over an SSL listener vs PLAINTEXT on
         the same broker, with TLS/plaintext ratios (bench.tls; not in the default set).
``rebalance`` rebalance time of 1 -> 10 -> 1 group members on 100 partitions, classic
         (eager, cooperative-sticky) vs KIP-848, Sluice and Kafka (bench.rebalance; not in
         the default set).
``share`` share-group vs consumer-group delivery throughput, 1 and 3 consumers, Sluice
         and Kafka (bench.share_groups; not in the default set).

Every figure is the median of --repeats runs; machines are shared and noisy.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from broker.config import BrokerConfig, load_config

from .harness import add_broker_options, as_arguments, broker_options, one_broker, say
from .limits import S3Target, fsync_write_mib_s, loopback_tcp_mib_s, raw_put, raw_put_at
from .produce_consume import (
    PARTITIONS,
    RECORD_SIZE,
    consume,
    create_topic,
    high_watermarks,
    produce,
    tail_fetch_latencies,
)
from .stats import MiB, ProcStats, RssSampler, Target, med, percentile, pin_process, runs
from .storage_ops import MetricsWatch, StorageOps, mean_in_flight
from .workdir import workdir

# The Java producer's buffer.memory default: the dev target's client, as before.
DEV_QUEUE_KIB = 32 * 1024
# Flat out against S3 the client must not be what limits the broker: with ~0.5 s from
# produce to answer, 32 MiB in flight would cap one producer near 64 MiB/s.
S3_QUEUE_KIB = 128 * 1024
LATENCY_LOAD = 0.5  # latency is measured at this fraction of the run's throughput
# Slack the issue allows on produce p99 over commit interval + PUT p99 + commit p99.
P99_SLACK_MS = 20.0


def timed(label: str, fn: Callable[[], float], repeats: int, unit: str = "MiB/s") -> float:
    vals = [fn() for _ in range(repeats)]
    say(f"  {label:<38} {med(vals):>9.1f} {unit}  ({runs(vals)})")
    return med(vals)


# ---------------------------------------------------------------- dev target


@dataclass
class DevRun:
    mib: float
    produce_s: float
    consume_s: float
    p50_ms: float
    p99_ms: float
    cpu_in_s: float
    cpu_out_s: float
    truncated: bool


def run_dev(args: argparse.Namespace, wd: Path, loop_mib_s: float) -> None:
    from sluice.launch.process import SluiceProcess, free_port

    say("\n== dev: sluice dev (local directory + SQLite)")
    fsync_mib_s = timed("fsync'd 8 MiB object writes", lambda: fsync_write_mib_s(wd), args.repeats)
    port = free_port()
    cmd = ["dev", "--port", str(port), "--data-dir", str(wd / "dev-data")]
    cmd += as_arguments(args.options)
    broker = SluiceProcess(cmd, wd / "dev-broker.log", port)
    broker.start()
    try:
        proc = ProcStats(broker.pid)
        for bs in args.batch_sizes:
            results: list[DevRun] = []
            for _ in range(args.repeats):
                topic = create_topic(broker.bootstrap)
                c0 = proc.cpu_seconds()
                pr = produce(broker.bootstrap, topic, args.mib, bs, args.budget, DEV_QUEUE_KIB)
                c1 = proc.cpu_seconds()
                got, consume_s = consume(broker.bootstrap, topic, pr.delivered, args.budget)
                c2 = proc.cpu_seconds()
                rate = LATENCY_LOAD * pr.mib_s
                lr = produce(
                    broker.bootstrap,
                    topic,
                    rate * args.latency_seconds,
                    bs,
                    args.budget,
                    DEV_QUEUE_KIB,
                    rate_mib_s=rate,
                )
                for e in (pr.errors + lr.errors)[:3]:
                    say(f"  ! {e}")
                if got < pr.delivered:
                    say(f"  ! consumed {got}/{pr.delivered} records")
                results.append(
                    DevRun(
                        pr.mib,
                        pr.seconds,
                        consume_s,
                        lr.latency_ms(0.5),
                        lr.latency_ms(0.99),
                        c1 - c0,
                        c2 - c1,
                        pr.truncated,
                    )
                )
            rin = [r.mib / r.produce_s for r in results]
            rout = [r.mib / r.consume_s for r in results]
            cut = "  (runs cut short by --budget)" if any(r.truncated for r in results) else ""
            say(f"batch.size={bs // 1024} KiB{cut}")
            say(
                f"  produced per run                       "
                f"{med([r.mib for r in results]):>9.1f} MiB"
            )
            say(
                f"  produce throughput                     {med(rin):>9.1f} MiB/s  "
                f"= {med(rin) / loop_mib_s:.1%} of loopback, {med(rin) / fsync_mib_s:.1%} of "
                f"fsync  ({runs(rin)})"
            )
            say(
                f"  consume throughput                     {med(rout):>9.1f} MiB/s  "
                f"= {med(rout) / loop_mib_s:.1%} of loopback  ({runs(rout)})"
            )
            say(
                f"  produce latency p50 / p99 at {LATENCY_LOAD:.0%} load   "
                f"{med([r.p50_ms for r in results]):>9.1f}"
                f" / {med([r.p99_ms for r in results]):.1f} ms"
            )
            say(
                f"  broker CPU per MiB produced / fetched  "
                f"{med([r.cpu_in_s / r.mib * 1000 for r in results]):>9.2f} / "
                f"{med([r.cpu_out_s / r.mib * 1000 for r in results]):.2f} ms"
            )
        say(f"  broker peak RSS                        {proc.peak_rss_mib():>9.1f} MiB")
    finally:
        broker.stop()


# ---------------------------------------------------------------- s3 target


@dataclass
class S3Run:
    produced_mib: float
    produce_s: float
    produce_mib_s: float
    produce_ops: StorageOps
    in_flight: float
    raw_mib_s: float
    raw_concurrency: float
    cpu_in_ms: float  # per MiB produced
    # ms of CPU per MiB produced flat out, by process: where a 2-core machine's time went
    cpu_split: dict[str, float]
    raw_store_cpu_ms: float  # the store's CPU per MiB of raw PUTs
    tail_p50_ms: float
    tail_p99_ms: float
    tail_ops: StorageOps
    consumed_mib: float
    consume_mib_s: float
    cpu_out_ms: float  # per MiB fetched
    consume_ops: StorageOps
    rss_max_mib: float
    latency_rate: float
    latency_p50_ms: float
    latency_p99_ms: float
    latency_ops: StorageOps
    latency_put_p99_ms: float
    truncated: bool
    errors: list[str] = field(default_factory=list)


def run_s3(args: argparse.Namespace, wd: Path, loop_mib_s: float) -> list[Target]:
    config = load_config(args.options)
    say("\n== s3: sluice broker on SeaweedFS (weed mini) + PostgreSQL (LocalCluster, 1 broker)")
    with one_broker(wd / "cluster", args.options) as cluster:
        broker = cluster.brokers[0]
        proc = ProcStats(broker.pid)
        watch = MetricsWatch(broker.metrics)
        s3c = cluster.s3
        s3 = S3Target(s3c.endpoint_url, s3c.access_key, s3c.secret_key, s3c.bucket, s3c.region)
        say(f"  broker pid {broker.pid}, RSS at start {proc.rss_mib():.1f} MiB")
        # The other processes of the write path, for the CPU split.
        assert cluster.seaweed is not None and cluster.seaweed.pid is not None
        assert cluster.postgres is not None
        postmaster = int((cluster.postgres.data_dir / "postmaster.pid").read_text().split()[0])
        peers = {"store": ProcStats(cluster.seaweed.pid), "coordinator": ProcStats(postmaster)}
        if args.pin_store:
            # The store on a core of its own, everything else on the others: the raw PUTs
            # and the broker's uploads then meet the same store capacity, as they would
            # with the store on its own machines (on one 2-core host, unpinned, the
            # store's CPU per MiB is shared with the broker, client and database).
            cpus = sorted(os.sched_getaffinity(0))
            if len(cpus) < 2:
                raise SystemExit("--pin-store needs at least 2 cores")
            store_cpus, rest = {cpus[0]}, set(cpus[1:])
            pin_process(cluster.seaweed.pid, store_cpus)
            pin_process(broker.pid, rest)
            pin_process(postmaster, rest)
            # This process's own threads (the client's and the raw PUTs'), not its children:
            # the cluster's processes are those.
            pin_process(os.getpid(), rest, children=False)
            say(f"  store pinned to CPU {cpus[0]}; broker, database, client: {sorted(rest)}")
        # Warm-up, not measured: a fresh weed mini grows its volumes on the first writes
        # (seconds), and the broker's S3 and PostgreSQL pools open their connections.
        warm = create_topic(broker.bootstrap)
        produce(broker.bootstrap, warm, 32, 1024 * 1024, args.budget, S3_QUEUE_KIB)
        raw_put(s3, 8 * MiB, 2, 0.5, min_puts=4)
        targets: list[Target] = []
        for bs in args.batch_sizes:
            results = [
                _s3_run(
                    args,
                    config,
                    broker.bootstrap,
                    broker.host,
                    broker.port,
                    proc,
                    peers,
                    watch,
                    s3,
                    bs,
                )
                for _ in range(args.repeats)
            ]
            targets += _s3_report(args, config, bs, results, loop_mib_s, proc)
        return targets


def _s3_run(
    args: argparse.Namespace,
    config: BrokerConfig,
    bootstrap: str,
    host: str,
    port: int,
    proc: ProcStats,
    peers: dict[str, ProcStats],
    watch: MetricsWatch,
    s3: S3Target,
    batch_size: int,
) -> S3Run:
    topic = create_topic(bootstrap)
    errors: list[str] = []
    # 1. Flat out: throughput, CPU per MiB produced, RSS.
    c0 = proc.cpu_seconds()
    others0 = {name: p.tree_cpu_seconds() for name, p in peers.items()}
    client0 = _own_cpu_seconds()
    with watch.phase() as ph, RssSampler(proc) as rss_in:
        pr = produce(bootstrap, topic, args.mib, batch_size, args.budget, S3_QUEUE_KIB)
    cpu_in = proc.cpu_seconds() - c0
    mib_in = max(pr.mib, 1e-9)
    cpu_split = {"broker": cpu_in / mib_in * 1000}
    for name, p in peers.items():
        cpu_split[name] = (p.tree_cpu_seconds() - others0[name]) / mib_in * 1000
    cpu_split["client"] = (_own_cpu_seconds() - client0) / mib_in * 1000
    errors += pr.errors
    assert ph.ops is not None
    in_flight = mean_in_flight(ph.ops, pr.seconds)
    store0 = peers["store"].tree_cpu_seconds()
    object_bytes = ph.ops.object_bytes
    size = int(object_bytes) if math.isfinite(object_bytes) else 8 * MiB  # no flush seen
    raw_mib_s, raw_conc, raw_mib = raw_put_at(s3, size, in_flight, args.put_seconds)
    raw_store_cpu = (peers["store"].tree_cpu_seconds() - store0) / max(raw_mib, 1e-9) * 1000
    # 2. Single fetches of the tail just written: must be cache hits.
    tail_mib = min(args.tail_mib, config.fetch_cache_max_bytes / MiB / 2, pr.mib)
    watermarks = high_watermarks(bootstrap, topic)
    with watch.phase() as tph:
        tail = tail_fetch_latencies(host, port, topic, watermarks, tail_mib, args.tail_fetches)
    # 3. Everything back from the beginning: CPU per MiB fetched (cache and store reads).
    c0 = proc.cpu_seconds()
    with watch.phase() as cph, RssSampler(proc) as rss_out:
        got, consume_s = consume(bootstrap, topic, pr.delivered, args.budget)
    cpu_out = proc.cpu_seconds() - c0
    if got < pr.delivered:
        errors.append(f"consumed {got}/{pr.delivered} records")
    # 4. Latency at a load the broker sustains: flat out, latency is the client's queue.
    rate = LATENCY_LOAD * pr.mib_s
    with watch.phase() as lph:
        lr = produce(
            bootstrap,
            topic,
            rate * args.latency_seconds,
            batch_size,
            args.budget,
            S3_QUEUE_KIB,
            rate_mib_s=rate,
        )
    errors += lr.errors
    assert tph.ops is not None and cph.ops is not None and lph.ops is not None
    lat_bytes = lph.ops.object_bytes
    lat_size = int(lat_bytes) if math.isfinite(lat_bytes) and lat_bytes >= 1 else MiB
    put_p99 = raw_put(s3, lat_size, 1, args.put_seconds).p99_ms
    for e in errors[:3]:
        say(f"  ! {e}")
    consumed_mib = got * RECORD_SIZE / MiB
    return S3Run(
        produced_mib=pr.mib,
        produce_s=pr.seconds,
        produce_mib_s=pr.mib_s,
        produce_ops=ph.ops,
        in_flight=in_flight,
        raw_mib_s=raw_mib_s,
        raw_concurrency=raw_conc,
        cpu_in_ms=cpu_in / pr.mib * 1000 if pr.mib else math.nan,
        cpu_split=cpu_split,
        raw_store_cpu_ms=raw_store_cpu,
        tail_p50_ms=percentile(tail, 0.5) * 1000,
        tail_p99_ms=percentile(tail, 0.99) * 1000,
        tail_ops=tph.ops,
        consumed_mib=consumed_mib,
        consume_mib_s=consumed_mib / consume_s if consume_s else math.nan,
        cpu_out_ms=cpu_out / consumed_mib * 1000 if consumed_mib else math.nan,
        consume_ops=cph.ops,
        rss_max_mib=max(rss_in.max_mib, rss_out.max_mib),
        latency_rate=rate,
        latency_p50_ms=lr.latency_ms(0.5),
        latency_p99_ms=lr.latency_ms(0.99),
        latency_ops=lph.ops,
        latency_put_p99_ms=put_p99,
        truncated=pr.truncated,
        errors=errors,
    )


def _s3_report(
    args: argparse.Namespace,
    config: BrokerConfig,
    batch_size: int,
    rs: list[S3Run],
    loop_mib_s: float,
    proc: ProcStats,
) -> list[Target]:
    def m(get: Callable[[S3Run], float]) -> float:
        return med([get(r) for r in rs])

    def row(label: str, value: str, detail: str = "") -> None:
        say(f"  {label:<38} {value}" + (f"  {detail}" if detail else ""))

    cut = "  (runs cut short by --budget)" if any(r.truncated for r in rs) else ""
    say(f"batch.size={batch_size // 1024} KiB, medians of {len(rs)} runs{cut}")
    ratio = [r.produce_mib_s / r.raw_mib_s for r in rs]
    row("produced per run", f"{m(lambda r: r.produced_mib):>9.1f} MiB")
    row(
        "produce throughput",
        f"{m(lambda r: r.produce_mib_s):>9.1f} MiB/s",
        f"= {med(ratio):.1%} of raw PUT, {m(lambda r: r.produce_mib_s) / loop_mib_s:.1%} of "
        f"loopback  ({runs([r.produce_mib_s for r in rs])})",
    )
    row(
        "raw PUT, same store, same objects",
        f"{m(lambda r: r.raw_mib_s):>9.1f} MiB/s",
        f"{m(lambda r: r.produce_ops.object_bytes) / MiB:.1f} MiB objects, "
        f"{m(lambda r: r.raw_concurrency):.2f} in flight  ({runs([r.raw_mib_s for r in rs])})",
    )
    row(
        "broker upload p50 / p99 (flat out)",
        f"{m(lambda r: r.produce_ops.upload_p50_ms):>9.1f} / "
        f"{m(lambda r: r.produce_ops.upload_p99_ms):.1f} ms",
    )
    row(
        "commit_file p50 / p99 (flat out)",
        f"{m(lambda r: r.produce_ops.commit_p50_ms):>9.1f} / "
        f"{m(lambda r: r.produce_ops.commit_p99_ms):.1f} ms",
        f"{m(lambda r: r.produce_ops.commits):.0f} commits per run",
    )
    row(
        f"produce latency p50 / p99 at {LATENCY_LOAD:.0%} load",
        f"{m(lambda r: r.latency_p50_ms):>9.1f} / {m(lambda r: r.latency_p99_ms):.1f} ms",
        f"at {m(lambda r: r.latency_rate):.1f} MiB/s  ({runs([r.latency_p99_ms for r in rs])})",
    )
    row(
        "  upload p99 / raw PUT p99 / commit p99",
        f"{m(lambda r: r.latency_ops.upload_p99_ms):>9.1f} / "
        f"{m(lambda r: r.latency_put_p99_ms):.1f} / "
        f"{m(lambda r: r.latency_ops.commit_p99_ms):.1f} ms",
        f"{m(lambda r: r.latency_ops.object_bytes) / MiB:.1f} MiB objects",
    )
    row(
        "tail fetch p50 / p99 (cache hits)",
        f"{m(lambda r: r.tail_p50_ms):>9.1f} / {m(lambda r: r.tail_p99_ms):.1f} ms",
        f"{args.tail_fetches} single-partition fetches of <= 1 MiB  "
        f"({runs([r.tail_p99_ms for r in rs], '{:.1f}')})",
    )
    row(
        "find_batches p50 / p99 (tail, consume)",
        f"{m(lambda r: r.tail_ops.find_p50_ms):>9.1f} / {m(lambda r: r.tail_ops.find_p99_ms):.1f}"
        f" ms, {m(lambda r: r.consume_ops.find_p50_ms):.1f} / "
        f"{m(lambda r: r.consume_ops.find_p99_ms):.1f} ms",
    )
    row(
        "consume throughput",
        f"{m(lambda r: r.consume_mib_s):>9.1f} MiB/s",
        f"= {m(lambda r: r.consume_mib_s) / loop_mib_s:.1%} of loopback",
    )
    row(
        "broker CPU per MiB produced / fetched",
        f"{m(lambda r: r.cpu_in_ms):>9.2f} / {m(lambda r: r.cpu_out_ms):.2f} ms",
        f"({runs([r.cpu_in_ms for r in rs], '{:.2f}')} / "
        f"{runs([r.cpu_out_ms for r in rs], '{:.2f}')[6:]})",
    )
    split = {k: m(lambda r, k=k: r.cpu_split[k]) for k in rs[0].cpu_split}
    row(
        "CPU per MiB produced, by process",
        " / ".join(f"{k} {v:.1f}" for k, v in split.items()) + " ms",
        f"(weed on raw PUTs: {m(lambda r: r.raw_store_cpu_ms):.1f} ms)",
    )
    # Every process of the write path shares this host's cores: near 100 % busy, the
    # cores (not the broker waiting on anything) are what bounds the throughput.
    cores = os.cpu_count() or 1
    busy = m(lambda r: r.produce_mib_s) * sum(split.values()) / 1000 / cores
    row(
        "host CPU busy while producing",
        f"{busy:>9.1%}",
        f"of {cores} cores (throughput x the CPU per MiB above)",
    )
    row(
        "broker RSS, max under load / peak",
        f"{m(lambda r: r.rss_max_mib):>9.1f} / {proc.peak_rss_mib():.1f} MiB",
    )
    interval = config.produce_commit_interval_ms
    p99_limit = (
        interval
        + m(lambda r: r.latency_put_p99_ms)
        + m(lambda r: r.latency_ops.commit_p99_ms)
        + P99_SLACK_MS
    )
    tag = f"{batch_size // 1024} KiB"
    return [
        Target(f"produce / raw PUT ({tag})", med(ratio) * 100, 90.0, "%", higher_is_better=True),
        Target(f"CPU per MiB produced ({tag})", m(lambda r: r.cpu_in_ms), 3.0, "ms"),
        Target(f"CPU per MiB fetched ({tag})", m(lambda r: r.cpu_out_ms), 2.0, "ms"),
        Target(
            f"produce p99 ({tag})",
            m(lambda r: r.latency_p99_ms),
            p99_limit,
            "ms",
            note=f"{interval} interval + PUT p99 + commit p99 + {P99_SLACK_MS:.0f}",
        ),
        Target(f"cache-hit fetch p99 ({tag})", m(lambda r: r.tail_p99_ms), 10.0, "ms"),
        Target(f"RSS at steady load ({tag})", m(lambda r: r.rss_max_mib), 250.0, "MiB"),
    ]


def _own_cpu_seconds() -> float:
    """CPU of this process (the client: librdkafka's threads included)."""
    t = os.times()
    return t.user + t.system


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.run", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=256, help="MiB produced per run (default 256)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per figure; medians printed")
    ap.add_argument(
        "--batch-sizes",
        default=None,
        help="comma-separated producer batch.size values (default 16 KiB and 1 MiB; "
        "--quick: 1 MiB)",
    )
    ap.add_argument(
        "--targets",
        default="dev,s3,commit,scale",
        help="dev, s3, commit (group-commit latency across loads, both commit modes, on "
        "both stores; bench.commit_latency), scale (1 vs 2 broker processes on this host, "
        "same storage; bench.scale_out), tls (TLS vs plaintext; bench.tls), classic (classic "
        "RF=3 vs diskless topics on 3 brokers, and Apache Kafka's 3 KRaft nodes beside them; "
        "bench.classic; kafka is the same target), tiered (copy to remote vs raw "
        "PUT, catch-up reads from remote vs diskless; bench.tiered), rebalance (classic vs "
        "KIP-848 group rebalances, Sluice and Kafka; bench.rebalance), share (share groups "
        "vs consumer groups; bench.share_groups) or any of them "
        "(default dev,s3,commit,scale)",
    )
    ap.add_argument("--quick", action="store_true", help="~1 min: 64 MiB, 1 run, 1 MiB batches")
    ap.add_argument(
        "--budget",
        type=float,
        default=None,
        help="seconds per produce or consume phase before cutting a run short",
    )
    add_broker_options(ap, "both targets")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    ap.add_argument(
        "--pin-store",
        action="store_true",
        help="s3: the store on CPU 0, broker/PostgreSQL/client on the others (as with a "
        "store on its own machines); raw PUTs measured the same way",
    )
    args = ap.parse_args(argv)
    if args.quick:
        args.mib, args.repeats = 64, 1
    if args.batch_sizes is None:
        args.batch_sizes = "1048576" if args.quick else "16384,1048576"
    # Cap each phase so a slow broker cannot blow the time budget; a capped run is
    # reported as such and its rates use what was actually moved.
    args.budget = args.budget or (8.0 if args.quick else 15.0)
    args.batch_sizes = [int(x) for x in args.batch_sizes.split(",") if x]
    args.options = broker_options(args.options)
    args.put_seconds = 1.0 if args.quick else 2.0
    args.latency_seconds = 3.0 if args.quick else 6.0
    args.tail_mib = 32.0
    args.tail_fetches = 40 if args.quick else 100
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    known = {
        "dev",
        "s3",
        "commit",
        "scale",
        "tls",
        "classic",
        "kafka",
        "tiered",
        "rebalance",
        "share",
    }
    unknown = set(targets) - known
    if unknown:
        ap.error(f"unknown targets {sorted(unknown)}")

    with workdir(args.keep) as wd:
        say(
            f"sluice bench: {args.mib:g} MiB of {RECORD_SIZE} B records x {args.repeats} runs, "
            f"{PARTITIONS} partitions, acks=all, linger.ms=5, {os.cpu_count()} cores"
        )
        say("machine limits:")
        loop_mib_s = timed("loopback TCP", loopback_tcp_mib_s, args.repeats)
        verdicts: list[Target] = []
        if "dev" in targets:
            run_dev(args, wd, loop_mib_s)
        if "s3" in targets:
            verdicts += run_s3(args, wd, loop_mib_s)
        if "commit" in targets:
            from . import commit_latency

            commit_latency.main(
                ["--repeats", str(args.repeats), "--mib", str(min(args.mib, 128))]
                + (["--seconds", "3", "--lone-records", "50"] if args.quick else [])
                + as_arguments(args.options)
            )
        if "scale" in targets:
            from . import scale_out

            # Medians of 3 runs per layout even in --quick: a 2/1 ratio of single runs on a
            # shared machine says little. -o applies to every broker, as for the s3 target.
            scale_out.main(
                (["--quick"] if args.quick else ["--repeats", str(args.repeats)])
                + ["--batch-sizes", ",".join(map(str, args.batch_sizes))]
                + as_arguments(args.options)
            )
        if "tls" in targets:
            from . import tls

            tls.main(["--quick"] if args.quick else ["--repeats", str(args.repeats)])
        if "classic" in targets or "kafka" in targets:
            from . import classic

            # Classic (local logs, RF=3) vs diskless on one 3-broker cluster, and Apache
            # Kafka (3 KRaft nodes) in the same run: "kafka" is another name for it.
            classic.main(
                ["--repeats", str(args.repeats)]
                + (["--quick"] if args.quick else ["--mib", str(min(args.mib, 128))])
            )
        if "tiered" in targets:
            from . import tiered

            # Tiered storage of classic topics: copying and catch-up reads from remote.
            tiered.main(
                ["--repeats", str(args.repeats)]
                + (["--quick"] if args.quick else ["--mib", str(min(args.mib, 128))])
            )
        if "rebalance" in targets:
            from . import rebalance

            # Sluice and Kafka in the same run; --quick: 1 -> 4 -> 1, one run.
            rebalance.main(
                (
                    ["--members", "4", "--repeats", "1"]
                    if args.quick
                    else ["--repeats", str(args.repeats)]
                )
                + as_arguments(args.options)
            )
        if "share" in targets:
            from . import share_groups

            share_groups.main(
                (
                    ["--records", "20000", "--repeats", "1"]
                    if args.quick
                    else ["--repeats", str(args.repeats)]
                )
                + as_arguments(args.options)
            )
        if verdicts:
            say("\ntargets (issue 3), on the medians above:")
            for t in verdicts:
                say(t.line())
    return 0


if __name__ == "__main__":
    sys.exit(main())
