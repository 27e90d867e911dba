"""Apache Kafka's own load tools as a benchmark client: ``kafka-producer-perf-test``
(org.apache.kafka.tools.ProducerPerformance) and ``kafka-consumer-perf-test``
(ConsumerPerformance), run from the Kafka jars the launcher fetches (sluice/launch/kafka.py),
with the Java client's defaults unless told otherwise.

Used by ``bench.classic --client perf-test``: the same tool against Kafka and against Sluice
in one run, as an operator comparing the two would measure them. Figures are the tools' own
(records/s and latency percentiles of every record, measured in the client), parsed from
their summary lines.
"""

from __future__ import annotations

import re
import subprocess

from sluice.launch.kafka import ensure_jars, java

from .stats import MiB

# The JVM a load generator gets (kafka-run-class.sh's defaults: 256 MiB heap is too small
# for 5 MiB of batches in flight to 3 brokers; full JIT, not the short tools' C1 only).
PERF_JVM = ("-Xmx768m", "-XX:+UseG1GC")

# "N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max latency,
#  P ms 50th, P ms 95th, P ms 99th, P ms 99.9th."
_PRODUCER_SUMMARY = re.compile(
    r"(?P<sent>\d+) records sent, (?P<rps>[\d.]+) records/sec \((?P<mbs>[\d.]+) MB/sec\), "
    r"(?P<avg>[\d.]+) ms avg latency, (?P<max>[\d.]+) ms max latency, (?P<p50>\d+) ms 50th, "
    r"(?P<p95>\d+) ms 95th, (?P<p99>\d+) ms 99th, (?P<p999>\d+) ms 99.9th"
)


class PerfToolError(RuntimeError):
    pass


def _run(main: str, args: list[str], timeout_s: float) -> str:
    command = [java(), *PERF_JVM, "-cp", f"{ensure_jars()}/*", main, *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout_s)
    if done.returncode != 0:
        raise PerfToolError(f"{main} exited {done.returncode}: {done.stderr[-2000:]}")
    return done.stdout


def producer_perf(
    bootstrap: str,
    topic: str,
    records: int,
    record_size: int,
    acks: str,
    throughput: float = -1,
    props: dict[str, str] | None = None,
    timeout_s: float = 600,
) -> dict:
    """``records`` records of ``record_size`` bytes, flat out (``throughput`` -1) or paced at
    ``throughput`` records/s; ``props`` are producer configs beyond the bootstrap and acks
    (e.g. linger.ms, batch.size). The tool's summary: MiB/s, latency percentiles (ms) of
    every record from send() to its acknowledgement."""
    settings = {"bootstrap.servers": bootstrap, "acks": acks, **(props or {})}
    args = [
        "--topic", topic,
        "--num-records", str(records),
        "--record-size", str(record_size),
        "--throughput", str(int(throughput) if throughput > 0 else -1),
        "--producer-props", *(f"{k}={v}" for k, v in settings.items()),
    ]  # fmt: skip
    out = _run("org.apache.kafka.tools.ProducerPerformance", args, timeout_s)
    summary = None
    for line in out.splitlines():
        if (m := _PRODUCER_SUMMARY.search(line)) is not None:
            summary = m  # the last one: the whole run's (earlier ones are per interval)
    if summary is None:
        raise PerfToolError(f"no summary line in ProducerPerformance's output: {out[-1000:]}")
    sent = int(summary["sent"])
    return {
        "records": sent,
        "mib": sent * record_size / MiB,
        # The tool's MB is 2^20 bytes (it divides by 1024 * 1024).
        "mib_s": float(summary["mbs"]),
        "records_s": float(summary["rps"]),
        "p50_ms": float(summary["p50"]),
        "p99_ms": float(summary["p99"]),
        "max_ms": float(summary["max"]),
        "errors": 0 if sent == records else records - sent,
    }


def consumer_perf(bootstrap: str, topic: str, messages: int, timeout_s: float = 600) -> dict:
    """Read ``messages`` records of ``topic`` from the beginning with a fresh group. The
    tool's fetch rate (MiB/s after the group's first assignment: its join is left out)."""
    args = [
        "--bootstrap-server", bootstrap,
        "--topic", topic,
        "--messages", str(messages),
        "--timeout", str(int(timeout_s * 1000)),
    ]  # fmt: skip
    out = _run("org.apache.kafka.tools.ConsumerPerformance", args, timeout_s + 60)
    # A header line, then one line of values:
    # start.time, end.time, data.consumed.in.MB, MB.sec, data.consumed.in.nMsg, nMsg.sec,
    # rebalance.time.ms, fetch.time.ms, fetch.MB.sec, fetch.nMsg.sec
    for line in reversed(out.splitlines()):
        fields = [f.strip() for f in line.split(",")]
        if len(fields) >= 10 and re.fullmatch(r"[\d.]+", fields[2] or "x"):
            return {
                "records": int(fields[4]),
                "mib": float(fields[2]),
                "fetch_mib_s": float(fields[8]),
                "rebalance_ms": float(fields[6]),
            }
    raise PerfToolError(f"no result line in ConsumerPerformance's output: {out[-1000:]}")
