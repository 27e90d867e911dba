"""Rebalance time for 1 -> N -> 1 members of a consumer group on a 100-partition topic:
the classic group protocol with an eager (``range``) and the ``cooperative-sticky`` assignor,
against KIP-848's consumer protocol (``group.protocol=consumer``, the broker's default
assignor), on a Sluice cluster (diskless and classic topics) and on Apache Kafka 4.x in the
same run (issue 30).

A steady producer writes one record to every partition each ``--interval-ms``. Members are
stock confluent-kafka consumers (librdkafka), each on its own thread of this process, each
logging every record it consumes (when, partition) and its assignment after every poll.
Members join one at a time up to ``--members``, then leave (a clean ``close()``: LeaveGroup)
one at a time down to one. For each step, from the membership change (the new member's
``subscribe()``, the leaving member's ``close()``):

- **settled**: until every partition is assigned to exactly one member and the live members
  hold a balanced share (100 / n, give or take one) and keep it;
- **consuming**: until, besides, every partition was consumed by its final owner since it
  got it: consumption resumed everywhere (the step's time);
- **moved**: partitions whose owner changed; **paused**: partitions that were nobody's at
  some moment of the step (stop-the-world revokes them all, an incremental protocol only
  those that move), and the partition-seconds without an owner, summed over partitions;
- **stalled**: partitions with a gap between two consumed records (any member), from the
  change until the next step, longer than twice the longest gap of any partition in the
  sequence's quiet stretches and at least 1 s (``--stall-ms`` sets it); **gap**: the
  longest such gap of any partition;
- **re-read**: records consumed again after a partition moved (auto commit every second).

Each step waits ``--quiet`` seconds once consuming everywhere (those are the quiet
stretches, whose longest gap is printed), then a random time up to the protocol's heartbeat
interval (``--jitter``), so that changes meet the members' heartbeat timers at any phase. Client and
broker group settings are the stock defaults (both brokers: KIP-848 heartbeat interval 5 s,
session 45 s; librdkafka classic heartbeat 3 s) except ``group.initial.rebalance.delay.ms=0``
on both; ``-c KEY=VALUE`` sets a consumer config, ``-o KEY=VALUE`` a Sluice broker config.
Figures are medians over the join steps and over the leave steps of ``--repeats`` runs.

    python -m bench.rebalance                  # 3 runs, 1 -> 10 -> 1, Sluice and Kafka
    python -m bench.rebalance --members 4 --repeats 1 --systems diskless --protocols consumer
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import struct
import sys
import threading
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from .harness import (
    add_broker_options,
    add_client_options,
    broker_options,
    say,
    serve_until,
    sluice_and_kafka,
)
from .stats import med
from .workdir import workdir

SYSTEMS = ("diskless", "classic", "kafka")
# name -> consumer configs on top of the common ones
PROTOCOLS: dict[str, dict[str, str]] = {
    "eager": {"partition.assignment.strategy": "range"},
    "cooperative": {"partition.assignment.strategy": "cooperative-sticky"},
    "consumer": {"group.protocol": "consumer"},
}
POLL_S = 0.05
# The stock heartbeat intervals: librdkafka's classic heartbeat.interval.ms, and the one
# both brokers give KIP-848 members (group.consumer.heartbeat.interval.ms).
HEARTBEAT_S = {"eager": 3.0, "cooperative": 3.0, "consumer": 5.0}

# ---------------------------------------------------------------- what the members log


@dataclass
class Log:
    """Everything a sequence's members did, on one clock (``time.perf_counter``).
    ``assignments``: (t, member, partitions) after every change a member saw;
    ``consumed[p]``: (t, member, offset) of every record of partition p consumed."""

    partitions: int
    assignments: list[tuple[float, int, frozenset[int]]] = field(default_factory=list)
    consumed: list[list[tuple[float, int, int]]] = field(default_factory=list)

    def __post_init__(self) -> None:
        if not self.consumed:
            self.consumed = [[] for _ in range(self.partitions)]


@dataclass
class Step:
    t0: float
    kind: str  # "join" or "leave"
    members: int  # live members after the change
    live: frozenset[int]  # their ids


@dataclass
class StepResult:
    kind: str
    members: int
    settled_s: float | None  # None: never settled before the next step
    consuming_s: float | None
    moved: int
    paused: int  # partitions that had no owner at some moment
    paused_s: float  # partition-seconds without an owner, summed
    stalled: int  # partitions with a consumption gap above the stall threshold
    longest_gap_s: float
    reread: int


def owners_at(
    assignments: Sequence[tuple[float, int, frozenset[int]]], t: float
) -> dict[int, frozenset[int]]:
    """Each member's assignment as last seen at or before ``t``."""
    now: dict[int, frozenset[int]] = {}
    for when, member, parts in assignments:
        if when > t:
            break
        now[member] = parts
    return now


