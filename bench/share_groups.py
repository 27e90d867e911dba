"""Share-group (KIP-932) delivery throughput against a consumer group on the same topic, with
1 and 3 consumers, on a Sluice cluster (diskless and classic topics) and on Apache Kafka 4.x
in the same run (issue 30).

Per run and system, one topic of ``--partitions`` partitions is filled with ``--records``
records of ``--size`` bytes (flat out, before anything consumes), then drained from the
beginning by a fresh group per phase, the phases one after the other on the same topic:

- **share**: confluent-kafka's ``ShareConsumer`` (librdkafka's share consumer, implicit
  acknowledgement: a poll's records are accepted by the next poll; the last ones by
  ``commit_sync()``), the group set to ``share.auto.offset.reset=earliest`` first;
- **group**: a classic consumer group (``Consumer``, range assignor), offsets committed
  asynchronously after every batch and synchronously at the end.

Every consumer runs in its own process (no shared GIL); all start polling at the same
instant and stop once the records delivered by all of them reach the topic's count. Per
phase: **records/s** from the first record delivered to the last acknowledged (accepted /
committed), the time from the start to the first record (joining: a consumer group's first
rebalance waits ``group.initial.rebalance.delay.ms``, 3 s, Kafka's default, on both systems,
so that its members join together), records delivered more
than once (share: delivery count above one, or the same offset twice; group: the same
offset twice) and records never delivered. Medians of ``--repeats`` runs.

    python -m bench.share_groups                          # 3 runs, Sluice and Kafka
    python -m bench.share_groups --records 20000 --repeats 1 --systems diskless
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import os
import sys
import time
import uuid
from array import array
from typing import Any

from .harness import (
    add_broker_options,
    add_client_options,
    broker_options,
    say,
    sluice_and_kafka,
)
from .rebalance import stop_cleanly_on_sigterm
from .stats import med, runs
from .workdir import workdir

SYSTEMS = ("diskless", "classic", "kafka")
KINDS = ("share", "group")
# Kafka's default (the launcher sets 0): the consumers of a group, started together, join
# its first rebalance together instead of the first taking every partition and draining
# much of the topic alone before the others join.
INITIAL_DELAY_MS = "3000"


# ---------------------------------------------------------------- the consumer processes


def consumer_process(
    kind: str,
    bootstrap: str,
    topic: str,
    group: str,
    total: int,
    delivered: Any,  # multiprocessing.Value("q")
    ready: Any,  # multiprocessing.Queue
    start: Any,  # multiprocessing.Event
    out: Any,  # multiprocessing.Queue
    client: dict[str, str],
) -> None:
    """One consumer: polls until the group as a whole delivered ``total`` records, then
    acknowledges the rest and reports what it saw."""
    from confluent_kafka import Consumer, ShareConsumer, TopicPartition

    perf = time.perf_counter
    seen: dict[int, array] = {}
    redelivered = errors = count = 0
    first = last = 0.0
    conf = {"bootstrap.servers": bootstrap, "group.id": group, **client}
    try:
        if kind == "share":
            c: Any = ShareConsumer(conf)
        else:
            c = Consumer(
                {
                    **conf,
                    "auto.offset.reset": "earliest",
                    "enable.auto.commit": False,
                    "partition.assignment.strategy": "range",
                }
            )
        ready.put(os.getpid())
        start.wait()
        c.subscribe([topic])
        while delivered.value < total:
            msgs = c.poll(0.2) if kind == "share" else c.consume(10_000, 0.2)
            n = 0
            for m in msgs:
                if m.error() is not None:
                    errors += 1
                    continue
                seen.setdefault(m.partition(), array("q")).append(m.offset())
                if kind == "share" and m.delivery_count() > 1:
                    redelivered += 1
                n += 1
            if n:
                now = perf()
                first = first or now
                count += n
                with delivered.get_lock():
                    delivered.value += n
                if kind == "group":
                    c.commit(asynchronous=True)
        if kind == "share":
            c.commit_sync(60)  # the last poll's records, accepted
        elif count:
            # Everything this member consumed, committed before the clock stops.
            c.commit(
                offsets=[TopicPartition(topic, p, max(o) + 1) for p, o in seen.items()],
                asynchronous=False,
            )
        last = perf()
        c.close()
    except Exception as exc:  # reported, not raised: the parent prints it
        out.put({"error": repr(exc)})
        return
    out.put(
        {
            "first": first,
            "last": last,
            "count": count,
            "redelivered": redelivered,
            "errors": errors,
            "seen": {p: a.tobytes() for p, a in seen.items()},
        }
    )


def drain(
    kind: str,
    bootstrap: str,
    topic: str,
    ends: dict[int, int],
    consumers: int,
    args: argparse.Namespace,
) -> dict[str, float]:
    """One phase: a fresh group of ``consumers`` drains the topic."""
    group = f"bench-{kind}-{uuid.uuid4().hex[:8]}"
    total = sum(ends.values())
    if kind == "share":
        set_share_earliest(bootstrap, group)
    ctx = multiprocessing.get_context("spawn")
    delivered = ctx.Value("q", 0)
    ready, out, start = ctx.Queue(), ctx.Queue(), ctx.Event()
    procs = [
        ctx.Process(
            target=consumer_process,
            args=(kind, bootstrap, topic, group, total, delivered, ready, start, out, args.client),
            daemon=True,
        )
        for _ in range(consumers)
    ]
    for p in procs:
        p.start()
    for _ in procs:
        ready.get(timeout=120)
    t0 = time.perf_counter()
    start.set()
    reports = []
    deadline = time.monotonic() + args.budget
    try:
        while len(reports) < consumers:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            with contextlib.suppress(Exception):
                reports.append(out.get(timeout=min(left, 1.0)))
    finally:
        for p in procs:
            if p.is_alive():
                p.join(5 if len(reports) == consumers else 0.1)
            if p.is_alive():
                p.kill()
                p.join(5)
    failed = [r["error"] for r in reports if "error" in r]
    good = [r for r in reports if "error" not in r]
    if failed or len(good) < consumers:
        return {"failed": 1.0, "why": failed or [f"{consumers - len(good)} consumer(s) timed out"]}  # type: ignore[dict-item]
    first = min(r["first"] for r in good if r["first"]) if any(r["first"] for r in good) else t0
    last = max(r["last"] for r in good)
    offsets: dict[int, list[int]] = {}
    for r in good:
        for p, raw in r["seen"].items():
            offsets.setdefault(p, []).extend(array("q", raw))
    twice = missing = 0
    for p, end in ends.items():
        got = offsets.get(p, [])
        distinct = set(got)
        twice += len(got) - len(distinct)
        missing += sum(1 for o in range(end) if o not in distinct)
    count = sum(r["count"] for r in good)
    return {
        "records_s": count / max(last - first, 1e-9),
        "first_s": first - t0,
        "total_s": last - t0,
        "count": float(count),
        "redelivered": float(sum(r["redelivered"] for r in good)),
        "twice": float(twice),
        "missing": float(missing),
        "errors": float(sum(r["errors"] for r in good)),
        "per_consumer": [r["count"] for r in good],  # type: ignore[dict-item]
    }


# ---------------------------------------------------------------- the topic


def set_share_earliest(bootstrap: str, group: str) -> None:
    """A new share group starts at the log end (share.auto.offset.reset=latest): this one
    starts at the beginning (a group config, IncrementalAlterConfigs on the GROUP)."""
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    ops = [
        ConfigEntry(
            "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
        )
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=ops)
    admin.incremental_alter_configs([resource])[resource].result(30)


def fill(bootstrap: str, system: str, args: argparse.Namespace) -> tuple[str, dict[int, int]]:
    """A new topic with ``--records`` records; its end offset per partition."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, NewTopic

    name = f"share-{system[0]}-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    if system == "diskless":
        topic = NewTopic(name, args.partitions)
    else:
        config = {"min.insync.replicas": str(min(2, args.replicas))}
        if system == "classic":
            config["diskless.enable"] = "false"
        topic = NewTopic(name, args.partitions, args.replicas, config=config)
    admin.create_topics([topic])[name].result(60)
    time.sleep(1.0)
    p = Producer(
        {
            "bootstrap.servers": bootstrap,
            "linger.ms": 5,
            "batch.size": 262_144,
            "queue.buffering.max.kbytes": 65_536,
        }
    )
    payload = os.urandom(args.size)
    for i in range(args.records):
        while True:
            try:
                p.produce(name, payload, partition=i % args.partitions)
                break
            except BufferError:
                p.poll(0.01)
    if p.flush(120) != 0:
        raise RuntimeError("records not delivered")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    ends = {
        part: c.get_watermark_offsets(TopicPartition(name, part), 30)[1]
        for part in range(args.partitions)
    }
    c.close()
    return name, ends


