"""Storage-operation figures of a phase, from the broker's own Prometheus histograms.

The broker times every flush's upload (``sluice_upload_seconds``), its coordinator commit
(``sluice_commit_seconds``) and every fetch's find_batches (``sluice_find_batches_seconds``)
and serves them on its HTTP endpoint. A phase's figures are the difference of two scrapes,
so phases do not mix; quantiles are interpolated inside buckets as PromQL does, which is
exact only to the bucket bounds (1, 2.5, 5, 10, 25, 50, 100, 250 ms, ...).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

from .stats import histogram_quantile

Scrape = dict[str, float]

_BUCKET = re.compile(r'^(?P<name>\w+)_bucket\{le="(?P<le>[^"]+)"\}$')


@dataclass(frozen=True)
class Histogram:
    """One histogram's observations between two scrapes."""

    buckets: tuple[tuple[float, float], ...]  # cumulative (le, count)
    count: float
    total: float  # sum of observed values

    def quantile(self, q: float) -> float:
        return histogram_quantile(self.buckets, q)

    @property
    def mean(self) -> float:
        return self.total / self.count if self.count else float("nan")


class MetricsDelta:
    """What a broker's metrics say about the time between two scrapes."""

    def __init__(self, before: Scrape, after: Scrape) -> None:
        self._d = {k: v - before.get(k, 0.0) for k, v in after.items()}

    def counter(self, name: str) -> float:
        # prometheus_client exposes Counter "x" as "x_total".
        return self._d.get(f"{name}_total", self._d.get(name, 0.0))

    def histogram(self, name: str) -> Histogram:
        buckets = []
        for key, value in self._d.items():
            m = _BUCKET.match(key)
            if m and m["name"] == name:
                buckets.append((float(m["le"]), value))
        buckets.sort(key=lambda b: b[0])
        return Histogram(
            tuple(buckets), self._d.get(f"{name}_count", 0.0), self._d.get(f"{name}_sum", 0.0)
        )


@dataclass(frozen=True)
class StorageOps:
    """Per-phase storage figures of one broker (times in ms)."""

    flushes: float
    produced_bytes: float
    upload_p50_ms: float
    upload_p99_ms: float
    upload_busy_s: float  # summed upload time: / phase seconds = mean uploads in flight
    commit_p50_ms: float
    commit_p99_ms: float
    commits: float
    find_p50_ms: float
    find_p99_ms: float
    finds: float

    @property
    def object_bytes(self) -> float:
        """Mean size of the objects the broker wrote."""
        return self.produced_bytes / self.flushes if self.flushes else float("nan")

    @classmethod
    def of(cls, delta: MetricsDelta) -> StorageOps:
        upload = delta.histogram("sluice_upload_seconds")
        commit = delta.histogram("sluice_commit_seconds")
        find = delta.histogram("sluice_find_batches_seconds")
        return cls(
            flushes=upload.count,
            produced_bytes=delta.counter("sluice_produced_bytes"),
            upload_p50_ms=upload.quantile(0.5) * 1000,
            upload_p99_ms=upload.quantile(0.99) * 1000,
            upload_busy_s=upload.total,
            commit_p50_ms=commit.quantile(0.5) * 1000,
            commit_p99_ms=commit.quantile(0.99) * 1000,
            commits=commit.count,
            find_p50_ms=find.quantile(0.5) * 1000,
            find_p99_ms=find.quantile(0.99) * 1000,
            finds=find.count,
        )


class MetricsWatch:
    """Scrapes before and after a phase: ``with watch.phase() as result: ...``."""

    def __init__(self, scrape: Callable[[], Scrape]) -> None:
        self._scrape = scrape

    def phase(self) -> _Phase:
        return _Phase(self._scrape)


class _Phase:
    def __init__(self, scrape: Callable[[], Scrape]) -> None:
        self._scrape = scrape
        self._before: Scrape = {}
        self.ops: StorageOps | None = None

    def __enter__(self) -> _Phase:
        self._before = self._scrape()
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if exc_type is None:
            self.ops = StorageOps.of(MetricsDelta(self._before, self._scrape()))


def mean_in_flight(ops: StorageOps, seconds: float) -> float:
    """Little's law: summed upload time over the phase's wall time."""
    return ops.upload_busy_s / seconds if seconds > 0 else math.nan
