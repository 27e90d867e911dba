"""Scale-out on one host: produce throughput with 1 and with 2 broker processes on one machine,
behind the same SeaweedFS (``weed mini``) and PostgreSQL.

    .venv/bin/python -m bench.scale_out            # 512 MiB x 3 runs per layout, 16 KiB and 1 MiB
    .venv/bin/python -m bench.scale_out --quick    # ~1 min: 256 MiB x 3 runs, 1 MiB batches
    .venv/bin/python -m bench.run --targets scale  # the same, as a target of bench.run

One :class:`sluice.cluster.LocalCluster` with as many brokers as the largest layout (one rack,
no controller: brokers register in the database and leaders are spread over the live ones).
A layout of N brokers runs brokers 1..N; the others are stopped cleanly, so they leave
Metadata at once. Layouts alternate run by run (1, 2, 2, 1, 1, 2, ...) so that a slow phase
of a shared machine does not land on one layout only.

Each run produces flat out into a fresh 6-partition topic from ``--producers`` separate
processes (librdkafka, acks=all, linger.ms=5, 1 KiB records; one process each so that the
clients are not serialised on one interpreter), started at the same instant, and reports:
aggregate MiB/s, broker CPU per MiB (all brokers summed), the CPU every process of the write
path spent per MiB, how busy the whole machine was, each broker's share of the bytes and
its PUTs per second. Then, as ``bench.run``'s s3 target does, raw PUTs of the size the
brokers' objects had, with as many in flight as the brokers had together (Little's law over
their upload histograms): the store's own throughput, measured in the same run, is the limit
each layout is judged against. The speed-up is printed as the ratio of the medians and as the
median of the ratios of neighbouring runs (less sensitive to drift).
"""

from __future__ import annotations

import argparse
import concurrent.futures
import math
import multiprocessing
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .harness import add_broker_options, broker_options, say
from .limits import S3Target, raw_put, raw_put_at
from .produce_consume import (
    PARTITIONS,
    RECORD_SIZE,
    create_topic,
    high_watermarks,
    produce_flat_out,
    producer_config,
)
from .stats import MiB, ProcStats, machine_busy_ticks, med, runs
from .storage_ops import MetricsWatch, StorageOps, mean_in_flight
from .workdir import workdir

# Per producer process: enough that the client never waits on its own buffer while the
# brokers answer (~0.5 s from produce to acknowledgement under load), as bench.run's s3 target.
QUEUE_KIB = 128 * 1024
# Liveness fast enough that a broker started for a layout is in everyone's Metadata within a
# second, and one stopped leaves at once (a clean stop deregisters).
LIVENESS = {
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "3000",
    "metadata.refresh.interval.ms": "500",
}
# Producers are handed the moment to start; creating them, their first metadata request and
# the process pool's first use must fit before it.
START_MARGIN_S = 1.5
BACKGROUND_PROBE_S = 0.5


# ---------------------------------------------------------------- producer processes


@dataclass
class ProducerResult:
    delivered: int
    start: float  # time.time() when the first record was handed over
    end: float  # time.time() when the last acknowledgement arrived
    cpu_s: float  # this process's CPU (librdkafka's threads included)
    truncated: bool
    errors: list[str] = field(default_factory=list)


def _producer_task(
    bootstrap: str,
    topic: str,
    records: int,
    batch_size: int,
    start_at: float,
    budget_s: float,
) -> ProducerResult:
    """One producer process: flat out from ``start_at`` (wall clock, shared by all)."""
    from confluent_kafka import Producer

    errors: list[str] = []
    config = producer_config(bootstrap, batch_size, QUEUE_KIB)
    # Only failures are reported: a delivery callback per record would cost the client about
    # what the broker spends per record, on the same two cores.
    config["delivery.report.only.error"] = True
    config["on_delivery"] = lambda err, msg: errors.append(str(err))
    producer = Producer(config)
    # The topic's metadata before the clock starts, so that the first records do not wait
    # for it (connections to the leaders are opened by the first batches, as in production).
    producer.list_topics(topic, timeout=10)
    payload = os.urandom(RECORD_SIZE)
    while (wait := start_at - time.time()) > 0:
        time.sleep(min(wait, 0.05))
    t0 = os.times()
    start = time.time()
    produced, truncated = produce_flat_out(
        producer, topic, payload, records, time.perf_counter() + budget_s
    )
    remaining = producer.flush(120)
    end = time.time()
    t1 = os.times()
    # Gone before the next layout stops a broker, or its threads would log reconnects.
    del producer
    if remaining:
        errors.append(f"{remaining} records undelivered after flush(120)")
    return ProducerResult(
        delivered=produced - remaining - len(errors),
        start=start,
        end=end,
        cpu_s=(t1.user + t1.system) - (t0.user + t0.system),
        truncated=truncated,
        errors=errors[:5],
    )