def is_settled(held: Mapping[int, frozenset[int]], live: frozenset[int], partitions: int) -> bool:
    """Every partition held by exactly one member, only live members hold any, and their
    shares are balanced (sizes differ by at most one)."""
    seen = 0
    union: set[int] = set()
    for member, parts in held.items():
        if parts and member not in live:
            return False
        seen += len(parts)
        union |= parts
    if seen != partitions or len(union) != partitions:
        return False
    sizes = [len(held.get(m, frozenset())) for m in live]
    return bool(sizes) and max(sizes) - min(sizes) <= 1


def analyse_step(log: Log, step: Step, end: float, stall_s: float) -> StepResult:
    """One step's figures from the logs, over [step.t0, end) (end: the next step's start)."""
    events = sorted(log.assignments, key=lambda e: e[0])
    before = owners_at(events, step.t0)
    # The settled moment: the last change into a settled state that held until ``end``.
    held = dict(before)
    settled_at: float | None = step.t0 if is_settled(held, step.live, log.partitions) else None
    # Partitions without an owner: since when (None: owned), and for how long in all.
    orphan: dict[int, float] = {p: step.t0 for p in range(log.partitions)}
    for parts in held.values():
        for p in parts:
            orphan.pop(p, None)
    paused = set(orphan)
    paused_s = 0.0
    for when, member, parts in events:
        if when <= step.t0:
            continue
        if when >= end:
            break
        held[member] = parts
        owned = set().union(*held.values())
        for p in range(log.partitions):
            if p in owned and p in orphan:
                paused_s += when - orphan.pop(p)
            elif p not in owned and p not in orphan:
                orphan[p] = when
                paused.add(p)
        ok = is_settled(held, step.live, log.partitions)
        if ok and settled_at is None:
            settled_at = when
        elif not ok:
            settled_at = None
    final = held
    paused_s += sum(end - t for t in orphan.values())
    owner_before = {p: m for m, parts in before.items() for p in parts}
    owner_after = {p: m for m, parts in final.items() for p in parts}
    moved = sum(1 for p in range(log.partitions) if owner_before.get(p) != owner_after.get(p))
    # When the final owner got each partition: its last change that added it.
    got: dict[int, float] = {}
    prev_parts: dict[int, frozenset[int]] = {}
    for when, member, parts in events:
        if when >= end:
            break
        for p in parts - prev_parts.get(member, frozenset()):
            if owner_after.get(p) == member:
                got[p] = when
        prev_parts[member] = parts
    consuming_at: float | None = settled_at
    stalled = reread = 0
    longest = 0.0
    for p in range(log.partitions):
        rows = log.consumed[p]
        prev = max((t for t, _, _ in rows if t < step.t0), default=step.t0)
        gap = 0.0
        seen_offsets = {o for t, _, o in rows if t < step.t0}
        resumed: float | None = None
        since = max(step.t0, got.get(p, step.t0))
        for t, member, offset in rows:
            if t < step.t0 or t >= end:
                continue
            gap = max(gap, t - prev)
            prev = t
            if offset in seen_offsets:
                reread += 1
            seen_offsets.add(offset)
            if resumed is None and member == owner_after.get(p) and t >= since:
                resumed = t
        gap = max(gap, end - prev)
        longest = max(longest, gap)
        if gap > stall_s:
            stalled += 1
        if consuming_at is not None:
            consuming_at = None if resumed is None else max(consuming_at, resumed)
    return StepResult(
        step.kind,
        step.members,
        None if settled_at is None else settled_at - step.t0,
        None if consuming_at is None else consuming_at - step.t0,
        moved,
        len(paused),
        paused_s,
        stalled,
        longest,
        reread,
    )


