"""Prometheus metrics of the broker, in one registry so tests can read them."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)


class _Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("sluice_requests", "Requests handled, by API", ["api"], registry=r)
        self.request_errors = Counter(
            "sluice_request_errors", "Requests that failed inside a handler", ["api"], registry=r
        )
        self.upload_seconds = Histogram(
            "sluice_upload_seconds",
            "Object upload time per flush",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.commit_seconds = Histogram(
            "sluice_commit_seconds",
            "Coordinator commit time per flush",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.find_batches_seconds = Histogram(
            "sluice_find_batches_seconds",
            "Coordinator find_batches time per fetch",
            buckets=_LATENCY_BUCKETS,
            registry=r,
        )
        self.produced_bytes = Counter(
            "sluice_produced_bytes", "Record batch bytes committed", registry=r
        )
        self.fetched_bytes = Counter(
            "sluice_fetched_bytes", "Record batch bytes sent to consumers", registry=r
        )
        self.bad_frames = Counter(
            "sluice_closed_connections",
            "Connections closed for malformed input",
            ["reason"],
            registry=r,
        )


METRICS = _Metrics()