def _ready() -> bool:
    """Imports the client in a pool process before any run is timed."""
    import confluent_kafka  # noqa: F401

    return True


# ---------------------------------------------------------------- one run


@dataclass
class Run:
    brokers: int
    mib: float
    seconds: float
    mib_s: float
    broker_cpu_ms: float  # all brokers' CPU per MiB produced
    broker_cores: list[float]  # each broker's CPU seconds per second of the phase
    cpu_split: dict[str, float]  # ms of CPU per MiB, by process kind
    machine_busy: float  # fraction of all cores busy during the phase
    background_busy: float  # the same just before it, no load: mostly other programs
    background_ours: float  # of which this benchmark's brokers, store and database
    shares: list[float]  # each broker's fraction of the bytes committed
    puts_per_s: list[float]  # each broker's objects written per second
    object_mib: float
    in_flight: float
    raw_mib_s: float
    raw_concurrency: float
    truncated: bool
    errors: list[str]

    @property
    def of_raw(self) -> float:
        return self.mib_s / self.raw_mib_s if self.raw_mib_s else math.nan

    @property
    def cpu_ceiling_mib_s(self) -> float:
        """What this machine's cores could carry at the CPU per MiB every process of the
        write path spent in this run (brokers, store, database, clients): the bound a
        machine running all of them is held to, however many brokers there are."""
        total_ms = sum(self.cpu_split.values())
        return (os.cpu_count() or 1) * 1000 / total_ms if total_ms > 0 else math.nan

    @property
    def brokers_ceiling_mib_s(self) -> float:
        """What the brokers alone could carry with a whole core each (one Python process
        runs on about one core): the part that more broker processes do multiply."""
        return self.brokers * 1000 / self.broker_cpu_ms if self.broker_cpu_ms > 0 else math.nan


