"""Kafka's metric names as operators' dashboards read them (the Prometheus JMX exporter's
usual rules applied to Kafka's MBeans), rendered from the broker's collectors."""

from __future__ import annotations

import uuid

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from broker.server.metrics import BrokerTopicStats, FollowerLag, RequestStats, _Metrics
from controller.logic_config import ControllerConfig
from controller.metrics import replica_counts
from replication.leader import LeaderState

from .controller.harness import Cluster, uuids


def samples(registry: CollectorRegistry) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of the registry's exposition text, parsed back as Prometheus reads it."""
    text = generate_latest(registry).decode()
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_broker_topic_metrics_per_topic_and_for_all_topics() -> None:
    orders, audit = uuid.uuid4(), uuid.uuid4()
    names = {orders: "orders", audit: "audit", "audit": "audit"}
    stats = BrokerTopicStats()
    stats.names = names.get
    registry = CollectorRegistry()
    registry.register(stats)
    # Produce paths know a topic's id; Fetch by name (v12-) and by id (v13+).
    stats.produced(orders, 3, 300)
    stats.produced(orders, 2, 200)
    stats.produced(audit, 1, 80)
    stats.fetched("audit", 50)
    stats.fetched(audit, 30)
    stats.fetched(orders, 100)
    stats.replicated_out(700)  # to followers: not bytes out
    stats.replicated_in(40)

    got = samples(registry)
    name = "kafka_server_brokertopicmetrics_"
    assert got[(name + "messagesin_total", frozenset({("topic", "orders")}))] == 5
    assert got[(name + "bytesin_total", frozenset({("topic", "orders")}))] == 500
    assert got[(name + "bytesout_total", frozenset({("topic", "audit")}))] == 80  # id + name
    # The all-topics series: the same name without a topic label (Kafka's all-topics MBean).
    assert got[(name + "messagesin_total", frozenset())] == 6
    assert got[(name + "bytesin_total", frozenset())] == 580
    assert got[(name + "bytesout_total", frozenset())] == 180
    # Replication: all topics only, as Kafka.
    assert got[(name + "replicationbytesout_total", frozenset())] == 700
    assert got[(name + "replicationbytesin_total", frozenset())] == 40

    # A deleted topic's series go away; the all-topics counts keep what was counted.
    del names[audit], names["audit"]
    got = samples(registry)
    assert (name + "bytesout_total", frozenset({("topic", "audit")})) not in got
    assert got[(name + "bytesout_total", frozenset())] == 180


def test_request_metrics_per_api_name_and_version() -> None:
    stats = RequestStats()
    registry = CollectorRegistry()
    registry.register(stats)
    for ms in range(1, 101):  # 1..100 ms
        stats.record("Produce", 9, float(ms))
    stats.record("Produce", 11, 1000.0)
    stats.record("Fetch", 16, 5.0)
    stats.record("FetchConsumer", 16, 5.0)

    got = samples(registry)
    requests = "kafka_network_requestmetrics_requests_total"
    assert got[(requests, frozenset({("request", "Produce"), ("version", "9")}))] == 100
    assert got[(requests, frozenset({("request", "Produce"), ("version", "11")}))] == 1
    assert got[(requests, frozenset({("request", "FetchConsumer"), ("version", "16")}))] == 1
    total = "kafka_network_requestmetrics_totaltimems"
    produce = ("request", "Produce")
    assert got[(total + "_count", frozenset({produce}))] == 101
    assert got[(total + "_sum", frozenset({produce}))] == sum(range(1, 101)) + 1000
    # Quantiles by the exporter's spelling of Kafka's percentiles ("0.50", "0.99", ...).
    assert got[(total, frozenset({produce, ("quantile", "0.50")}))] == 51
    assert got[(total, frozenset({produce, ("quantile", "0.99")}))] == 100
    assert got[(total, frozenset({produce, ("quantile", "0.999")}))] == 1000
    assert got[(total, frozenset({("request", "Fetch"), ("quantile", "0.99")}))] == 5


def test_request_quantiles_cover_the_recent_requests_only() -> None:
    stats = RequestStats()
    registry = CollectorRegistry()
    registry.register(stats)
    for _ in range(5000):
        stats.record("Metadata", 12, 900.0)  # an old slow period
    for _ in range(2000):
        stats.record("Metadata", 12, 2.0)
    got = samples(registry)
    total = "kafka_network_requestmetrics_totaltimems"
    assert got[(total, frozenset({("request", "Metadata"), ("quantile", "0.999")}))] == 2
    assert got[(total + "_count", frozenset({("request", "Metadata")}))] == 7000


def test_follower_lag_of_a_leader() -> None:
    # Replicas 1 (leader), 2 and 3; the leader started at t=1000 ms.
    state = LeaderState(1, [1, 2, 3], {1, 2, 3}, 0, 0, now_ms=1000.0, lag_max_ms=30_000)
    state.on_fetch(2, 10, leader_end=10, now_ms=2000.0)  # caught up at 2 s
    state.on_fetch(2, 10, leader_end=25, now_ms=4000.0)  # 15 behind at 4 s
    lag = state.lag(leader_end=25, now_ms=6500.0)
    assert lag[2] == (15, 4.5)  # caught up last at 2 s
    # Follower 3 has not fetched from this leader yet: messages unknown, time since the
    # leader started (it gives its followers replica.lag.time.max.ms from then).
    assert lag[3] == (None, 5.5)
    assert 1 not in lag

    metrics = _Metrics()
    metrics.watch_followers(
        lambda: [FollowerLag("orders", 0, f, m, s) for f, (m, s) in sorted(lag.items())]
    )
    got = samples(metrics.registry)
    two = frozenset({("topic", "orders"), ("partition", "0"), ("follower", "2")})
    three = frozenset({("topic", "orders"), ("partition", "0"), ("follower", "3")})
    assert got[("sluice_replica_follower_lag_messages", two)] == 15
    assert got[("sluice_replica_follower_lag_seconds", two)] == 4.5
    assert ("sluice_replica_follower_lag_messages", three) not in got  # unknown is not 0
    assert got[("sluice_replica_follower_lag_seconds", three)] == 5.5


def test_partition_and_leader_count_of_each_broker() -> None:
    c = Cluster(ControllerConfig(new_uuid=uuids(), classic_topics=True))
    c.start({1: "a", 2: "b", 3: "c"})
    c.create("c", 2, replication_factor=3, configs={"diskless.enable": "false"})
    c.create("d", 3)  # diskless, one replica per rack
    counts = {b: replica_counts(c.image, b) for b in (1, 2, 3)}
    # Every broker hosts a replica of each of the 5 partitions; each partition has one leader.
    assert [hosted for hosted, _led in counts.values()] == [5, 5, 5]
    assert sum(led for _hosted, led in counts.values()) == 5
    assert replica_counts(c.image, 9) == (0, 0)

    metrics = _Metrics()
    metrics.watch_replica_counts(lambda: counts[1], lambda: 7)
    got = samples(metrics.registry)
    assert got[("kafka_server_replicamanager_partitioncount", frozenset())] == 5
    assert got[("kafka_server_replicamanager_leadercount", frozenset())] == counts[1][1]
    maxlag = ("kafka_server_replicafetchermanager_maxlag", frozenset({("clientId", "Replica")}))
    assert got[maxlag] == 7
