"""Kafka's metric names on a running cluster's /metrics, and the shipped Grafana dashboard's
queries against them: three brokers in three racks, one controller, a classic and a
diskless topic, a consumer group, stock clients only."""

from __future__ import annotations

import json
import re
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer
from confluent_kafka.admin import AdminClient, NewTopic
from prometheus_client.parser import text_string_to_metric_families

from sluice.cluster import LocalCluster
from tests.fixtures.cluster import fast_cluster

from ._kafka import wait_until

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "dashboards" / "sluice.json"
RECORDS = 200


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with fast_cluster(
        tmp_path_factory,
        "kafka-metrics",
        brokers=3,
        racks=("az-a", "az-b", "az-c"),
        broker_options={"consumer.lag.metrics.interval.ms": "500"},
        controllers=1,
    ) as c:
        yield c


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def scrape(cluster: LocalCluster) -> list[dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    """Every broker's and controller's samples."""
    out = []
    for b in cluster.brokers:
        status, text = b.http_get("/metrics")
        assert status == 200
        out.append(samples(text))
    for c in cluster.controllers:
        request = urllib.request.Request(
            c.url + "/metrics", headers={"Authorization": f"Bearer {cluster.secret}"}
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            out.append(samples(response.read().decode()))
    return out


def total(scraped: list[dict], name: str, **labels: str) -> float:
    want = frozenset(labels.items())
    return sum(v for s in scraped for (n, ls), v in s.items() if n == name and ls == want)


def test_kafka_names_on_a_running_cluster_and_the_dashboard_queries(
    cluster: LocalCluster,
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topics = [
        NewTopic("metrics-classic", 1, 3, config={"diskless.enable": "false"}),
        NewTopic("metrics-diskless", 1),
    ]
    for future in admin.create_topics(topics).values():
        future.result(20)
    producer = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for topic in ("metrics-classic", "metrics-diskless"):
        for i in range(RECORDS):
            producer.produce(topic, value=b"v%d" % i)
    assert producer.flush(30) == 0
    # A group that reads half of each topic and commits there.
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": "metrics-group",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe(["metrics-classic", "metrics-diskless"])
    seen = {"metrics-classic": 0, "metrics-diskless": 0}
    deadline = time.monotonic() + 60
    try:
        while min(seen.values()) < RECORDS // 2:
            assert time.monotonic() < deadline, f"consumed only {seen}"
            message = consumer.poll(1.0)
            if message is None or message.error():
                continue
            topic = message.topic()
            if seen[topic] < RECORDS // 2:
                seen[topic] += 1
                if seen[topic] == RECORDS // 2:
                    consumer.commit(message=message, asynchronous=False)
    finally:
        consumer.close()

    def lag_reported() -> bool:
        scraped = scrape(cluster)
        return all(
            total(
                scraped,
                "kafka_consumergroup_lag",
                consumergroup="metrics-group",
                topic=topic,
                partition="0",
            )
            == RECORDS // 2
            for topic in seen
        )

    wait_until(lag_reported, "the group's lag on both topics", 20)
    scraped = scrape(cluster)

    assert total(scraped, "kafka_controller_kafkacontroller_activecontrollercount") == 1
    for topic in seen:
        assert (
            total(scraped, "kafka_server_brokertopicmetrics_messagesin_total", topic=topic)
            == RECORDS
        )
        assert total(scraped, "kafka_server_brokertopicmetrics_bytesout_total", topic=topic) > 0
    assert total(scraped, "kafka_server_brokertopicmetrics_messagesin_total") >= 2 * RECORDS
    produce_requests = sum(
        v
        for s in scraped
        for (n, ls), v in s.items()
        if n == "kafka_network_requestmetrics_requests_total" and ("request", "Produce") in ls
    )
    assert produce_requests >= 1
    for request in ("Produce", "FetchConsumer", "FetchFollower", "Metadata"):
        assert any(
            (n, ls)
            == (
                "kafka_network_requestmetrics_totaltimems",
                frozenset({("request", request), ("quantile", "0.99")}),
            )
            for s in scraped
            for (n, ls) in s
        ), request
    # Both followers of the classic partition are reported by its leader, caught up.
    follower_lags = [
        v
        for s in scraped
        for (n, ls), v in s.items()
        if n == "sluice_replica_follower_lag_messages" and ("topic", "metrics-classic") in ls
    ]
    assert follower_lags == [0, 0]

    # Every metric a dashboard query names is a series some broker or controller serves.
    served = {name for s in scraped for (name, _labels) in s}
    dashboard = json.loads(DASHBOARD.read_text())
    missing = set()
    for panel in dashboard["panels"]:
        for target in panel.get("targets", []):
            for name in re.findall(r"\b(?:sluice|kafka)_\w+", target["expr"]):
                if name not in served:
                    missing.add((panel["title"], name))
    # Series that only exist after events this test does not cause.
    eventless = {
        "kafka_server_diskless_transformer_fallback_total",
        "kafka_server_diskless_transformer_offline_replicas_routed_around_total",
        "sluice_closed_connections_total",
        "sluice_request_errors_total",
        "sluice_controller_topic_migration_state",
    }
    assert {name for _title, name in missing} <= eventless, sorted(missing)