class Bench:
    def __init__(self, args: argparse.Namespace, workdir: Path) -> None:
        from sluice.cluster import LocalCluster

        self.args = args
        options = {**LIVENESS, **args.options}
        # One rack: brokers sharing a host share its availability zone.
        self.cluster = LocalCluster(
            workdir / "cluster", brokers=max(args.layouts), racks=("az-a",), broker_options=options
        )
        self.pool: concurrent.futures.ProcessPoolExecutor | None = None

    def __enter__(self) -> Bench:
        self.cluster.up()
        try:
            # spawn, not fork: this process holds librdkafka threads (AdminClient) and a fork
            # would copy their locks in whatever state they were.
            self.pool = concurrent.futures.ProcessPoolExecutor(
                self.args.producers, mp_context=multiprocessing.get_context("spawn")
            )
            for f in [self.pool.submit(_ready) for _ in range(self.args.producers)]:
                f.result(60)
            c = self.cluster
            assert c.seaweed is not None and c.seaweed.pid is not None and c.postgres is not None
            postmaster = int((c.postgres.data_dir / "postmaster.pid").read_text().split()[0])
            self.peers = {"store": ProcStats(c.seaweed.pid), "coordinator": ProcStats(postmaster)}
            s3 = c.s3
            self.s3 = S3Target(s3.endpoint_url, s3.access_key, s3.secret_key, s3.bucket, s3.region)
        except BaseException:
            self.__exit__()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        if self.pool is not None:
            self.pool.shutdown(cancel_futures=True)
        self.cluster.down()

    # ------------------------------------------------------------ layouts

    def use(self, count: int) -> bool:
        """Run brokers 1..count, stop the others; wait until every running broker lists
        exactly those in Metadata (before that, one would lead partitions alone). Returns
        whether a broker had to be started."""
        from confluent_kafka.admin import AdminClient

        wanted = self.cluster.brokers[:count]
        for b in self.cluster.brokers[count:]:
            if b.alive():
                b.stop()
        started = False
        for b in wanted:
            if not b.alive():
                b.start(wait=False)
                started = True
        for b in wanted:
            b.wait_ready(60)  # generous: imports are slow on a busy machine
        ids = {b.node_id for b in wanted}
        deadline = time.monotonic() + 60
        for b in wanted:
            while True:
                md = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10)
                if set(md.brokers) == ids:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"broker {b.node_id} lists {sorted(md.brokers)}, not {ids}")
                time.sleep(0.1)
        return started

    def bootstrap(self, count: int) -> str:
        return ",".join(b.bootstrap for b in self.cluster.brokers[:count])

    def warm_up(self) -> None:
        """Not measured: a fresh weed mini grows its volumes on the first writes, and the
        brokers' S3 and PostgreSQL pools open their connections."""
        for count in sorted(set(self.args.layouts), reverse=True):
            self.use(count)
            topic = create_topic(self.bootstrap(count))
            self._produce(count, topic, 16 * count, MiB)
        raw_put(self.s3, 8 * MiB, 2, 0.5, min_puts=4)

    def _produce(
        self,
        count: int,
        topic: str,
        mib: float,
        batch_size: int,
        at_start: Callable[[], None] | None = None,
    ) -> list[ProducerResult]:
        """Flat out from all producer processes at once; ``at_start`` is called when they
        start, so that counters read there cover the phase and not the producers' set-up."""
        assert self.pool is not None
        producers = self.args.producers
        records = int(mib * MiB) // RECORD_SIZE // producers
        start_at = time.time() + START_MARGIN_S
        futures = [
            self.pool.submit(
                _producer_task,
                self.bootstrap(count),
                topic,
                records,
                batch_size,
                start_at,
                self.args.budget,
            )
            for _ in range(producers)
        ]
        while (wait := start_at - time.time()) > 0:
            time.sleep(min(wait, 0.05))
        if at_start is not None:
            at_start()
        return [f.result(self.args.budget + 180) for f in futures]

    def _our_cpu_seconds(self, brokers: list[ProcStats]) -> float:
        return sum(p.cpu_seconds() for p in brokers) + sum(
            p.tree_cpu_seconds() for p in self.peers.values()
        )

    def run(self, count: int, batch_size: int) -> Run:
        brokers = self.cluster.brokers[:count]
        bootstrap = self.bootstrap(count)
        if self.use(count):
            # A broker just started has cold S3 and PostgreSQL pools; warm them unmeasured
            # so that the layout that restarts a broker is not charged for it.
            self._produce(count, create_topic(bootstrap), 8 * count, batch_size)
        topic = create_topic(bootstrap)
        # The machine is shared: how busy it is with nothing of this benchmark running
        # (brokers idle) says how much of a run's figures other programs took.
        procs = [ProcStats(b.pid) for b in brokers]
        ours0 = self._our_cpu_seconds(procs)
        idle0 = machine_busy_ticks()
        time.sleep(BACKGROUND_PROBE_S)
        idle1 = machine_busy_ticks()
        ours = (self._our_cpu_seconds(procs) - ours0) / ((os.cpu_count() or 1) * BACKGROUND_PROBE_S)
        watches = [MetricsWatch(b.metrics) for b in brokers]
        phases = [w.phase() for w in watches]
        for ph in phases:
            ph.__enter__()
        counters0: list[tuple[list[float], dict[str, float], tuple[int, int]]] = []

        def at_start() -> None:
            counters0.append(
                (
                    [p.cpu_seconds() for p in procs],
                    {name: p.tree_cpu_seconds() for name, p in self.peers.items()},
                    machine_busy_ticks(),
                )
            )

        results = self._produce(count, topic, self.args.mib, batch_size, at_start)
        busy1, total1 = machine_busy_ticks()
        cpu0, peers0, (busy0, total0) = counters0[0]
        cpu1 = [p.cpu_seconds() for p in procs]
        peers1 = {name: p.tree_cpu_seconds() for name, p in self.peers.items()}
        for ph in phases:
            ph.__exit__(None, None, None)
        ops: list[StorageOps] = [ph.ops for ph in phases if ph.ops is not None]

        delivered = sum(r.delivered for r in results)
        mib = delivered * RECORD_SIZE / MiB
        seconds = max(r.end for r in results) - min(r.start for r in results)
        errors = [e for r in results for e in r.errors]
        stored = sum(high - low for low, high in high_watermarks(bootstrap, topic))
        if stored != delivered:
            errors.append(f"{stored} records stored, {delivered} acknowledged")
        per_mib = 1000 / max(mib, 1e-9)
        broker_cpu = sum(cpu1) - sum(cpu0)
        split = {"brokers": broker_cpu * per_mib}
        for name in self.peers:
            split[name] = (peers1[name] - peers0[name]) * per_mib
        split["clients"] = sum(r.cpu_s for r in results) * per_mib
        committed = [o.produced_bytes for o in ops]
        flushes = sum(o.flushes for o in ops)
        object_bytes = sum(committed) / flushes if flushes else 8 * MiB
        in_flight = sum(mean_in_flight(o, seconds) for o in ops)
        raw_mib_s, raw_conc, _ = raw_put_at(
            self.s3, int(object_bytes), max(in_flight, 1.0), self.args.put_seconds
        )
        return Run(
            brokers=count,
            mib=mib,
            seconds=seconds,
            mib_s=mib / seconds if seconds > 0 else math.nan,
            broker_cpu_ms=broker_cpu * per_mib,
            broker_cores=[(b - a) / seconds for a, b in zip(cpu0, cpu1, strict=True)],
            cpu_split=split,
            machine_busy=(busy1 - busy0) / max(total1 - total0, 1),
            background_busy=(idle1[0] - idle0[0]) / max(idle1[1] - idle0[1], 1),
            background_ours=ours,
            shares=[c / max(sum(committed), 1) for c in committed],
            puts_per_s=[o.flushes / seconds for o in ops],
            object_mib=object_bytes / MiB,
            in_flight=in_flight,
            raw_mib_s=raw_mib_s,
            raw_concurrency=raw_conc,
            truncated=any(r.truncated for r in results),
            errors=errors,
        )


