"""Small statistics and process-measurement helpers shared by the benchmark phases."""

from __future__ import annotations

import math
import os
import statistics
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

MiB = 1024 * 1024
CLK_TCK = os.sysconf("SC_CLK_TCK")


def percentile(sorted_vals: Sequence[float], q: float) -> float:
    """Nearest-rank percentile of already sorted values (nan when empty)."""
    if not sorted_vals:
        return float("nan")
    idx = min(len(sorted_vals) - 1, max(0, math.ceil(q * len(sorted_vals)) - 1))
    return sorted_vals[idx]


def med(values: Sequence[float]) -> float:
    clean = [v for v in values if not math.isnan(v)]
    return statistics.median(clean) if clean else float("nan")


def histogram_quantile(buckets: Sequence[tuple[float, float]], q: float) -> float:
    """Quantile of a Prometheus histogram given as cumulative ``(le, count)`` pairs sorted by
    ``le`` (``+Inf`` last), interpolated linearly inside the bucket as PromQL's
    ``histogram_quantile`` does. nan when there are no observations."""
    if not buckets or buckets[-1][1] <= 0:
        return float("nan")
    rank = q * buckets[-1][1]
    lower_bound, lower_count = 0.0, 0.0
    for le, count in buckets:
        if count >= rank:
            if math.isinf(le):
                return lower_bound  # past the last finite bound: that bound is all we know
            if count == lower_count:
                return le
            return lower_bound + (le - lower_bound) * (rank - lower_count) / (count - lower_count)
        lower_bound, lower_count = le, count
    return lower_bound


class ProcStats:
    """CPU time and memory of a process, from /proc."""

    def __init__(self, pid: int) -> None:
        self.pid = pid

    def cpu_seconds(self) -> float:
        # utime and stime are fields 14 and 15 of /proc/PID/stat; the command name (field 2)
        # may contain spaces, so split after its closing parenthesis.
        stat = Path(f"/proc/{self.pid}/stat").read_text()
        fields = stat[stat.rindex(")") + 2 :].split()
        return (int(fields[11]) + int(fields[12])) / CLK_TCK

    def tree_cpu_seconds(self) -> float:
        """CPU of the process and of all its children, live or reaped (PostgreSQL's
        backends are the postmaster's children)."""
        total = self._stat_cpu(self.pid, children=True)
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    stat = (entry / "stat").read_text()
                except OSError:
                    continue
                if int(stat[stat.rindex(")") + 2 :].split()[1]) == self.pid:
                    total += self._stat_cpu(int(entry.name), children=True)
        return total

    @staticmethod
    def _stat_cpu(pid: int, children: bool = False) -> float:
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return 0.0
        fields = stat[stat.rindex(")") + 2 :].split()
        ticks = int(fields[11]) + int(fields[12])
        if children:
            ticks += int(fields[13]) + int(fields[14])
        return ticks / CLK_TCK

    def _status_mib(self, key: str) -> float:
        for line in Path(f"/proc/{self.pid}/status").read_text().splitlines():
            if line.startswith(key):
                return int(line.split()[1]) / 1024
        return float("nan")

    def rss_mib(self) -> float:
        return self._status_mib("VmRSS:")

    def peak_rss_mib(self) -> float:
        return self._status_mib("VmHWM:")


def machine_busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of all CPUs since boot, from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return total - idle, total


class RssSampler:
    """Samples a process's RSS in a background thread while a phase runs."""

    def __init__(self, proc: ProcStats, interval_s: float = 0.2) -> None:
        self._proc = proc
        self._interval = interval_s
        self.samples: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(2)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.samples.append(self._proc.rss_mib())
            except OSError:
                return
            self._stop.wait(self._interval)

    @property
    def max_mib(self) -> float:
        return max(self.samples) if self.samples else float("nan")


@dataclass
class Target:
    """One target of the issue, judged on a median figure."""

    name: str
    value: float
    limit: float
    unit: str
    higher_is_better: bool = False
    note: str = ""

    @property
    def ok(self) -> bool:
        if math.isnan(self.value) or math.isnan(self.limit):
            return False
        return self.value >= self.limit if self.higher_is_better else self.value <= self.limit

    def line(self) -> str:
        op = ">=" if self.higher_is_better else "<="
        verdict = "PASS" if self.ok else "MISS"
        note = f"  ({self.note})" if self.note else ""
        # Two decimals for small figures: 2.03 ms must not print as a passing 2.0.
        digits = 2 if abs(self.limit) < 10 else 1
        return (
            f"  {verdict}  {self.name:<34} {self.value:>9.{digits}f} {self.unit:<6} "
            f"target {op} {self.limit:.{digits}f} {self.unit}{note}"
        )


def runs(values: Sequence[float], fmt: str = "{:.0f}") -> str:
    """The per-run values behind a median, for the report."""
    return "runs: " + ", ".join(fmt.format(v) for v in values)


def now() -> float:
    return time.perf_counter()


def pin_process(pid: int, cpus: set[int], children: bool = True) -> int:
    """Run every thread of ``pid`` (and of its children) on ``cpus`` only; threads and
    children created later inherit it (Go's runtime threads, PostgreSQL's backends).
    Returns how many threads were pinned."""
    pids = [pid]
    for entry in Path("/proc").iterdir() if children else ():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat[stat.rindex(")") + 2 :].split()[1]) == pid:
                pids.append(int(entry.name))
    pinned = 0
    for p in pids:
        try:
            tasks = [int(t.name) for t in Path(f"/proc/{p}/task").iterdir()]
        except OSError:
            continue
        for tid in tasks:
            try:
                os.sched_setaffinity(tid, cpus)
            except OSError:
                continue  # ended meanwhile
            pinned += 1
    return pinned


def wait_quiet(
    cpu: Callable[[], float], idle_rate: float, timeout: float = 30.0, window: float = 0.5
) -> float:
    """Wait until the processes whose CPU ``cpu`` reads are back to their background rate
    (within 20 ms per second of ``idle_rate``, over ``window``), at most ``timeout``
    seconds; returns the seconds waited. After an acks=1 produce the followers are still
    copying when the producer is answered: that work is the produce's, and left running it
    would be counted in the next phase."""
    started = time.perf_counter()
    while time.perf_counter() - started < timeout:
        before = cpu()
        time.sleep(window)
        if (cpu() - before) / window <= idle_rate + 0.02:
            break
    return time.perf_counter() - started


def idle_cpu_rate(cpu: Callable[[], float], seconds: float = 2.0) -> float:
    """CPU seconds per second a process (or processes) spends with no client request, from
    ``cpu`` (a reading of its CPU seconds): its background work (heartbeats, replica
    fetchers' long polls, metrics over every partition, the coordinator's sweeps, a JVM's
    threads), which the benches subtract from a phase's CPU so that a short phase measures
    its requests, not the background."""
    before = cpu()
    time.sleep(seconds)
    return (cpu() - before) / seconds