def quiet_gap(log: Log, start: float, end: float) -> float:
    """The longest gap between consumed records of any partition in [start, end)."""
    longest = 0.0
    for rows in log.consumed:
        prev = start
        for t, _, _ in rows:
            if t < start:
                continue
            if t >= end:
                break
            longest = max(longest, t - prev)
            prev = t
        longest = max(longest, end - prev)
    return longest


# ---------------------------------------------------------------- the clients


class Member(threading.Thread):
    def __init__(self, ident: int, conf: dict[str, str], topic: str, log: Log) -> None:
        super().__init__(name=f"member-{ident}", daemon=True)
        self.mid, self.conf, self.topic, self.log = ident, conf, topic, log
        self.stop = threading.Event()
        self.error: BaseException | None = None
        # Live view for the runner: current assignment, when each partition was got, when
        # each was last consumed.
        self.assignment: frozenset[int] = frozenset()
        self.got: dict[int, float] = {}
        self.last: dict[int, float] = {}

    def run(self) -> None:
        from confluent_kafka import Consumer

        perf = time.perf_counter
        # The rebalance callbacks log each change when it happens: an eager revoke and the
        # next assignment can both be served within one consume() call, and would not be
        # seen by comparing assignment() between calls. An eager protocol's callbacks name
        # the whole assignment, the incremental ones (cooperative, KIP-848) the change.
        eager = self.conf.get("partition.assignment.strategy") in ("range", "roundrobin")

        def on_assign(_c, parts) -> None:  # type: ignore[no-untyped-def]
            got = frozenset(tp.partition for tp in parts)
            self._saw(got if eager else self.assignment | got, perf())

        def on_revoke(_c, parts) -> None:  # type: ignore[no-untyped-def]
            gone = frozenset(tp.partition for tp in parts)
            self._saw(frozenset() if eager else self.assignment - gone, perf())

        try:
            c = Consumer({**self.conf, "client.id": f"bench-{self.mid}"})
            c.subscribe([self.topic], on_assign=on_assign, on_revoke=on_revoke, on_lost=on_revoke)
            while not self.stop.is_set():
                msgs = c.consume(1000, POLL_S)
                now = perf()
                for m in msgs:
                    if m.error() is None:
                        p = m.partition()
                        self.log.consumed[p].append((now, self.mid, m.offset()))
                        self.last[p] = now
                self._saw(frozenset(tp.partition for tp in c.assignment()), perf())
            c.close()
            self._saw(frozenset(), time.perf_counter())
        except BaseException as exc:  # reported by the runner
            self.error = exc

    def _saw(self, parts: frozenset[int], now: float) -> None:
        if parts == self.assignment:
            return
        for p in parts - self.assignment:
            self.got[p] = now
        self.assignment = parts
        self.log.assignments.append((now, self.mid, parts))


