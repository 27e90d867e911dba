"""What TLS costs: produce and consume MiB/s and broker CPU per MiB over an SSL listener vs a
PLAINTEXT listener of the same ``sluice dev`` broker, in one run.

    .venv/bin/python -m bench.tls             # 128 MiB per phase, medians of 3
    .venv/bin/python -m bench.tls --quick     # 32 MiB, 1 run

Both listeners belong to one broker process, and runs alternate plaintext / TLS, so both
see the same machine, storage and cache state. Broker CPU is the process's user+system time
over the phase (its embedded controller included, the same for both). The ratios printed
are TLS / plaintext on the medians: throughput below 1 and CPU per MiB above 1 are TLS's
cost. The client is confluent-kafka (librdkafka's OpenSSL), as in the other targets.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.launch.process import SluiceProcess, free_port

from .produce_consume import PARTITIONS, RECORD_SIZE, produce_flat_out, producer_config
from .stats import MiB, ProcStats, med

BATCH_SIZE = 1024 * 1024
QUEUE_KIB = 64 * 1024


def _certificates(root: Path) -> tuple[Path, Path, Path]:
    from sluice.secure import generate

    files = generate(root, ["127.0.0.1"])
    return files.ca, files.server_cert, files.server_key


def _topic(bootstrap: str) -> str:
    name = f"bench-tls-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=PARTITIONS)])[name].result(30)
    return name


def _produce(client: dict[str, Any], topic: str, mib: float, budget_s: float) -> tuple[float, int]:
    """(seconds, records delivered)."""
    config = {**producer_config(client["bootstrap.servers"], BATCH_SIZE, QUEUE_KIB), **client}
    errors: list[str] = []
    config["delivery.report.only.error"] = True
    config["on_delivery"] = lambda err, msg: errors.append(str(err))
    producer = Producer(config)
    n = int(mib * MiB) // RECORD_SIZE
    start = time.perf_counter()
    produced, _ = produce_flat_out(producer, topic, os.urandom(RECORD_SIZE), n, start + budget_s)
    remaining = producer.flush(120)
    return time.perf_counter() - start, produced - remaining - len(errors)


def _consume(
    client: dict[str, Any], topic: str, expected: int, budget_s: float
) -> tuple[float, int]:
    consumer = Consumer(
        {
            **client,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got, first = 0, None
        deadline = time.perf_counter() + budget_s
        while got < expected and time.perf_counter() < deadline:
            for m in consumer.consume(num_messages=10_000, timeout=0.5):
                if m.error() is None:
                    first = first or time.perf_counter()
                    got += 1
        if first is None:
            return float("inf"), 0
        return max(time.perf_counter() - first, 1e-3), got
    finally:
        consumer.close()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.tls", description=__doc__.split("\n\n")[0])
    ap.add_argument("--mib", type=float, default=128, help="MiB per produce phase")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="32 MiB, 1 run")
    ap.add_argument("--budget", type=float, default=30.0, help="seconds per phase at most")
    args = ap.parse_args(argv)
    if args.quick:
        args.mib, args.repeats = 32, 1
    with tempfile.TemporaryDirectory(prefix="sluice-bench-tls-") as tmp:
        root = Path(tmp)
        ca, cert, key = _certificates(root / "tls")
        plain_port, tls_port = free_port(), free_port()
        broker = SluiceProcess(
            [
                "dev",
                "--data-dir",
                str(root / "data"),
                "-o",
                f"listeners=PLAINTEXT://127.0.0.1:{plain_port},SSL://127.0.0.1:{tls_port}",
                "-o",
                f"ssl.certificate.location={cert}",
                "-o",
                f"ssl.key.location={key}",
                "-o",
                "produce.commit.interval.ms=50",
            ],
            root / "broker.log",
            plain_port,
        )
        broker.start()
        try:
            proc = ProcStats(broker.pid)
            clients = {
                "plaintext": {"bootstrap.servers": f"127.0.0.1:{plain_port}"},
                "tls": {
                    "bootstrap.servers": f"127.0.0.1:{tls_port}",
                    "security.protocol": "SSL",
                    "ssl.ca.location": str(ca),
                },
            }
            figures: dict[str, dict[str, list[float]]] = {
                mode: {"produce": [], "produce_cpu": [], "consume": [], "consume_cpu": []}
                for mode in clients
            }
            print(
                f"bench.tls: {args.mib:g} MiB of {RECORD_SIZE} B records per phase, "
                f"{args.repeats} run(s), {PARTITIONS} partitions, one `sluice dev` broker",
                flush=True,
            )
            for run in range(args.repeats):
                for mode, client in clients.items():
                    topic = _topic(clients["plaintext"]["bootstrap.servers"])
                    cpu = proc.cpu_seconds()
                    seconds, delivered = _produce(client, topic, args.mib, args.budget)
                    produce_cpu = proc.cpu_seconds() - cpu
                    mib = delivered * RECORD_SIZE / MiB
                    cpu = proc.cpu_seconds()
                    c_seconds, got = _consume(client, topic, delivered, args.budget)
                    consume_cpu = proc.cpu_seconds() - cpu
                    c_mib = got * RECORD_SIZE / MiB
                    f = figures[mode]
                    f["produce"].append(mib / seconds)
                    f["produce_cpu"].append(produce_cpu / mib * 1000 if mib else float("nan"))
                    f["consume"].append(c_mib / c_seconds)
                    f["consume_cpu"].append(consume_cpu / c_mib * 1000 if c_mib else float("nan"))
                    print(
                        f"  run {run + 1} {mode:<9} produce {mib / seconds:7.1f} MiB/s "
                        f"({f['produce_cpu'][-1]:6.1f} ms CPU/MiB)  consume "
                        f"{c_mib / c_seconds:7.1f} MiB/s ({f['consume_cpu'][-1]:6.1f} ms CPU/MiB)",
                        flush=True,
                    )
        finally:
            broker.stop()
    print("medians (broker CPU in ms per MiB):")
    for mode, f in figures.items():
        print(
            f"  {mode:<9} produce {med(f['produce']):7.1f} MiB/s {med(f['produce_cpu']):6.1f} "
            f"ms/MiB   consume {med(f['consume']):7.1f} MiB/s {med(f['consume_cpu']):6.1f} ms/MiB"
        )
    p, t = figures["plaintext"], figures["tls"]
    print("TLS / plaintext:")
    for key, label in (
        ("produce", "produce MiB/s"),
        ("produce_cpu", "produce CPU per MiB"),
        ("consume", "consume MiB/s"),
        ("consume_cpu", "consume CPU per MiB"),
    ):
        print(f"  {label:<22} {med(t[key]) / med(p[key]):5.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
