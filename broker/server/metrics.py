"""Prometheus metrics of the broker, in one registry so tests can read them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from storage.objects.block_cache import BlockCache

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
        # Metadata transformer (seeds 000/001): per Metadata request, whether the client
        # named an AZ that has a live broker (hit), named one without (miss) or none.
        self.client_az_requests = Counter(
            "sluice_client_az_requests",
            "Metadata requests by client AZ match: hit, miss (no broker there), unaware",
            ["result"],
            registry=r,
        )
        # Seed 000's transformer metrics under their Prometheus spelling (counters: the
        # samples end in _total).
        self.transformer_fallbacks = Counter(
            "kafka_server_diskless_transformer_fallback",
            "Diskless partition answers chosen by hash among brokers that are not alive "
            "replicas: in the client's AZ when none of its replicas is alive there, or "
            "among all alive brokers when every replica is offline",
            registry=r,
        )
        self.transformer_routed_around = Counter(
            "kafka_server_diskless_transformer_offline_replicas_routed_around",
            "Diskless partition answers that avoided an offline replica",
            registry=r,
        )
        # Cross-AZ cost: bytes in each direction by the client's AZ (from client.id, or
        # Fetch's rack; "none" when unknown, "other" when it names no broker rack) and
        # this broker's rack. Sum over brokers where client_az != broker_rack.
        self.client_bytes = Counter(
            "sluice_client_bytes",
            "Record bytes produced/fetched by client AZ and broker rack",
            ["direction", "client_az", "broker_rack"],
            registry=r,
        )
        self.bad_frames = Counter(
            "sluice_closed_connections",
            "Connections closed for malformed input",
            ["reason"],
            registry=r,
        )

        # The fetch cache's own counts, read when scraped (the cache is storage code and
        # knows nothing of Prometheus). Gauges of monotonic counts: rate() applies.
        self.cache_hit_blocks = Gauge(
            "sluice_fetch_cache_hit_blocks",
            "Blocks served from the fetch cache since start",
            registry=r,
        )
        self.cache_miss_blocks = Gauge(
            "sluice_fetch_cache_miss_blocks",
            "Blocks loaded from the object store since start",
            registry=r,
        )
        self.cache_bytes = Gauge(
            "sluice_fetch_cache_bytes", "Bytes held by the fetch cache", registry=r
        )
        self._replicas = _ReplicaManagerCollector()
        r.register(self._replicas)

    def watch_replicas(
        self,
        under_replicated: Callable[[], int],
        isr_shrinks: Callable[[], int],
        isr_expands: Callable[[], int],
    ) -> None:
        """Kafka's ReplicaManager metrics of this broker, read when scraped (controller
        mode: from its metadata image; without a controller there are no replicas)."""
        self._replicas.sources = (under_replicated, isr_shrinks, isr_expands)

    def watch_cache(self, cache: BlockCache) -> None:
        self.cache_hit_blocks.set_function(lambda: cache.hits)
        self.cache_miss_blocks.set_function(lambda: cache.misses)
        self.cache_bytes.set_function(lambda: cache.current_bytes)


class _ReplicaManagerCollector(Collector):
    """``kafka_server_replicamanager_*`` as the Prometheus JMX exporter spells Kafka's
    ReplicaManager MBeans. Each broker reports the partitions it leads, as Kafka does, so
    a cluster's count is the sum over brokers:

    - underreplicatedpartitions: classic, ISR smaller than the replica set; diskless, a
      replica offline (informational: the transformer routes around it). A diskless
      partition whose own leader is the offline broker is reported by no broker (the
      controller's ``sluice_controller_under_replicated_partitions`` counts it);
    - isrshrinks_total / isrexpands_total: ISR changes of the partitions it leads, as
      committed in the metadata log since this broker started (rate() for per second)."""

    def __init__(self) -> None:
        self.sources: tuple[Callable[[], int], ...] | None = None

    def collect(self) -> Iterator[Metric]:
        urp = GaugeMetricFamily(
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Partitions led by this broker that are under-replicated",
        )
        shrinks = CounterMetricFamily(
            "kafka_server_replicamanager_isrshrinks",
            "ISR shrinks of the partitions this broker leads",
        )
        expands = CounterMetricFamily(
            "kafka_server_replicamanager_isrexpands",
            "ISR expands of the partitions this broker leads",
        )
        families = (urp, shrinks, expands)
        if self.sources is None:
            for family in families:
                family.add_metric([], 0)
        else:
            for family, source in zip(families, self.sources, strict=True):
                family.add_metric([], source())
        yield from (urp, shrinks, expands)


METRICS = _Metrics()