class SteadyProducer(threading.Thread):
    """One record to every partition each ``interval`` seconds."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, interval: float) -> None:
        super().__init__(name="producer", daemon=True)
        self.bootstrap, self.topic = bootstrap, topic
        self.partitions, self.interval = partitions, interval
        self.stop = threading.Event()
        self.errors = 0
        self.sent = 0

    def run(self) -> None:
        from confluent_kafka import Producer

        def on_delivery(err, _msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                self.errors += 1

        p = Producer({"bootstrap.servers": self.bootstrap, "linger.ms": 5})
        tick = time.perf_counter()
        while not self.stop.is_set():
            value = struct.pack(">d", time.time())
            for part in range(self.partitions):
                while True:
                    try:
                        p.produce(self.topic, value, partition=part, on_delivery=on_delivery)
                        break
                    except BufferError:
                        p.poll(0.01)
            self.sent += self.partitions
            tick += self.interval
            serve_until(p.poll, tick, self.stop)
        p.flush(30)


# ---------------------------------------------------------------- one sequence


def create_topic(bootstrap: str, system: str, partitions: int, replicas: int) -> str:
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"rebal-{system[0]}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if system == "diskless":
        topic = NewTopic(name, partitions)
    else:
        config = {"min.insync.replicas": str(min(2, replicas))}
        if system == "classic":
            config["diskless.enable"] = "false"
        topic = NewTopic(name, partitions, replicas, config=config)
    admin.create_topics([topic])[name].result(60)
    time.sleep(1.0)  # leaders in place before the producer starts
    return name


def ready(members: Iterable[Member], live: frozenset[int], partitions: int, t0: float) -> bool:
    """The runner's live check: settled, and every partition consumed by its owner since
    it got it (and since the change)."""
    held = {m.mid: m.assignment for m in members}
    if not is_settled(held, live, partitions):
        return False
    for m in members:
        for p in m.assignment:
            if m.last.get(p, 0.0) < max(t0, m.got.get(p, t0)):
                return False
    return True


@dataclass
class Sequence_:
    results: list[StepResult]
    quiet_gap_s: float
    errors: list[str]
    produced_per_s: float  # the steady producer's actual rate, over the whole sequence


def run_sequence(
    bootstrap: str,
    system: str,
    protocol: str,
    args: argparse.Namespace,
) -> Sequence_:
    topic = create_topic(bootstrap, system, args.partitions, args.replicas)
    group = f"g-{topic}-{protocol}"
    conf = {
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": "true",
        "auto.commit.interval.ms": "1000",
        **PROTOCOLS[protocol],
        **args.client,
    }
    log = Log(args.partitions)
    rng = random.Random(args.seed)
    producer = SteadyProducer(bootstrap, topic, args.partitions, args.interval_ms / 1000)
    producer.start()
    started = time.perf_counter()
    members: list[Member] = []
    gone: list[Member] = []
    errors: list[str] = []
    steps: list[Step] = []
    quiet: list[tuple[float, float]] = []
    next_id = 1

    def wait_ready(t0: float) -> None:
        live = frozenset(m.mid for m in members)
        deadline = t0 + args.step_timeout
        while time.perf_counter() < deadline:
            if ready(members + gone, live, args.partitions, t0):
                start = time.perf_counter()
                time.sleep(args.quiet)
                quiet.append((start, time.perf_counter()))
                return
            time.sleep(0.02)
        errors.append(f"step at {len(live)} members not settled in {args.step_timeout:g}s")

    def join() -> float:
        nonlocal next_id
        m = Member(next_id, conf, topic, log)
        next_id += 1
        t0 = time.perf_counter()
        members.append(m)
        m.start()
        return t0

    try:
        wait_ready(join())  # the first member: not a measured step
        quiet.clear()
        plan = ["join"] * (args.members - 1) + ["leave"] * (args.members - 1)
        jitter = args.jitter if args.jitter >= 0 else HEARTBEAT_S[protocol]
        for kind in plan:
            # A random wait of up to a heartbeat interval: the members' heartbeat timers
            # restart at each rebalance, so without it every step would meet them at the
            # same phase (how long after the last rebalance the change comes is set by the
            # quiet period and by how long consumption took to resume), and a system a
            # little slower to resume would wait a whole heartbeat more at every step.
            time.sleep(rng.uniform(0.0, jitter))
            if kind == "join":
                t0 = join()
            else:
                m = members.pop()
                t0 = time.perf_counter()
                m.stop.set()
                gone.append(m)
            steps.append(Step(t0, kind, len(members), frozenset(x.mid for x in members)))
            wait_ready(t0)
    finally:
        end = time.perf_counter()
        for m in members:
            m.stop.set()
        producer.stop.set()
        for m in members + gone:
            m.join(60)
            if m.error is not None:
                errors.append(f"member {m.mid}: {m.error!r}")
        producer.join(60)
    produced_per_s = producer.sent / max(1e-9, end - started)
    wanted = args.partitions * 1000 / args.interval_ms
    if abs(produced_per_s - wanted) > 0.2 * wanted:
        # Systems compared under different loads: the figures would not compare them.
        errors.append(f"produced {produced_per_s:.0f} records/s, not {wanted:.0f}")
    if producer.errors:
        errors.append(f"{producer.errors} produce errors")
    bounds = [s.t0 for s in steps[1:]] + [end]
    quiet_s = max((quiet_gap(log, a, b) for a, b in quiet), default=0.0)
    stall_s = stall_threshold(args.stall_ms, quiet_s)
    results = [analyse_step(log, s, b, stall_s) for s, b in zip(steps, bounds, strict=True)]
    return Sequence_(results, quiet_s, errors, produced_per_s)


def stall_threshold(stall_ms: int, quiet_s: float) -> float:
    """``--stall-ms`` when given, else twice the longest quiet gap, and at least 1 s: a
    stall is judged against what this system's consumption looks like undisturbed."""
    return stall_ms / 1000 if stall_ms > 0 else max(1.0, 2 * quiet_s)


