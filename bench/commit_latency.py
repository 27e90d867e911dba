"""Group commit: produce latency across loads, for both commit modes, on both targets.

    .venv/bin/python -m bench.commit_latency                 # dev and s3, ~6 min
    .venv/bin/python -m bench.commit_latency --targets dev --repeats 1

For each target (``dev``: ``sluice dev``, local directory + SQLite; ``s3``: one broker of a
LocalCluster on SeaweedFS + PostgreSQL) and each ``produce.commit.mode`` (adaptive, fixed):

1. a lone producer (confluent-kafka, linger.ms=0, acks=all, one record of 1 KiB at a time,
   waiting for each acknowledgement): the latency a quiet application sees;
2. flat out (16 KiB batches): the saturation throughput, broker CPU per MiB, PUTs per second;
3. paced at 1 %, 10 %, 50 % and 90 % of that saturation: latency p50/p99 from produce() to
   the delivery report, PUTs per second and broker CPU per MiB at that load.

Figures are medians of --repeats runs; the saturation of the fixed mode is the reference
the adaptive mode's throughput is given against, in the same run.
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import tempfile
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .produce_consume import RECORD_SIZE, create_topic, produce
from .stats import ProcStats, med
from .storage_ops import MetricsDelta

MODES = ("adaptive", "fixed")
LOADS = (0.01, 0.10, 0.50, 0.90)
BATCH = 16 * 1024
QUEUE_KIB = 128 * 1024


def _print(line: str = "") -> None:
    print(line, flush=True)


@dataclass
class Phase:
    mib_s: float
    p50_ms: float
    p99_ms: float
    puts_per_s: float
    cpu_ms_per_mib: float


@dataclass
class Broker:
    bootstrap: str
    pid: int
    scrape: Callable[[], dict[str, float]]


def _scrape_url(url: str) -> Callable[[], dict[str, float]]:
    from prometheus_client.parser import text_string_to_metric_families

    def scrape() -> dict[str, float]:
        with urllib.request.urlopen(url, timeout=10) as answer:
            text = answer.read().decode()
        out: dict[str, float] = {}
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                labels = ",".join(f'{k}="{v}"' for k, v in sorted(sample.labels.items()))
                out[f"{sample.name}{{{labels}}}" if labels else sample.name] = sample.value
        return out

    return scrape


@contextlib.contextmanager
def dev_broker(wd: Path, mode: str) -> Iterator[Broker]:
    from sluice.launch.process import SluiceProcess, free_port

    port, http = free_port(), free_port()
    cmd = ["dev", "--port", str(port), "--data-dir", str(wd / f"dev-{mode}")]
    cmd += ["-o", f"produce.commit.mode={mode}", "-o", f"http.port={http}"]
    process = SluiceProcess(cmd, wd / f"dev-{mode}.log", port)
    process.start()
    try:
        yield Broker(
            process.bootstrap, process.pid, _scrape_url(f"http://127.0.0.1:{http}/metrics")
        )
    finally:
        process.stop()


@contextlib.contextmanager
def s3_broker(wd: Path, mode: str) -> Iterator[Broker]:
    from sluice.cluster import LocalCluster

    cluster = LocalCluster(
        wd / f"s3-{mode}", brokers=1, broker_options={"produce.commit.mode": mode}
    )
    with cluster:
        b = cluster.brokers[0]
        yield Broker(b.bootstrap, b.pid, b.metrics)


def lone_producer_ms(bootstrap: str, topic: str, records: int) -> tuple[float, float]:
    """p50 and p99 of one 1 KiB record at a time, linger 0, acks=all."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 0, "acks": "all"})
    payload = bytes(RECORD_SIZE)
    producer.produce(topic, payload)
    producer.flush(30)  # connections and metadata, not measured
    times = []
    for _ in range(records):
        started = time.perf_counter()
        producer.produce(topic, payload)
        producer.flush(30)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))]


def _phase(broker: Broker, run: Callable[[], object]) -> tuple[object, float, MetricsDelta]:
    proc = ProcStats(broker.pid)
    before, cpu0 = broker.scrape(), proc.cpu_seconds()
    result = run()
    return result, proc.cpu_seconds() - cpu0, MetricsDelta(before, broker.scrape())