# ---------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.share_groups", description=__doc__.split("\n\n")[0])
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--size", type=int, default=1024, help="record bytes (default 1024)")
    ap.add_argument("--partitions", type=int, default=6)
    ap.add_argument("--consumers", default="1,3")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--systems", default=",".join(SYSTEMS), help="diskless,classic,kafka")
    ap.add_argument("--kinds", default=",".join(KINDS), help="share,group")
    ap.add_argument("--brokers", type=int, default=3, help="brokers of each system (default 3)")
    ap.add_argument("--budget", type=float, default=180.0, help="seconds per phase at most")
    ap.add_argument("--keep", action="store_true")
    add_client_options(ap, "consumer configs: both kinds, every system")
    add_broker_options(ap, "every Sluice broker")
    args = ap.parse_args(argv)
    args.client = broker_options(args.client_opts)
    args.options = broker_options(args.options)
    args.replicas = min(3, args.brokers)
    systems = [s for s in args.systems.split(",") if s]
    kinds = [k for k in args.kinds.split(",") if k]
    counts = [int(x) for x in args.consumers.split(",") if x]
    say(
        f"bench.share_groups: {args.records} records of {args.size} B, {args.partitions} "
        f"partitions, {os.cpu_count()} cores, load average {load_average()}"
    )
    table: dict[tuple[str, str, int], list[dict]] = {}
    loads: list[str] = []
    with (
        workdir(args.keep) as wd,
        sluice_and_kafka(
            wd,
            systems,
            args.brokers,
            {"group.initial.rebalance.delay.ms": INITIAL_DELAY_MS},
            args.options,
            args.bootstrap,
        ) as boots,
    ):
        for run in range(args.repeats):
            loads.append(load_average())
            for system in systems:
                topic, ends = fill(boots[system], system, args)
                for n in counts:
                    for kind in kinds:
                        r = drain(kind, boots[system], topic, ends, n, args)
                        table.setdefault((system, kind, n), []).append(r)
                        say(f"  run {run + 1} {system} {kind} x{n}: " + line(r))
    report(table, args, loads)
    return 0


