"""Group commit: produce latency across loads, for both commit modes, on both targets.

    .venv/bin/python -m bench.commit_latency                 # dev and s3, ~6 min
    .venv/bin/python -m bench.commit_latency --targets dev --repeats 1

For each target (``dev``: ``sluice dev``, local directory + SQLite; ``s3``: one broker of a
LocalCluster on SeaweedFS + PostgreSQL) and each ``produce.commit.mode`` (adaptive, fixed):

1. a lone producer (confluent-kafka, linger.ms=0, acks=all, one record of 1 KiB at a time,
   waiting for each acknowledgement): the latency a quiet application sees;
2. flat out (16 KiB batches): the saturation throughput, broker CPU per MiB, PUTs per second;
3. paced at 1 %, 10 %, 50 % and 90 % of that saturation (or of ``--saturation-mib-s``, the
   same absolute rates for every mode and run): latency p50/p99 from produce() to
   the delivery report, the broker's upload and commit p99, PUTs and GETs per second and
   broker CPU per MiB at that load, and what those requests cost at S3's list prices
   (PUT $0.005 and GET $0.0004 per 1,000): per hour at that load, and per GiB produced.

PUTs are the flushes the broker timed (``sluice_upload_seconds``: one object each), GETs the
blocks its fetch cache loaded from the store (``sluice_fetch_cache_miss_blocks``); a
produce-only run has none unless something reads. Figures are medians of --repeats runs;
the saturation of the fixed mode is the reference the adaptive mode's throughput is given
against, in the same run. ``-o key=value`` sets a broker config for every mode (e.g.
``-o produce.objects.per.second.max=0``, the PUT budget off).
"""

from __future__ import annotations

import argparse
import contextlib
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from .harness import add_broker_options, as_arguments, broker_options, one_broker, say
from .produce_consume import RECORD_SIZE, create_topic, produce
from .stats import ProcStats, med
from .storage_ops import MetricsDelta
from .workdir import workdir

MODES = ("adaptive", "fixed")
LOADS = (0.01, 0.10, 0.50, 0.90)
BATCH = 16 * 1024
QUEUE_KIB = 128 * 1024
# S3 Standard list prices, USD per request (us-east-1): PUT/COPY/POST/LIST, GET/SELECT.
PUT_USD = 0.005 / 1000
GET_USD = 0.0004 / 1000


@dataclass
class Phase:
    mib_s: float
    p50_ms: float
    p99_ms: float
    puts_per_s: float
    cpu_ms_per_mib: float
    gets_per_s: float = float("nan")
    upload_p99_ms: float = float("nan")
    commit_p99_ms: float = float("nan")

    @property
    def usd_per_hour(self) -> float:
        """S3 request cost of this load, per hour."""
        return (self.puts_per_s * PUT_USD + self.gets_per_s * GET_USD) * 3600

    @property
    def usd_per_gib(self) -> float:
        """S3 request cost per GiB produced at this load."""
        return self.usd_per_hour / 3600 / (self.mib_s / 1024) if self.mib_s else float("nan")


def _phase_figures(
    mib_s: float,
    p50_ms: float,
    p99_ms: float,
    seconds: float,
    cpu_ms_per_mib: float,
    delta: MetricsDelta,
) -> Phase:
    upload = delta.histogram("sluice_upload_seconds")
    return Phase(
        mib_s,
        p50_ms,
        p99_ms,
        upload.count / seconds,
        cpu_ms_per_mib,
        delta.counter("sluice_fetch_cache_miss_blocks") / seconds,
        upload.quantile(0.99) * 1000,
        delta.histogram("sluice_commit_seconds").quantile(0.99) * 1000,
    )


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
def dev_broker(wd: Path, mode: str, options: dict[str, str]) -> Iterator[Broker]:
    from sluice.launch.process import SluiceProcess, free_port

    port, http = free_port(), free_port()
    cmd = ["dev", "--port", str(port), "--data-dir", str(wd / f"dev-{mode}")]
    cmd += ["-o", f"produce.commit.mode={mode}", "-o", f"http.port={http}"]
    cmd += as_arguments(options)
    process = SluiceProcess(cmd, wd / f"dev-{mode}.log", port)
    process.start()
    try:
        yield Broker(
            process.bootstrap, process.pid, _scrape_url(f"http://127.0.0.1:{http}/metrics")
        )
    finally:
        process.stop()


@contextlib.contextmanager
def s3_broker(wd: Path, mode: str, options: dict[str, str]) -> Iterator[Broker]:
    with one_broker(wd / f"s3-{mode}", {"produce.commit.mode": mode, **options}) as cluster:
        b = cluster.brokers[0]
        yield Broker(b.bootstrap, b.pid, b.metrics)