def measure(broker: Broker, args: argparse.Namespace) -> dict[str, Phase]:
    topic = create_topic(broker.bootstrap)
    out: dict[str, Phase] = {}
    p50, p99 = lone_producer_ms(broker.bootstrap, topic, args.lone_records)
    out["lone"] = Phase(float("nan"), p50, p99, float("nan"), float("nan"))
    flat, cpu, delta = _phase(
        broker, lambda: produce(broker.bootstrap, topic, args.mib, BATCH, args.budget, QUEUE_KIB)
    )
    sat = flat.mib_s  # type: ignore[attr-defined]
    out["saturation"] = Phase(
        sat,
        float("nan"),
        float("nan"),
        delta.histogram("sluice_upload_seconds").count / flat.seconds,  # type: ignore[attr-defined]
        cpu / max(flat.mib, 1e-9) * 1000,  # type: ignore[attr-defined]
    )
    for load in LOADS:
        rate = sat * load
        mib = max(rate * args.seconds, 200 * RECORD_SIZE / 1024 / 1024)
        paced, cpu, delta = _phase(
            broker,
            lambda rate=rate, mib=mib: produce(
                broker.bootstrap, topic, mib, BATCH, args.budget, QUEUE_KIB, rate_mib_s=rate
            ),
        )
        out[f"{load:.0%}"] = Phase(
            paced.mib_s,  # type: ignore[attr-defined]
            paced.latency_ms(0.5),  # type: ignore[attr-defined]
            paced.latency_ms(0.99),  # type: ignore[attr-defined]
            delta.histogram("sluice_upload_seconds").count / paced.seconds,  # type: ignore[attr-defined]
            cpu / max(paced.mib, 1e-9) * 1000,  # type: ignore[attr-defined]
        )
    return out


def report(target: str, results: dict[str, list[dict[str, Phase]]]) -> None:
    _print(f"\n== group commit: {target}, 1 KiB records, {BATCH // 1024} KiB batches")
    _print(
        f"  {'mode':<9}{'load':<11}{'MiB/s':>8}{'p50 ms':>9}{'p99 ms':>9}{'PUT/s':>8}"
        f"{'CPU ms/MiB':>12}"
    )
    ref = med([r["saturation"].mib_s for r in results["fixed"]]) if "fixed" in results else 0
    for mode, runs in results.items():
        for phase in runs[0]:

            def m(
                get: Callable[[Phase], float],
                phase: str = phase,
                runs: list[dict[str, Phase]] = runs,
            ) -> float:
                return med([get(r[phase]) for r in runs])

            label = "lone (linger 0)" if phase == "lone" else phase
            line = (
                f"  {mode:<9}{label:<11}{m(lambda p: p.mib_s):>8.1f}{m(lambda p: p.p50_ms):>9.1f}"
                f"{m(lambda p: p.p99_ms):>9.1f}{m(lambda p: p.puts_per_s):>8.1f}"
                f"{m(lambda p: p.cpu_ms_per_mib):>12.2f}"
            )
            if phase == "saturation" and ref:
                line += f"   = {m(lambda p: p.mib_s) / ref:.0%} of fixed"
            _print(line)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.commit_latency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="dev,s3")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mib", type=float, default=128, help="MiB produced flat out per run")
    ap.add_argument("--seconds", type=float, default=8, help="seconds per paced load")
    ap.add_argument("--lone-records", type=int, default=200)
    ap.add_argument("--budget", type=float, default=120, help="seconds cap per produce phase")
    args = ap.parse_args(argv)
    wd = Path(tempfile.mkdtemp(prefix="sluice-bench-commit-"))
    wd.chmod(0o755)  # PostgreSQL runs as its own user and must reach its directory
    try:
        for target in args.targets.split(","):
            start = {"dev": dev_broker, "s3": s3_broker}[target]
            results: dict[str, list[dict[str, Phase]]] = {}
            for mode in args.modes.split(","):
                runs = []
                for _ in range(args.repeats):
                    with start(wd, mode) as broker:
                        runs.append(measure(broker, args))
                    shutil.rmtree(wd / f"{target}-{mode}", ignore_errors=True)
                results[mode] = runs
            report(target, results)
    finally:
        shutil.rmtree(wd, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