def line(r: dict) -> str:
    if r.get("failed"):
        return f"FAILED {r['why']}"
    return (
        f"{r['records_s']:.0f} records/s, first after {r['first_s']:.2f}s, "
        f"{r['redelivered']:.0f} redelivered, {r['twice']:.0f} twice, {r['missing']:.0f} missing, "
        f"per consumer {r['per_consumer']}"
    )


def report(
    table: dict[tuple[str, str, int], list[dict]], args: argparse.Namespace, loads: list[str]
) -> None:
    say("")
    say(
        f"share group vs consumer group: {args.records} records of {args.size} B on "
        f"{args.partitions} partitions, medians of {args.repeats} run(s)"
    )
    say(f"load average (1/5/15 min) at each run's start: {'; '.join(loads)}")
    say(
        f"  {'system':<9}{'group':<7}{'consumers':>10}{'records/s':>11}  {'(runs)':<24}"
        f"{'first s':>8}{'redelivered':>12}{'twice':>7}{'missing':>8}{'failed':>7}"
    )
    for (system, kind, n), rows in table.items():
        ok = [r for r in rows if not r.get("failed")]
        failed = len(rows) - len(ok)
        if not ok:
            say(f"  {system:<9}{kind:<7}{n:>10}{'-':>11}  {'':<24}{'':>35}{failed:>7}")
            continue
        rates = [r["records_s"] for r in ok]
        say(
            f"  {system:<9}{kind:<7}{n:>10}{med(rates):>11.0f}  {runs(rates):<24}"
            f"{med([r['first_s'] for r in ok]):>8.2f}"
            f"{sum(r['redelivered'] for r in ok):>12.0f}{sum(r['twice'] for r in ok):>7.0f}"
            f"{sum(r['missing'] for r in ok):>8.0f}{failed:>7}"
        )
    # Share / group on the same system and consumer count: the cost of per-record state.
    say("  share / group records/s (same system, same consumers):")
    for (system, kind, n), rows in table.items():
        if kind != "share" or (system, "group", n) not in table:
            continue
        s = [r["records_s"] for r in rows if not r.get("failed")]
        g = [r["records_s"] for r in table[(system, "group", n)] if not r.get("failed")]
        if s and g:
            say(f"    {system:<9} x{n}: {med(s) / med(g):.2f}")


def load_average() -> str:
    return "/".join(f"{x:.1f}" for x in os.getloadavg())


if __name__ == "__main__":
    stop_cleanly_on_sigterm()
    sys.exit(main())