# ---------------------------------------------------------------- report


def _fmt(v: float | None, unit: str = "") -> str:
    return "never" if v is None else f"{v:.2f}{unit}"


def summary(results: list[StepResult], kind: str) -> dict[str, float | int | None]:
    rows = [r for r in results if r.kind == kind]
    if not rows:
        return {}
    unsettled = sum(1 for r in rows if r.consuming_s is None)
    done = [r for r in rows if r.consuming_s is not None]
    return {
        "steps": len(rows),
        "unsettled": unsettled,
        "settled_s": med([r.settled_s for r in done if r.settled_s is not None]) if done else None,
        "consuming_s": med([r.consuming_s for r in done]) if done else None,  # type: ignore[misc]
        "consuming_max_s": max(r.consuming_s for r in done) if done else None,  # type: ignore[type-var]
        "moved": med([r.moved for r in rows]),
        "paused": med([r.paused for r in rows]),
        "paused_max": max(r.paused for r in rows),
        "paused_s": med([r.paused_s for r in rows]),
        "stalled": med([r.stalled for r in rows]),
        "gap_s": med([r.longest_gap_s for r in rows]),
        "reread": med([r.reread for r in rows]),
    }


def report(
    table: dict[tuple[str, str], list[Sequence_]],
    args: argparse.Namespace,
    loads: list[str],
    runs_done: int,
) -> None:
    say("")
    say(
        f"rebalance 1 -> {args.members} -> 1 on {args.partitions} partitions, "
        f"a record per partition every {args.interval_ms} ms, stall > "
        f"{f'{args.stall_ms} ms' if args.stall_ms else 'max(1 s, 2 x quiet gap)'}; "
        f"medians over the steps of {runs_done} run(s)"
    )
    say(f"load average (1/5/15 min) at each run's start: {'; '.join(loads)}")
    head = (
        f"  {'system':<9}{'protocol':<12}{'step':<6}{'settled s':>10}{'consuming s':>12}"
        f"{'(max)':>7}{'moved':>7}{'paused':>7}{'(max)':>6}{'paused p*s':>11}{'stalled':>8}"
        f"{'gap s':>7}{'re-read':>8}"
        f"{'never':>6}{'quiet gap s':>12}"
    )
    say(head)
    for (system, protocol), seqs in table.items():
        results = [r for s in seqs for r in s.results]
        quiet_s = max((s.quiet_gap_s for s in seqs), default=0.0)
        for kind in ("join", "leave"):
            s = summary(results, kind)
            if not s:
                continue
            say(
                f"  {system:<9}{protocol:<12}{kind:<6}{_fmt(s['settled_s']):>10}"  # type: ignore[arg-type]
                f"{_fmt(s['consuming_s']):>12}{_fmt(s['consuming_max_s']):>7}"  # type: ignore[arg-type]
                f"{s['moved']:>7.0f}{s['paused']:>7.0f}{s['paused_max']:>6}"
                f"{s['paused_s']:>11.1f}{s['stalled']:>8.0f}"
                f"{s['gap_s']:>7.2f}{s['reread']:>8.0f}{s['unsettled']:>6}{quiet_s:>12.2f}"
            )
        for seq in seqs:
            for e in seq.errors:
                say(f"    ! {system} {protocol}: {e}")
    if args.steps:
        say("")
        say("  per step (+n joined / -n left: consuming s / paused / stalled), run by run:")
        for (system, protocol), seqs in table.items():
            for i, seq in enumerate(seqs):
                cells = " ".join(
                    f"{'+' if r.kind == 'join' else '-'}{r.members}:"
                    f"{_fmt(r.consuming_s)}/{r.paused}/{r.stalled}"
                    for r in seq.results
                )
                say(f"  {system:<9}{protocol:<12}#{i + 1} {cells}")


