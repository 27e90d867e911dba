"""How far one batch coordinator goes: commit_file and find_batches against one PostgreSQL
database from 1 to many simulated brokers (issue 29).

    .venv/bin/python -m bench.coordinator_scale      # ~2 min: 1k partitions, 1/10/100 per object
    .venv/bin/python -m bench.coordinator_scale --catalog 1000,100000 --seconds 1.5
    .venv/bin/python -m bench.coordinator_scale --concurrency 1,2,4,8,16,32,64,128 --catalog 100000

Every diskless produce ends in one ``commit_file`` per object and every fetch in one
``find_batches``; both go to the one database all brokers share. This drives both through
the product's PostgreSQL coordinator (storage/coordinator/postgres.py, built as a broker
builds it) from N simulated brokers (bench/coordinator_load.py: one coordinator and pool
each, one commit in flight each, as the broker's appender; its LISTEN connection too),
with topics created as a broker without controller creates them, and reports per number of
brokers: commits/s, p50/p99 commit latency, find_batches/s and p99, PostgreSQL's CPU per
call and how busy the machine was. Points run in alternating order run by run (ascending
concurrency, then descending) and the figures are medians over ``--repeats`` runs.

From the peak commit rate it derives the largest cluster one coordinator serves at the
default PUT budget (``produce.objects.per.second.max``: every object is one commit), with
and without fetches beside the commits. PostgreSQL is the repository's launcher
(sluice/launch/postgres.py: fsync on) in a temporary directory, or ``--dsn`` (a superuser
or CREATE DATABASE DSN: the bench makes its own database there and drops it).
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import math
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from .coordinator_load import (
    Catalog,
    PhaseResult,
    SimBroker,
    WaitSampler,
    broker_config,
    create_catalog,
    run_phase,
    start_brokers,
)
from .harness import add_broker_options, broker_options, say
from .limits import wal_flush_ms
from .stats import ProcStats, machine_busy_ticks, med, percentile
from .workdir import workdir

# A point is saturated when the next number of brokers of the sweep (4x more by default)
# adds less than this to its rate.
SATURATION_GAIN = 1.10


def _ints(text: str) -> list[int]:
    return [int(x) for x in text.split(",") if x.strip()]


@dataclass
class Sample:
    """One phase of one run, as figures."""

    catalog: int
    partitions: int  # per object (commit) or per fetch (find)
    concurrency: int
    kind: str
    per_second: float
    p50_ms: float
    p99_ms: float
    calls: int
    refused: int
    pg_cpu_ms: float  # PostgreSQL's CPU per call (all its processes)
    driver_cores: float  # this process's CPU seconds per second: the simulated brokers
    machine_busy: float  # fraction of all cores busy during the phase
    notifications: int  # NOTIFYs the listening brokers received (commit phases)
    # What the active backends were doing (bench.coordinator_load.wait_kind), by share.
    waits: dict[str, float] = field(default_factory=dict)
    notify_sent: int = 0  # notifying transactions the brokers' notifiers committed
    notifiers_active: float = 0.0  # notifier backends active per sample, on average
    notifiers_on_lock: float = 0.0  # share of those samples waiting for NOTIFY's lock


class CpuWatch:
    """CPU of PostgreSQL (every process of the server), of this process and of the machine
    across one phase."""

    def __init__(self, postgres_pid: int | None) -> None:
        self._pg = ProcStats(postgres_pid) if postgres_pid else None

    def snapshot(self) -> tuple[float, float, tuple[int, int]]:
        pg = self._pg.tree_cpu_seconds() if self._pg else float("nan")
        return pg, time.process_time(), machine_busy_ticks()

    @staticmethod
    def delta(
        before: tuple[float, float, tuple[int, int]],
        after: tuple[float, float, tuple[int, int]],
        seconds: float,
    ) -> tuple[float, float, float]:
        """(PostgreSQL CPU s, driver cores, machine busy fraction)."""
        (busy0, total0), (busy1, total1) = before[2], after[2]
        busy = (busy1 - busy0) / (total1 - total0) if total1 > total0 else float("nan")
        return after[0] - before[0], (after[1] - before[1]) / seconds, busy


def _sample(
    point: tuple[int, int, int],
    result: PhaseResult,
    cpu: tuple[float, float, float],
    notifications: int,
    waits: dict[str, float],
    notifiers: tuple[int, float, float],
) -> Sample:
    lat = sorted(result.latencies)
    calls = len(lat)
    pg_s, driver, busy = cpu
    return Sample(
        *point,
        result.kind,
        result.per_second,
        percentile(lat, 0.50) * 1000,
        percentile(lat, 0.99) * 1000,
        calls,
        result.refused,
        pg_s / calls * 1000 if calls else float("nan"),
        driver,
        busy,
        notifications,
        waits,
        *notifiers,
    )


async def _listeners(brokers: Sequence[SimBroker], active: int, listen: bool) -> None:
    """The first ``active`` brokers listen (a cluster of that many brokers), the others not;
    returns once every listener is in place."""
    for i, b in enumerate(brokers):
        await b.listen(listen and i < active)
    if listen:
        waits = (b.listening.wait() for b in brokers[:active])
        await asyncio.wait_for(asyncio.gather(*waits), 10)


async def _measure(
    kind: str,
    point: tuple[int, int, int],
    brokers: Sequence[SimBroker],
    catalog: Catalog,
    seconds: float,
    probe: tuple[CpuWatch, WaitSampler],
) -> Sample:
    watch, sampler = probe
    notified = sum(b.notifications for b in brokers)
    sent = sum(b.coordinator.notifier.sent for b in brokers if b.coordinator.notifier)
    before = watch.snapshot()
    sampler.begin()
    result = await run_phase(kind, brokers, catalog, point[1], seconds)
    waits = await sampler.end()
    after = watch.snapshot()
    notifications = sum(b.notifications for b in brokers) - notified
    sent = sum(b.coordinator.notifier.sent for b in brokers if b.coordinator.notifier) - sent
    cpu = CpuWatch.delta(before, after, result.seconds)
    return _sample(point, result, cpu, notifications, waits, (sent, *sampler.notifiers()))


async def _one_catalog(
    size: int, dsn: str, args: argparse.Namespace, watch: CpuWatch, samples: list[Sample]
) -> None:
    config = broker_config(dsn, broker_options(args.options))
    # Node 0 creates the topics (as any broker would); 1..N are the load.
    setup = SimBroker(0, config, not args.no_idempotent, args.seed)
    await setup.start()
    try:
        catalog = await create_catalog(setup, size, args.topic_partitions, say)
    finally:
        await setup.close()
    if args.what_if_no_notify:
        say("  what-if: the brokers' notifiers are off (commits wake no other broker)")
    brokers = await start_brokers(
        config,
        max(args.concurrency),
        not args.no_idempotent,
        args.seed + 1,
        notify=not args.what_if_no_notify,
    )
    probe = (watch, WaitSampler(dsn))
    try:
        # Warm-up, unmeasured: every connection prepares its statements and PL/pgSQL its
        # plans once, which a long-running broker has long done.
        await asyncio.gather(
            *(b.commit([catalog.keys[b.node_id % size]], catalog) for b in brokers)
        )
        for run in range(args.repeats):
            # Alternating order, so that a drift of a shared machine lands on every point.
            order = args.concurrency if run % 2 == 0 else list(reversed(args.concurrency))
            for ppo in args.partitions_per_object:
                for n in order:
                    point = (size, ppo, n)
                    active = brokers[:n]
                    await _listeners(brokers, n, not args.no_listen)
                    commit = await _measure("commit", point, active, catalog, args.seconds, probe)
                    find = await _measure("find", point, active, catalog, args.seconds, probe)
                    samples += [commit, find]
                    say(
                        f"  run {run + 1} catalog {size} ppo {ppo:>3} brokers {n:>3}: "
                        f"commit {commit.per_second:7.0f}/s p99 {commit.p99_ms:6.1f} ms, "
                        f"find {find.per_second:7.0f}/s p99 {find.p99_ms:6.1f} ms "
                        f"(machine {commit.machine_busy:.0%}/{find.machine_busy:.0%} busy)"
                    )
                    if commit.refused or find.refused:
                        raise RuntimeError(
                            f"refused: {commit.refused} batches, {find.refused} finds"
                        )
    finally:
        await asyncio.gather(*(b.close() for b in brokers))


# ---------------------------------------------------------------- report


@dataclass
class Row:
    catalog: int
    ppo: int
    brokers: int
    commits: list[float]
    commit_p50: float
    commit_p99: float
    finds: list[float]
    find_p50: float
    find_p99: float
    pg_ms_commit: float
    pg_ms_find: float
    driver_cores: float
    busy: float
    # Commit phases: what the active backends did, median share over the runs.
    waits: dict[str, float]
    # Commit phases, medians over the runs: notifying transactions per commit, notifier
    # backends active per sample, the share of those on NOTIFY's lock.
    notifies: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def commit_rate(self) -> float:
        return med(self.commits)

    @property
    def find_rate(self) -> float:
        return med(self.finds)


def rows(samples: Sequence[Sample]) -> list[Row]:
    """Medians over the runs of each point (p99: the median of the runs' p99s)."""
    points = sorted({(s.catalog, s.partitions, s.concurrency) for s in samples})
    out = []
    for point in points:
        of = [s for s in samples if (s.catalog, s.partitions, s.concurrency) == point]
        c = [s for s in of if s.kind == "commit"]
        f = [s for s in of if s.kind == "find"]
        out.append(
            Row(
                *point,
                [s.per_second for s in c],
                med([s.p50_ms for s in c]),
                med([s.p99_ms for s in c]),
                [s.per_second for s in f],
                med([s.p50_ms for s in f]),
                med([s.p99_ms for s in f]),
                med([s.pg_cpu_ms for s in c]),
                med([s.pg_cpu_ms for s in f]),
                med([s.driver_cores for s in of]),
                med([s.machine_busy for s in of]),
                _median_shares([s.waits for s in c]),
                (
                    med([s.notify_sent / s.calls if s.calls else 0.0 for s in c]),
                    med([s.notifiers_active for s in c]),
                    med([s.notifiers_on_lock for s in c]),
                ),
            )
        )
    return out


def _median_shares(runs: Sequence[dict[str, float]]) -> dict[str, float]:
    kinds = {k for r in runs for k in r}
    return {k: med([r.get(k, 0.0) for r in runs]) for k in sorted(kinds)}


WAIT_COLUMNS = ("cpu", "row locks", "wal", "notify lock")


def saturation(series: Sequence[Row], rate: str) -> Row:
    """The point where more brokers stop adding throughput: the first whose next point
    (more brokers) gains less than SATURATION_GAIN; the last point if none does."""
    for here, more in itertools.pairwise(series):
        if getattr(more, rate) < getattr(here, rate) * SATURATION_GAIN:
            return here
    return series[-1]


def max_brokers(commits_s: float, finds_s: float, budget: int, fetches: float) -> float:
    """Brokers one coordinator serves when each commits ``budget`` objects a second and
    asks ``fetches`` find_batches a second, commits and finds sharing the database: the
    fraction of the saturated database each broker takes, inverted."""
    if budget <= 0 or not commits_s or math.isnan(commits_s):
        return float("nan")
    load = budget / commits_s + (fetches / finds_s if fetches else 0.0)
    return 1 / load


def report(samples: Sequence[Sample], args: argparse.Namespace, budget: int) -> None:
    table = rows(samples)
    say()
    say(
        "| catalog partitions | partitions per object / fetch | brokers | commits/s (runs) "
        "| commit p50 / p99 ms | find_batches/s (runs) | find p50 / p99 ms "
        "| PostgreSQL CPU ms per commit / find | driver cores | machine busy |"
    )
    say("|---|---|---|---|---|---|---|---|---|---|")
    for r in table:
        say(
            f"| {r.catalog} | {r.ppo} | {r.brokers} "
            f"| {r.commit_rate:.0f} ({', '.join(f'{x:.0f}' for x in r.commits)}) "
            f"| {r.commit_p50:.1f} / {r.commit_p99:.1f} "
            f"| {r.find_rate:.0f} ({', '.join(f'{x:.0f}' for x in r.finds)}) "
            f"| {r.find_p50:.1f} / {r.find_p99:.1f} "
            f"| {r.pg_ms_commit:.2f} / {r.pg_ms_find:.2f} | {r.driver_cores:.2f} "
            f"| {r.busy:.0%} |"
        )
    say()
    say(
        "Where the committing backends were (pg_stat_activity sampled every 50 ms during the "
        "commit phases; share of samples of active backends, median of the runs): on CPU, "
        "waiting for row locks another commit holds, on the WAL, on NOTIFY's lock, else; "
        "then the brokers' notifiers (storage/postgres/notify.py): notifying transactions "
        "per commit, their backends active at a sample (mean), the share of those on "
        "NOTIFY's lock"
    )
    say()
    say(
        "| catalog | partitions per object | brokers | "
        + " | ".join(WAIT_COLUMNS)
        + " | other | NOTIFYs per commit | notifiers active | on NOTIFY's lock |"
    )
    say("|---|---|---|" + "---|" * (len(WAIT_COLUMNS) + 4))
    for r in table:
        other = {k: v for k, v in r.waits.items() if k not in WAIT_COLUMNS and v >= 0.005}
        rest = ", ".join(f"{k} {v:.0%}" for k, v in sorted(other.items(), key=lambda x: -x[1]))
        per_commit, active, on_lock = r.notifies
        say(
            f"| {r.catalog} | {r.ppo} | {r.brokers} | "
            + " | ".join(f"{r.waits.get(k, 0.0):.0%}" for k in WAIT_COLUMNS)
            + f" | {rest or '-'} | {per_commit:.2f} | {active:.2f} | {on_lock:.0%} |"
        )
    say()
    fetches = args.fetches_per_broker
    say(
        f"Largest cluster at the PUT budget ({budget} objects/s per broker, one commit each), "
        "from the peak rates measured here: brokers = 1 / (budget / commits/s + "
        "finds / find_batches/s); and per PostgreSQL core from its CPU per call at the "
        "saturated point: brokers per core = 1000 / (budget x ms per commit + finds x ms "
        "per find)"
    )
    say()
    head = " | ".join(f"{f:g} finds/s each" for f in fetches)
    say(
        "| catalog | partitions per object | commits saturate at | peak commits/s | peak finds/s "
        f"| brokers: commits only | {head} | per PostgreSQL core: commits only | {head} |"
    )
    say("|---|---|---|---|---|---|" + "---|" * (1 + 2 * len(fetches)))
    for catalog, ppo in sorted({(r.catalog, r.ppo) for r in table}):
        series = [r for r in table if (r.catalog, r.ppo) == (catalog, ppo)]
        sat = saturation(series, "commit_rate")
        peak_c = max(r.commit_rate for r in series)
        peak_f = max(r.find_rate for r in series)
        measured = [max_brokers(peak_c, peak_f, budget, f) for f in (0.0, *fetches)]
        per_core = [per_core_brokers(sat, budget, f) for f in (0.0, *fetches)]
        say(
            f"| {catalog} | {ppo} | {sat.brokers} brokers | {peak_c:.0f} | {peak_f:.0f} | "
            + " | ".join("-" if math.isnan(x) else f"{x:.0f}" for x in measured + per_core)
            + " |"
        )


def per_core_brokers(row: Row, budget: int, fetches: float) -> float:
    """Brokers one PostgreSQL core carries at ``row``'s CPU per call: what a dedicated
    database would do if CPU were all it ran out of (not lock waits, not fsyncs)."""
    ms = budget * row.pg_ms_commit + fetches * row.pg_ms_find
    return 1000 / ms if ms > 0 else float("nan")


# ---------------------------------------------------------------- main


async def _sweep(args: argparse.Namespace) -> list[Sample]:
    from sluice.launch.postgres import LocalPostgres, ensure_database

    samples: list[Sample] = []
    with workdir(args.keep) as wd:
        server: LocalPostgres | None = None
        if args.dsn:
            admin = args.dsn
        else:
            # Three connections per simulated broker (its pool's one in use, its LISTEN,
            # its notifier's), past PostgreSQL's default of 100 at 64 brokers.
            connections = max(100, 3 * max(args.concurrency) + 20)
            settings = {"max_connections": str(connections), **broker_options(args.pg_setting)}
            server = LocalPostgres(wd / "postgres", settings=settings)
            await asyncio.to_thread(server.start)
            admin = server.admin_dsn
            p50, p99 = await asyncio.to_thread(wal_flush_ms, wd)
            say(
                "8 KiB append + fdatasync beside PostgreSQL's data (a WAL flush): "
                f"p50 {p50:.2f} ms, p99 {p99:.2f} ms"
            )
        try:
            pid = _postmaster_pid(server.data_dir) if server else None
            watch = CpuWatch(pid)
            for size in args.catalog:
                name = f"sluice_coordscale_{os.getpid()}_{size}"
                dsn = await ensure_database(admin, name)
                try:
                    say(f"catalog of {size} partitions (database {name})")
                    await _one_catalog(size, dsn, args, watch, samples)
                finally:
                    await _drop(admin, name)
        finally:
            if server is not None:
                await asyncio.to_thread(server.stop)
    return samples


def _postmaster_pid(data_dir: Path) -> int:
    # PostgreSQL writes its pid on the first line of postmaster.pid in the data directory.
    return int((data_dir / "postmaster.pid").read_text().split("\n", 1)[0])


async def _drop(admin: str, name: str) -> None:
    import asyncpg

    conn = await asyncpg.connect(admin, timeout=10)
    try:
        await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    finally:
        await conn.close()


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.coordinator_scale",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="\n\n".join(__doc__.split("\n\n")[1:]),
    )
    ap.add_argument("--concurrency", type=_ints, default=[1, 4, 16, 64],
                    help="numbers of simulated brokers, each with one commit in flight "
                    "(default 1,4,16,64)")  # fmt: skip
    ap.add_argument("--partitions-per-object", type=_ints, default=[1, 10, 100],
                    help="partitions in each committed object, and in each find_batches "
                    "(a fetch of that many partitions) (default 1,10,100)")  # fmt: skip
    ap.add_argument("--catalog", type=_ints, default=[1000],
                    help="partitions in the catalog, one fresh database each (default 1000; "
                    "the big sweep: 1000,100000)")  # fmt: skip
    ap.add_argument("--topic-partitions", type=int, default=100,
                    help="partitions per topic created (default 100)")  # fmt: skip
    ap.add_argument("--seconds", type=float, default=1.0, help="per phase (default 1)")
    ap.add_argument("--repeats", type=int, default=3, help="runs of every point (default 3)")
    ap.add_argument("--fetches-per-broker", type=lambda t: [float(x) for x in t.split(",")],
                    default=[5.0, 50.0],
                    help="find_batches per broker per second assumed in the largest-cluster "
                    "figures (default 5,50)")  # fmt: skip
    ap.add_argument("--no-idempotent", action="store_true",
                    help="plain batches (default: each broker's batches carry an idempotent "
                    "producer's sequences, Kafka's client default)")  # fmt: skip
    ap.add_argument("--no-listen", action="store_true",
                    help="no LISTEN connection per broker (default: each active broker "
                    "listens, as brokers' long polls do)")  # fmt: skip
    ap.add_argument("--what-if-no-notify", action="store_true",
                    help="not the product: the brokers send no NOTIFY after their commits "
                    "(no notifier), to measure what the notifications cost")  # fmt: skip
    ap.add_argument("--pg-setting", action="append", default=[], metavar="KEY=VALUE",
                    help="a setting of the launched PostgreSQL (e.g. synchronous_commit=off "
                    "for a what-if); repeatable")  # fmt: skip
    ap.add_argument("--dsn", default="", help="an existing PostgreSQL server (admin DSN) "
                    "instead of a launched one; its CPU is then not measured")  # fmt: skip
    ap.add_argument("--seed", type=int, default=29, help="random seed (default 29)")
    ap.add_argument("--json", type=Path, help="write every run's figures here")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (PostgreSQL's log)")
    add_broker_options(ap, "the config the brokers' budget is read from, e.g. "
                       "-o produce.objects.per.second.max=10")  # fmt: skip
    args = ap.parse_args(argv)
    args.concurrency = sorted(set(args.concurrency))
    if not args.concurrency or args.concurrency[0] < 1:
        ap.error("--concurrency needs numbers >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.monotonic()
    load = os.getloadavg()
    say(f"load average before: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} on {os.cpu_count()} cores")
    samples = asyncio.run(_sweep(args))
    budget = broker_config("", broker_options(args.options)).produce_objects_per_second
    report(samples, args, budget)
    load = os.getloadavg()
    say()
    say(
        f"load average after: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; "
        f"{time.monotonic() - started:.0f} s"
    )
    if args.json:
        args.json.write_text(json.dumps([asdict(s) for s in samples], indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