# ---------------------------------------------------------------- report


def order(layouts: Sequence[int], repeats: int) -> list[int]:
    """Layouts in alternating order, each ``repeats`` times: 1 2 | 2 1 | 1 2 | ..., so that
    neighbouring runs of different layouts see the same state of a shared machine."""
    out: list[int] = []
    for i in range(repeats):
        out += list(layouts) if i % 2 == 0 else list(reversed(layouts))
    return out


def paired_speedups(rs: Sequence[Run], base: int, other: int) -> list[float]:
    """``other``/``base`` throughput of the i-th runs of each layout (neighbours in time)."""
    a = [r.mib_s for r in rs if r.brokers == base]
    b = [r.mib_s for r in rs if r.brokers == other]
    return [y / x for x, y in zip(a, b, strict=False) if x > 0]


def report(batch_size: int, rs: Sequence[Run], layouts: Sequence[int]) -> dict[str, float]:
    def row(label: str, value: str, detail: str = "") -> None:
        say(f"  {label:<36} {value}" + (f"  {detail}" if detail else ""))

    def m(of: Sequence[Run], get: Callable[[Run], float]) -> float:
        return med([get(r) for r in of])

    summary: dict[str, float] = {}
    for count in layouts:
        of = [r for r in rs if r.brokers == count]
        cut = "  (cut short by --budget)" if any(r.truncated for r in of) else ""
        say(f"  {count} broker{'s' if count > 1 else ''}, medians of {len(of)} runs{cut}")
        tput = m(of, lambda r: r.mib_s)
        summary[f"mib_s_{count}"] = tput
        row(
            "  produce throughput",
            f"{tput:>8.1f} MiB/s",
            f"= {m(of, lambda r: r.of_raw):.1%} of raw PUT  ({runs([r.mib_s for r in of])})",
        )
        row(
            "  raw PUT, same store, same objects",
            f"{m(of, lambda r: r.raw_mib_s):>8.1f} MiB/s",
            f"{m(of, lambda r: r.object_mib):.1f} MiB objects, "
            f"{m(of, lambda r: r.raw_concurrency):.2f} in flight  "
            f"({runs([r.raw_mib_s for r in of])})",
        )
        summary[f"cpu_ms_{count}"] = m(of, lambda r: r.broker_cpu_ms)
        row(
            "  broker CPU per MiB (all brokers)",
            f"{summary[f'cpu_ms_{count}']:>8.2f} ms",
            f"({runs([r.broker_cpu_ms for r in of], '{:.2f}')})",
        )
        split = {k: m(of, lambda r, k=k: r.cpu_split[k]) for k in of[0].cpu_split}
        row(
            "  CPU per MiB, by process",
            " / ".join(f"{k} {v:.1f}" for k, v in split.items()) + " ms",
        )
        row(
            "  machine busy (all cores)",
            f"{m(of, lambda r: r.machine_busy):>8.0%}",
            f"of {os.cpu_count()} cores; {m(of, lambda r: r.background_busy):.0%} just before "
            f"the run, without load ({m(of, lambda r: r.background_ours):.0%} of it brokers, "
            f"weed and PostgreSQL; the rest other programs)",
        )
        row(
            "  machine CPU ceiling",
            f"{m(of, lambda r: r.cpu_ceiling_mib_s):>8.1f} MiB/s",
            f"= cores / CPU per MiB of all processes; produce is "
            f"{m(of, lambda r: r.mib_s / r.cpu_ceiling_mib_s):.0%} of it",
        )
        row(
            "  brokers' own ceiling",
            f"{m(of, lambda r: r.brokers_ceiling_mib_s):>8.1f} MiB/s",
            f"= {count} core{'s' if count > 1 else ''} / broker CPU per MiB",
        )
        shares = [med([r.shares[i] for r in of]) for i in range(count)]
        puts = [med([r.puts_per_s[i] for r in of]) for i in range(count)]
        cores = [med([r.broker_cores[i] for r in of]) for i in range(count)]
        row(
            "  per broker: bytes, PUTs/s, cores used",
            ", ".join(
                f"{s:.0%} {p:.1f}/s {c:.2f}" for s, p, c in zip(shares, puts, cores, strict=True)
            ),
            "(a broker process tops out near 1.00)",
        )
        for e in [e for r in of for e in r.errors][:3]:
            say(f"  ! {e}")
    base = layouts[0]
    for count in layouts[1:]:
        ratio = summary[f"mib_s_{count}"] / summary[f"mib_s_{base}"]
        paired = paired_speedups(rs, base, count)
        summary[f"speedup_{count}"] = ratio
        say(
            f"  speed-up {count}/{base} brokers: {ratio:.2f}x (ratio of medians); "
            f"{med(paired):.2f}x (median of neighbouring runs: "
            f"{', '.join(f'{p:.2f}' for p in paired)})"
        )
    return summary


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.scale_out", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=None, help="MiB per run (default 512; quick 256)")
    ap.add_argument("--repeats", type=int, default=3, help="runs per layout (default 3)")
    ap.add_argument(
        "--batch-sizes",
        default=None,
        help="producer batch.size values (default 16384,1048576; --quick: 1048576)",
    )
    ap.add_argument(
        "--brokers", default="1,2", help="layouts to compare, in broker processes (default 1,2)"
    )
    ap.add_argument(
        "--producers",
        type=int,
        default=2,
        help="producer processes, each flat out (default 2: one per core of this machine's "
        "size; the clients share the cores with brokers, weed and PostgreSQL)",
    )
    ap.add_argument("--quick", action="store_true", help="~1 min: 256 MiB, 1 MiB batches")
    ap.add_argument(
        "--budget", type=float, default=None, help="seconds before a produce phase is cut short"
    )
    add_broker_options(ap, "every broker")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs, data)")
    args = ap.parse_args(argv)
    args.mib = args.mib or (256.0 if args.quick else 512.0)
    args.batch_sizes = [
        int(x)
        for x in (args.batch_sizes or ("1048576" if args.quick else "16384,1048576")).split(",")
        if x
    ]
    args.layouts = sorted({int(x) for x in args.brokers.split(",") if x})
    if not args.layouts or args.layouts[0] < 1 or args.repeats < 1 or args.producers < 1:
        ap.error("--brokers, --repeats and --producers must be at least 1")
    args.budget = args.budget or (10.0 if args.quick else 20.0)
    args.put_seconds = 1.0 if args.quick else 2.0
    args.options = broker_options(args.options)

    with workdir(args.keep) as wd:
        say(
            f"\n== scale out on one host: {'/'.join(map(str, args.layouts))} broker processes on "
            f"SeaweedFS (weed mini) + PostgreSQL; {args.mib:g} MiB of {RECORD_SIZE} B records "
            f"per run from {args.producers} producer processes, {PARTITIONS} partitions, "
            f"acks=all, {args.repeats} runs per layout, {os.cpu_count()} cores"
        )
        with Bench(args, wd) as bench:
            bench.warm_up()
            for bs in args.batch_sizes:
                rs = [bench.run(count, bs) for count in order(args.layouts, args.repeats)]
                say(f"batch.size={bs // 1024} KiB")
                report(bs, rs, args.layouts)
    return 0


if __name__ == "__main__":
    sys.exit(main())