def lone_producer(bootstrap: str, topic: str, records: int) -> tuple[float, float, float]:
    """p50 and p99 of one 1 KiB record at a time, linger 0, acks=all; and the seconds the
    ``records`` took."""
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
    p50, p99 = times[len(times) // 2], times[min(len(times) - 1, int(len(times) * 0.99))]
    return p50, p99, sum(times) / 1000


def _phase(broker: Broker, run: Callable[[], object]) -> tuple[object, float, MetricsDelta]:
    proc = ProcStats(broker.pid)
    before, cpu0 = broker.scrape(), proc.cpu_seconds()
    result = run()
    return result, proc.cpu_seconds() - cpu0, MetricsDelta(before, broker.scrape())


def measure(broker: Broker, args: argparse.Namespace) -> dict[str, Phase]:
    topic = create_topic(broker.bootstrap)
    out: dict[str, Phase] = {}
    (p50, p99, seconds), cpu, delta = _phase(
        broker, lambda: lone_producer(broker.bootstrap, topic, args.lone_records)
    )
    mib = args.lone_records * RECORD_SIZE / 1024 / 1024
    out["lone"] = _phase_figures(mib / seconds, p50, p99, seconds, cpu / mib * 1000, delta)
    flat, cpu, delta = _phase(
        broker, lambda: produce(broker.bootstrap, topic, args.mib, BATCH, args.budget, QUEUE_KIB)
    )
    sat = flat.mib_s  # type: ignore[attr-defined]
    out["saturation"] = _phase_figures(
        sat,
        float("nan"),
        float("nan"),
        flat.seconds,  # type: ignore[attr-defined]
        cpu / max(flat.mib, 1e-9) * 1000,  # type: ignore[attr-defined]
        delta,
    )
    for load in args.loads:
        # Loads are fractions of this run's own saturation unless a common reference is
        # given: then every mode and run meets the same absolute rates.
        rate = (args.saturation_mib_s or sat) * load
        mib = max(rate * args.seconds, 200 * RECORD_SIZE / 1024 / 1024)
        paced, cpu, delta = _phase(
            broker,
            lambda rate=rate, mib=mib: produce(
                broker.bootstrap, topic, mib, BATCH, args.budget, QUEUE_KIB, rate_mib_s=rate
            ),
        )
        out[f"{load:.0%}"] = _phase_figures(
            paced.mib_s,  # type: ignore[attr-defined]
            paced.latency_ms(0.5),  # type: ignore[attr-defined]
            paced.latency_ms(0.99),  # type: ignore[attr-defined]
            paced.seconds,  # type: ignore[attr-defined]
            cpu / max(paced.mib, 1e-9) * 1000,  # type: ignore[attr-defined]
            delta,
        )
    return out


def report(target: str, results: dict[str, list[dict[str, Phase]]]) -> None:
    runs_n = len(next(iter(results.values())))
    say(
        f"\n== group commit: {target}, 1 KiB records, {BATCH // 1024} KiB batches; medians of "
        f"{runs_n} runs (p99 runs: min-max); S3 list prices: PUT $0.005, GET $0.0004 per 1,000"
    )
    say(
        f"  {'mode':<9}{'load':<16}{'MiB/s':>7}{'p50 ms':>8}{'p99 ms':>8}{'p99 min-max':>13}"
        f"{'upl p99':>8}{'cmt p99':>8}{'PUT/s':>7}{'GET/s':>6}{'$/hour':>8}{'$/GiB':>9}"
        f"{'CPU ms/MiB':>11}"
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

            p99s = [r[phase].p99_ms for r in runs]
            spread = f"{min(p99s):.0f}-{max(p99s):.0f}" if len(p99s) > 1 else ""
            label = "lone (linger 0)" if phase == "lone" else phase
            line = (
                f"  {mode:<9}{label:<16}{m(lambda p: p.mib_s):>7.1f}{m(lambda p: p.p50_ms):>8.1f}"
                f"{m(lambda p: p.p99_ms):>8.1f}{spread:>13}"
                f"{m(lambda p: p.upload_p99_ms):>8.1f}{m(lambda p: p.commit_p99_ms):>8.1f}"
                f"{m(lambda p: p.puts_per_s):>7.1f}{m(lambda p: p.gets_per_s):>6.1f}"
                f"{m(lambda p: p.usd_per_hour):>8.4f}{m(lambda p: p.usd_per_gib):>9.5f}"
                f"{m(lambda p: p.cpu_ms_per_mib):>11.2f}"
            )
            if phase == "saturation" and ref:
                line += f"   = {m(lambda p: p.mib_s) / ref:.0%} of fixed"
            say(line)
    if runs_n > 1:
        # A median hides one bad run in three: near saturation a short stall of the store
        # takes many times its length to drain, so every run's p99 is shown too.
        say("  p99 ms by run (in run order; modes took turns):")
        for mode, runs in results.items():
            for phase in runs[0]:
                if phase not in ("lone", "saturation"):
                    by_run = " ".join(f"{r[phase].p99_ms:.0f}" for r in runs)
                    say(f"    {mode:<9}{phase:<6}{by_run}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="bench.commit_latency", description=__doc__.split("\n\n")[0])
    ap.add_argument("--targets", default="dev,s3")
    ap.add_argument("--modes", default=",".join(MODES))
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--mib", type=float, default=128, help="MiB produced flat out per run")
    ap.add_argument("--seconds", type=float, default=8, help="seconds per paced load")
    ap.add_argument("--lone-records", type=int, default=200)
    ap.add_argument(
        "--loads",
        type=lambda text: [float(x) for x in text.split(",")],
        default=list(LOADS),
        help="paced loads as fractions of the saturation (default 0.01,0.1,0.5,0.9)",
    )
    ap.add_argument(
        "--saturation-mib-s",
        type=float,
        default=None,
        help="pace the loads as fractions of this MiB/s instead of each run's own flat-out "
        "throughput, so that modes (and runs on a busy machine) are compared at the same rates",
    )
    ap.add_argument("--budget", type=float, default=120, help="seconds cap per produce phase")
    add_broker_options(ap, "every mode and target")
    args = ap.parse_args(argv)
    options = broker_options(args.options)
    with workdir(keep=False) as wd:
        for target in args.targets.split(","):
            start = {"dev": dev_broker, "s3": s3_broker}[target]
            modes = args.modes.split(",")
            results: dict[str, list[dict[str, Phase]]] = {mode: [] for mode in modes}
            # Modes take turns, run by run: a slow spell of the machine (or of the store)
            # falls on both, not on every run of one.
            for _ in range(args.repeats):
                for mode in modes:
                    with start(wd, mode, options) as broker:
                        results[mode].append(measure(broker, args))
                    shutil.rmtree(wd / f"{target}-{mode}", ignore_errors=True)
            report(target, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
