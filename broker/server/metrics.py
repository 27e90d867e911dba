"""Prometheus metrics of the broker, in one registry so tests can read them."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from typing import TYPE_CHECKING, NamedTuple
from uuid import UUID

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    Metric,
    SummaryMetricFamily,
)
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
        # Kafka's names (as the Prometheus JMX exporter's usual rules spell its MBeans).
        self.topics = BrokerTopicStats()
        r.register(self.topics)
        self.request_times = RequestStats()
        r.register(self.request_times)
        self.followers = _FollowerLagCollector()
        r.register(self.followers)
        # kafka_exporter's names (Kafka's brokers have no group lag metric).
        self.group_lag = _GroupLagCollector()
        r.register(self.group_lag)

    def watch_replicas(
        self,
        under_replicated: Callable[[], int],
        isr_shrinks: Callable[[], int],
        isr_expands: Callable[[], int],
    ) -> None:
        """Kafka's ReplicaManager metrics of this broker, read when scraped (controller
        mode: from its metadata image; without a controller there are no replicas)."""
        self._replicas.sources = (under_replicated, isr_shrinks, isr_expands)

    def watch_replica_counts(
        self, counts: Callable[[], tuple[int, int]], max_lag: Callable[[], int]
    ) -> None:
        """(partitions hosted, partitions led) and the replica fetchers' largest lag."""
        self._replicas.counts = counts
        self._replicas.max_lag = max_lag

    def watch_followers(self, source: Callable[[], Iterable[FollowerLag]]) -> None:
        """The followers of the classic partitions this broker leads, read when scraped."""
        self.followers.source = source

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
      committed in the metadata log since this broker started (rate() for per second);
    - partitioncount / leadercount: partitions with a replica here, and led here (the
      metadata log's placement; diskless partitions included);
    - ``kafka_server_replicafetchermanager_maxlag{clientId="Replica"}``: Kafka's MaxLag
      of the replica fetchers, the largest lag of a classic partition followed here."""

    def __init__(self) -> None:
        self.sources: tuple[Callable[[], int], ...] | None = None
        self.counts: Callable[[], tuple[int, int]] = lambda: (0, 0)
        self.max_lag: Callable[[], int] = lambda: 0

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
        partitions = GaugeMetricFamily(
            "kafka_server_replicamanager_partitioncount",
            "Partitions with a replica on this broker",
        )
        leaders = GaugeMetricFamily(
            "kafka_server_replicamanager_leadercount", "Partitions this broker leads"
        )
        hosted, led = self.counts()
        partitions.add_metric([], hosted)
        leaders.add_metric([], led)
        yield from (partitions, leaders)
        max_lag = GaugeMetricFamily(
            "kafka_server_replicafetchermanager_maxlag",
            "Largest lag, in messages, of the classic partitions this broker follows: the "
            "leader's high watermark minus this replica's log end, after its last fetch",
            labels=["clientId"],
        )
        max_lag.add_metric(["Replica"], self.max_lag())
        yield max_lag


class _TopicCounts:
    __slots__ = ("bytes_in", "bytes_out", "messages_in", "replication_in", "replication_out")

    def __init__(self) -> None:
        self.messages_in = 0
        self.bytes_in = 0
        self.bytes_out = 0
        # All topics only (Kafka has no per-topic replication series).
        self.replication_in = 0
        self.replication_out = 0


class BrokerTopicStats(Collector):
    """Kafka's BrokerTopicMetrics: ``kafka_server_brokertopicmetrics_messagesin_total``,
    ``bytesin_total`` and ``bytesout_total``, per topic (``topic`` label) and for all
    topics (the same name without a topic label, as the JMX exporter turns Kafka's
    all-topics MBean). As Kafka: messages and bytes in are record batches appended for
    producers (diskless: once committed), bytes out the record bytes in Fetch answers to
    consumers; replication (follower fetches and appends) is in none of them, but in
    ``replicationbytesin_total`` / ``replicationbytesout_total`` (all topics only, as Kafka).

    The produce and fetch paths add to plain ints in a dict keyed by what they hold (a
    topic's id, or its name): no lock, no label lookup per request. Names are resolved
    when scraped (``names``: topic id or name -> the topic's current name, None once it
    is deleted: its counts and series go away, as Kafka removes a deleted topic's
    metrics)."""

    def __init__(self) -> None:
        self._by_topic: dict[UUID | str, _TopicCounts] = {}
        self._all = _TopicCounts()
        self.names: Callable[[UUID | str], str | None] = lambda key: None

    def _counts(self, topic: UUID | str) -> _TopicCounts:
        counts = self._by_topic.get(topic)
        if counts is None:
            counts = self._by_topic[topic] = _TopicCounts()
        return counts

    def produced(self, topic: UUID | str, messages: int, size: int) -> None:
        counts = self._counts(topic)
        counts.messages_in += messages
        counts.bytes_in += size
        total = self._all
        total.messages_in += messages
        total.bytes_in += size

    def fetched(self, topic: UUID | str, size: int) -> None:
        self._counts(topic).bytes_out += size
        self._all.bytes_out += size

    def replicated_in(self, size: int) -> None:
        """Record bytes a follower appended from its leader."""
        self._all.replication_in += size

    def replicated_out(self, size: int) -> None:
        """Record bytes a leader sent its followers."""
        self._all.replication_out += size

    def collect(self) -> Iterator[Metric]:
        by_name: dict[str, list[int]] = {}
        for key, counts in list(self._by_topic.items()):
            name = self.names(key)
            if name is None:
                self._by_topic.pop(key, None)
                continue
            sums = by_name.setdefault(name, [0, 0, 0])
            sums[0] += counts.messages_in
            sums[1] += counts.bytes_in
            sums[2] += counts.bytes_out
        total = self._all
        families = (
            ("messagesin", "Records appended for producers", total.messages_in),
            ("bytesin", "Record batch bytes appended for producers", total.bytes_in),
            ("bytesout", "Record bytes sent to consumers in Fetch answers", total.bytes_out),
        )
        for i, (short, doc, all_topics) in enumerate(families):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{short}", doc)
            family.add_sample(family.name + "_total", {}, all_topics)
            for name, sums in sorted(by_name.items()):
                family.add_sample(family.name + "_total", {"topic": name}, sums[i])
            yield family
        for short, doc, value in (
            ("replicationbytesin", "Record bytes appended from leaders", total.replication_in),
            ("replicationbytesout", "Record bytes sent to followers", total.replication_out),
        ):
            family = CounterMetricFamily(f"kafka_server_brokertopicmetrics_{short}", doc)
            family.add_sample(family.name + "_total", {}, value)
            yield family


# Kafka's request histograms keep a reservoir of 1028 samples (Yammer's default); the
# quantiles are those the JMX exporter reads (its "0.$N" spelling: 50thPercentile is 0.50).
_RESERVOIR = 1028
_QUANTILES = (
    ("0.50", 0.50),
    ("0.75", 0.75),
    ("0.95", 0.95),
    ("0.98", 0.98),
    ("0.99", 0.99),
    ("0.999", 0.999),
)


class _ApiTimes:
    __slots__ = ("count", "recent", "sum_ms", "versions")

    def __init__(self) -> None:
        self.count = 0
        self.sum_ms = 0.0
        self.recent: deque[float] = deque(maxlen=_RESERVOIR)
        self.versions: dict[int, int] = {}


class RequestStats(Collector):
    """Kafka's RequestMetrics by the request's API name (``request`` label, as Kafka's
    ``ApiKeys`` name it: Produce, Fetch, Metadata, ...; a Fetch also counts as
    FetchConsumer or FetchFollower, as in Kafka):

    - ``kafka_network_requestmetrics_requests_total{request,version}``: requests answered
      (RequestsPerSec; counted when the answer is written, as Kafka counts at completion);
    - ``kafka_network_requestmetrics_totaltimems{request,quantile}`` with ``_count`` and
      ``_sum``: milliseconds from the request read off the socket to its answer handed to
      the socket (TotalTimeMs). Quantiles over the last 1028 requests of that API (Kafka's
      reservoir size); ``_sum / _count`` is the mean (the JMX exporter has no ``_sum``).

    One dict lookup and a deque append per request; quantiles are computed when scraped."""

    def __init__(self) -> None:
        self._apis: dict[str, _ApiTimes] = {}

    def record(self, name: str, version: int, ms: float) -> None:
        times = self._apis.get(name)
        if times is None:
            times = self._apis[name] = _ApiTimes()
        times.count += 1
        times.sum_ms += ms
        times.recent.append(ms)
        versions = times.versions
        versions[version] = versions.get(version, 0) + 1

    def collect(self) -> Iterator[Metric]:
        requests = CounterMetricFamily(
            "kafka_network_requestmetrics_requests",
            "Requests answered, by API name and version",
            labels=["request", "version"],
        )
        total = SummaryMetricFamily(
            "kafka_network_requestmetrics_totaltimems",
            "Milliseconds from a request read to its answer written, by API name",
            labels=["request"],
        )
        for name, times in sorted(self._apis.items()):
            for version, count in sorted(times.versions.items()):
                requests.add_metric([name, str(version)], count)
            recent = sorted(times.recent)
            if recent:
                last = len(recent) - 1
                for label, q in _QUANTILES:
                    value = recent[min(last, int(q * len(recent)))]
                    total.add_sample(total.name, {"request": name, "quantile": label}, value)
            total.add_metric([name], times.count, times.sum_ms)
        yield requests
        yield total


class FollowerLag(NamedTuple):
    topic: str
    partition: int
    follower: int
    # The leader's log end offset minus the follower's last fetch offset; None before its
    # first fetch from this leader (no sample: unknown is not zero).
    messages: int | None
    seconds: float  # since the follower was last caught up (its fetch reached the log end)


class _FollowerLagCollector(Collector):
    """Per-follower replication lag of the classic partitions this broker leads:
    ``sluice_replica_follower_lag_messages`` and ``sluice_replica_follower_lag_seconds``
    with ``topic``, ``partition`` and ``follower`` labels. One series per follower replica
    of a partition led here: (partitions led) x (replication factor - 1), the same
    cardinality as Kafka's per-partition log gauges; a partition's series go away when
    this broker stops leading it."""

    def __init__(self) -> None:
        self.source: Callable[[], Iterable[FollowerLag]] = tuple

    def collect(self) -> Iterator[Metric]:
        labels = ["topic", "partition", "follower"]
        messages = GaugeMetricFamily(
            "sluice_replica_follower_lag_messages",
            "Classic partitions led here: the leader's log end offset minus the follower's "
            "fetch offset",
            labels=labels,
        )
        seconds = GaugeMetricFamily(
            "sluice_replica_follower_lag_seconds",
            "Classic partitions led here: seconds since the follower was last caught up "
            "with the leader's log end (it leaves the ISR past replica.lag.time.max.ms)",
            labels=labels,
        )
        for lag in self.source():
            values = [lag.topic, str(lag.partition), str(lag.follower)]
            if lag.messages is not None:
                messages.add_metric(values, lag.messages)
            seconds.add_metric(values, lag.seconds)
        yield messages
        yield seconds


class GroupLag(NamedTuple):
    group: str
    topic: str
    partition: int
    offset: int  # the group's committed offset
    lag: int  # the partition's high watermark minus the committed offset


class _GroupLagCollector(Collector):
    """Consumer-group lag by kafka_exporter's names (``broker.groups.lag`` says who reports
    what): one series per committed offset of a (group, partition) this broker reports,
    i.e. the cardinality of the committed offsets themselves, as with the exporter."""

    def __init__(self) -> None:
        self.lags: list[GroupLag] = []

    def collect(self) -> Iterator[Metric]:
        labels = ["consumergroup", "topic", "partition"]
        lag = GaugeMetricFamily(
            "kafka_consumergroup_lag",
            "High watermark minus the group's committed offset, per partition",
            labels=labels,
        )
        current = GaugeMetricFamily(
            "kafka_consumergroup_current_offset",
            "The group's committed offset, per partition",
            labels=labels,
        )
        lag_sum = GaugeMetricFamily(
            "kafka_consumergroup_lag_sum",
            "Lag of a group on a topic, summed over the partitions this broker reports "
            "(sum over brokers for the topic's)",
            labels=["consumergroup", "topic"],
        )
        sums: dict[tuple[str, str], int] = {}
        for g in self.lags:
            values = [g.group, g.topic, str(g.partition)]
            lag.add_metric(values, g.lag)
            current.add_metric(values, g.offset)
            sums[(g.group, g.topic)] = sums.get((g.group, g.topic), 0) + g.lag
        for (group, topic), total in sorted(sums.items()):
            lag_sum.add_metric([group, topic], total)
        yield lag
        yield current
        yield lag_sum


METRICS = _Metrics()