def stop_cleanly_on_sigterm() -> None:
    """SIGTERM (and SIGINT, which a shell ignores for a background job) end the run through
    its ``finally`` blocks: the clusters and their databases are stopped, not left behind."""

    def stop(signum: int, _frame: object) -> None:
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.rebalance", description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=10, help="largest group (default 10)")
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="diskless,classic,kafka")
    ap.add_argument("--protocols", default=",".join(PROTOCOLS), help="eager,cooperative,consumer")
    ap.add_argument("--brokers", type=int, default=3, help="brokers of each system (default 3)")
    ap.add_argument("--interval-ms", type=int, default=100, help="a record per partition every")
    ap.add_argument(
        "--stall-ms", type=int, default=0, help="a longer gap is a stall (0: 2 x quiet gap, >= 1 s)"
    )
    ap.add_argument("--quiet", type=float, default=2.0, help="seconds between steps")
    ap.add_argument(
        "--jitter",
        type=float,
        default=-1.0,
        help="seconds of random wait before each change, at most (default: the protocol's "
        "heartbeat interval, 3 s classic, 5 s KIP-848)",
    )
    ap.add_argument("--seed", type=int, default=30, help="of the random waits")
    ap.add_argument("--step-timeout", type=float, default=90.0)
    ap.add_argument("--steps", action="store_true", help="also print every step")
    ap.add_argument("--keep", action="store_true", help="keep the temp dir (logs)")
    add_client_options(ap, "consumer configs: every member, every system")
    add_broker_options(ap, "every Sluice broker")
    args = ap.parse_args(argv)
    args.client = broker_options(args.client_opts)
    args.options = broker_options(args.options)
    systems = [s for s in args.systems.split(",") if s]
    protocols = [p for p in args.protocols.split(",") if p]
    if set(systems) - set(SYSTEMS) or set(protocols) - set(PROTOCOLS):
        ap.error("unknown system or protocol")
    args.replicas = min(3, args.brokers)
    say(f"bench.rebalance: {os.cpu_count()} cores, load average {load_average()}")
    with (
        workdir(args.keep) as wd,
        sluice_and_kafka(
            wd,
            systems,
            args.brokers,
            {"group.initial.rebalance.delay.ms": "0"},
            args.options,
            args.bootstrap,
        ) as boots,
    ):
        table: dict[tuple[str, str], list[Sequence_]] = {
            (s, p): [] for s in systems for p in protocols
        }
        loads = []
        for run in range(args.repeats):
            loads.append(load_average())
            for system in systems:
                for protocol in protocols:
                    t = time.perf_counter()
                    seq = run_sequence(boots[system], system, protocol, args)
                    table[(system, protocol)].append(seq)
                    joins = [r.consuming_s for r in seq.results if r.kind == "join"]
                    say(
                        f"  run {run + 1} {system} {protocol}: {time.perf_counter() - t:.0f}s, "
                        f"{seq.produced_per_s:.0f} records/s produced, "
                        f"join steps consuming after "
                        + " ".join(_fmt(x) for x in joins)
                        + (f"; {len(seq.errors)} error(s)" if seq.errors else "")
                    )
            # After every run, the table so far: a long run cut short still reports.
            report(table, args, loads, runs_done=run + 1)
    return 0


if __name__ == "__main__":
    stop_cleanly_on_sigterm()
    sys.exit(main())
