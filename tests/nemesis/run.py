"""One nemesis run: start the cluster, run the workload while the nemesis injects its seeded
schedule, heal everything, let the ISRs recover, then check. Prints a JSON summary and
returns 1 if the checker found a violation.

    python -m tests.nemesis --seconds 120 --seed 7 [--schedule all|process|proxy|retry-above-hw]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

from confluent_kafka.admin import NewTopic

from . import checker
from .cluster import REPLICA_LAG_MS, NemesisCluster
from .faults import SCHEDULES, Nemesis, schedule, unavailability
from .workload import Topic, Workload

CLASSIC = {"diskless.enable": "false", "min.insync.replicas": "2"}
TIERED = {
    **CLASSIC,
    "remote.storage.enable": "true",
    "segment.bytes": "1048576",  # Kafka's minimum: a segment rolls every ~50 s at 20 KB/s
    "local.retention.bytes": "1",
}
WARMUP_S = 5.0


def topics(with_tiered: bool, migrations: int) -> dict[str, Topic]:
    out = {
        "classic": Topic("nemesis-classic", "classic", 3),
        "diskless": Topic("nemesis-diskless", "diskless", 3),
    }
    if with_tiered:
        out["tiered"] = Topic("nemesis-tiered", "tiered", 1, pad=1000)
    # Created classic; the nemesis's "migrate" flips the first to diskless and back, then the
    # next: a topic migrated back to classic cannot migrate again (docs/migration.md, Limits).
    for k in range((migrations + 1) // 2):
        out[f"migrating-{k}"] = Topic(f"nemesis-migrating-{k}", "migrating", 2)
    return out


def create_topics(cluster: NemesisCluster, wanted: dict[str, Topic]) -> None:
    configs = {
        "classic": CLASSIC,
        "migrating": CLASSIC,
        "tiered": TIERED,
        "diskless": {"diskless.enable": "true"},
    }
    # Diskless topics take no replication factor: the controller places one replica per rack.
    new = [
        NewTopic(t.name, t.partitions, -1 if t.kind == "diskless" else 3, config=configs[t.kind])
        for t in wanted.values()
    ]
    admin = cluster.admin()  # kept referenced: the futures fail when the client is destroyed
    for future in admin.create_topics(new).values():
        future.result(30)


def run(
    seconds: float,
    seed: int,
    schedule_name: str = "all",
    with_tiered: bool = True,
    root: Path | None = None,
    keep: bool = False,
    netns: bool = False,
    each: int = 0,
) -> dict[str, Any]:
    faults = schedule(seed, seconds, schedule_name, each)
    wanted = topics(with_tiered, sum(1 for f in faults if f.kind == "migrate"))
    migrating = [t.name for t in wanted.values() if t.kind == "migrating"]
    # Classic replicas to wait for and compare (the migrating topic's move between kinds).
    replicated = [t.name for k, t in wanted.items() if k in ("classic", "tiered")]
    if any(f.kind.startswith("cut-") for f in faults) and not netns:
        raise SystemExit(f"schedule {schedule_name!r} cuts network links: it needs --netns")
    cluster = NemesisCluster(root, netns=netns)
    summary: dict[str, Any] = {
        "seed": seed,
        "seconds": seconds,
        "schedule": schedule_name,
        "netns": netns,
        "each": each,
    }
    started = time.monotonic()
    workload: Workload | None = None
    try:
        cluster.up()
        summary["root"] = str(cluster.root)
        create_topics(cluster, wanted)
        cluster.wait_healthy(replicated, timeout=60)
        workload = Workload(cluster.bootstrap, wanted, seed, cluster.root / "workload")
        workload.start()
        time.sleep(WARMUP_S)
        nemesis = Nemesis(
            cluster,
            wanted["classic"].name,
            wanted["classic"].partitions,
            replicated,
            migrating=migrating,
            on_migrate=workload.add_joiner,
        )
        nemesis.run(faults, deadline=time.monotonic() + seconds, tick=workload.check)
        cluster.heal_all()
        try:
            summary["heal_s"] = round(cluster.wait_healthy(replicated, timeout=120), 1)
        except TimeoutError as exc:
            # Still checked: what was acknowledged must be readable from what is up.
            summary["not_healthy_at_end"] = str(exc)
        time.sleep(3.0)  # a few acknowledged records after the last fault
        run_end = time.time()
        workload.finish()
        with contextlib.suppress(TimeoutError):
            cluster.wait_healthy(replicated, timeout=60)
        summary["unexpected_exits"] = cluster.unexpected
        ledger = workload.ledger()
        summary["client_crashes"] = workload.crashes()
        all_topics = list(wanted.values())
        # The figures so far are kept should the read-back fail (then a violation).
        summary["faults"] = dict(Counter(e.kind for e in nemesis.events))
        summary["unavailability"] = unavailability(nemesis.events, ledger.acks_all, run_end)
        try:
            uncommitted = checker.read_all(cluster.bootstrap, all_topics, "read_uncommitted")
            committed = checker.read_all(cluster.bootstrap, all_topics, "read_committed")
        except TimeoutError as exc:
            summary["violations"] = [f"read-back incomplete, nothing audited: {exc}"]
            return summary
        summary.update(checker.check_acks(ledger, all_topics, uncommitted))
        summary["txns"] = checker.check_txns(ledger, committed, cluster.root / "workload")
        summary["producer_fatal"] = ledger.producer_fatal[:10]
        summary["group"] = {
            "consumed": ledger.group_consumed,
            "samples": sum(len(v) for v in ledger.group_offsets.values()),
            "regressions": ledger.group_regressions[:10],
        }
        summary["reader_regressions"] = ledger.reader_regressions[:10]
        summary["reader_read"] = sum(len(v) for v in ledger.reader_seen.values())
        summary["joiners"] = checker.check_joiners(ledger, uncommitted)
        assert cluster.cluster is not None
        md = cluster.admin().list_topics(timeout=10)
        replicas = {
            (t, p.id): list(p.replicas)
            for t in replicated
            for p in md.topics[t].partitions.values()
        }
        high = _high_watermarks(cluster, replicas)
        summary["replicas"] = checker.check_replicas(
            {b.node_id: b.data_dir for b in cluster.cluster.brokers},
            replicas,
            high,
            {wanted["tiered"].name} if with_tiered else set(),
        )
        summary["replica_lag_time_max_ms"] = REPLICA_LAG_MS
        summary["delivery_failed"] = dict(ledger.failed)
        summary["nemesis_log"] = nemesis.log
        summary["client_errors"] = ledger.errors[:30]
        summary["tracebacks_in_logs"] = sum(
            p.read_text(errors="replace").count("Traceback") for p in cluster.log_paths()
        )
        summary["violations"] = checker.violations(summary)
    finally:
        if workload is not None:
            workload.kill()
        cluster.down()
        if not keep and summary.get("violations") == []:
            cluster.remove()
        summary["elapsed_s"] = round(time.monotonic() - started, 1)
    return summary


def _high_watermarks(
    cluster: NemesisCluster, replicas: dict[tuple[str, int], list[int]]
) -> dict[tuple[str, int], int]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "nemesis-hw"})
    try:
        return {
            (t, p): consumer.get_watermark_offsets(TopicPartition(t, p), 30)[1] for t, p in replicas
        }
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/nemesis", description=__doc__)
    parser.add_argument("--seconds", type=float, default=120.0, help="length of the schedule")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--schedule", choices=sorted(SCHEDULES), default="all")
    parser.add_argument("--no-tiered", action="store_true", help="no tiered topic")
    parser.add_argument("--dir", type=Path, help="cluster directory (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the cluster's directory")
    parser.add_argument("--out", type=Path, help="also write the JSON summary here")
    parser.add_argument(
        "--netns",
        action="store_true",
        help="each broker and controller in its own network namespace (root; needed by the "
        "network partitions of the net and all-net schedules)",
    )
    parser.add_argument(
        "--each",
        type=int,
        default=0,
        help="every fault kind of the schedule this many times (rounds in a seeded order); "
        "--seconds is then a deadline",
    )
    args = parser.parse_args(argv)
    summary = run(
        args.seconds,
        args.seed,
        args.schedule,
        not args.no_tiered,
        args.dir,
        args.keep,
        args.netns,
        args.each,
    )
    text = json.dumps(summary, indent=2, sort_keys=True)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")
    if summary.get("violations"):
        print("VIOLATIONS: " + "; ".join(summary["violations"]), file=sys.stderr)
        return 1
    return 0
