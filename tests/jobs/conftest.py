"""Fixtures of the jobs tests: one Spark session (start-up costs 7-17 s, so it is shared
by the whole session; Spark's Kafka connector is on its class path) and one cluster per
module: PostgreSQL, SeaweedFS and two brokers started by LocalCluster, exactly as `sluice
cluster up` does."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest

from broker.config import BrokerConfig, load_config
from sluice.cluster import LocalCluster
from tests.fixtures.cluster import running_cluster

BROKER_OPTIONS = {
    "produce.commit.interval.ms": "20",
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "2000",
    "metadata.refresh.interval.ms": "500",
    # Short grace periods so the tests see old objects deleted: merged-away objects after
    # 1.5 s, objects of a crashed job's unfinished commit (orphans) after 4 s.
    "file.delete.delay.ms": "1500",
    "orphan.check.interval.ms": "1000",
    "orphan.grace.ms": "4000",
}
STORAGE_KEYS = ("object.store", "s3.", "coordinator")


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    # Missing parts fail the tests rather than skip them: scripts/test installs them all.
    if shutil.which("java") is None:
        pytest.fail("PySpark needs Java 17+ (scripts/test installs default-jre-headless)")
    from jobs.spark import session
    from sluice.launch.spark import kafka_connector_jars

    # Spark's Kafka source and sink (test_spark_kafka.py) must be on the class path when the
    # JVM starts, and the session is shared: every module's session has them (fetched once
    # with Maven; scripts/test fetches them before the tests).
    # Its producers and consumers are cached per config for 10 and 5 minutes (Spark's
    # defaults); a module's broker is gone long before, and an idle cached producer goes on
    # reconnecting to its port (which a later module's broker may get): close them soon.
    conf = {
        "spark.jars": ",".join(str(p) for p in kafka_connector_jars()),
        "spark.kafka.producer.cache.timeout": "10s",
        "spark.kafka.producer.cache.evictorThreadRunInterval": "5s",
        "spark.kafka.consumer.cache.timeout": "10s",
        "spark.kafka.consumer.cache.evictorThreadRunInterval": "5s",
    }
    s = session("local[2]", app_name="sluice-tests", conf=conf)
    try:
        yield s
    finally:
        s.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    from jobs import runtime

    with running_cluster(
        tmp_path_factory,
        "jobs-cluster",
        2,
        broker_options=BROKER_OPTIONS,
        before_down=runtime.close_all,
    ) as c:
        yield c


def storage_settings(cluster: LocalCluster) -> dict[str, str]:
    """What a job needs of a broker's config: where the objects and the coordinator are."""
    settings = cluster.broker_settings(cluster.brokers[0])
    return {k: v for k, v in settings.items() if k.startswith(STORAGE_KEYS)}


@pytest.fixture(scope="module")
def config(cluster: LocalCluster) -> BrokerConfig:
    return load_config(storage_settings(cluster))
