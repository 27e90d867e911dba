"""Apache Kafka's own command-line tools (the classes behind kafka-*.sh, from Maven Central,
cached as the differential tests cache them) against a three-broker Sluice cluster: what an
operator types, unchanged.

The reassignment test is also replication throttling's end-to-end check: with
``kafka-reassign-partitions --throttle`` a new replica copies a backlog at about the given
rate instead of at once, and joins the ISR soon after the throttle is lifted."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.cluster import LocalCluster
from sluice.launch.kafka import ensure_jars, java_command
from tests.fixtures.cluster import fast_cluster

from ._kafka import wait_until

pytestmark = pytest.mark.e2e

CLASSIC = {"diskless.enable": "false"}


def kafka_tool(cls: str, *args: str, timeout: float = 120) -> str:
    """Run one of Kafka's tool classes; its standard output. A non-zero exit fails the test
    with the tool's own words."""
    cmd = java_command(cls, *args)
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    assert done.returncode == 0, (
        f"{cls} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n{done.stderr[-3000:]}"
    )
    return done.stdout


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    ensure_jars()  # fetched once (Maven) before any broker starts
    with fast_cluster(
        tmp_path_factory, "tools", brokers=3, racks=("az-a", "az-b", "az-c"), controllers=1
    ) as local:
        admin = AdminClient({"bootstrap.servers": local.bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, "three brokers", 60)
        yield local


def isr(admin: AdminClient, topic: str) -> list[int]:
    return sorted(admin.list_topics(topic, timeout=10).topics[topic].partitions[0].isrs)


def test_reassignment_with_a_throttle(cluster: LocalCluster, topic: str, tmp_path: Path) -> None:
    boot = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": boot})
    # kafka-topics.sh cannot create a classic topic: it checks --config names against
    # Kafka's own list and refuses diskless.enable (docs/compatibility-and-limits.md). An
    # AdminClient (or a broker whose default kind is classic) can.
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2]], config=CLASSIC)])[
        topic
    ].result(20)
    wait_until(lambda: isr(admin, topic) == [1, 2], "the topic's two replicas in sync", 20)
    # A backlog of 6 MB for the new replica to copy.
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "linger.ms": 20})
    for i in range(600):
        producer.produce(topic, b"x" * 10_000, key=b"%d" % i, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0

    plan = tmp_path / "plan.json"
    plan.write_text(
        json.dumps(
            {"version": 1, "partitions": [{"topic": topic, "partition": 0, "replicas": [1, 2, 3]}]}
        )
    )
    rate = 100_000  # bytes/s
    out = kafka_tool(
        "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
        "--bootstrap-server", boot, "--reassignment-json-file", str(plan), "--execute",
        "--throttle", str(rate),
    )  # fmt: skip
    assert "throttle" in out.lower(), out
    # The tool set the rates as dynamic broker configs; kafka-configs shows them.
    described = kafka_tool(
        "org.apache.kafka.tools.ConfigCommand",
        "--bootstrap-server", boot, "--describe", "--entity-type", "brokers", "--entity-name", "1",
    )  # fmt: skip
    assert f"leader.replication.throttled.rate={rate}" in described, described
    # Throttled: after several seconds broker 3 still copies (unthrottled it takes < 2 s).
    time.sleep(6)
    assert 3 not in isr(admin, topic), "the new replica caught up despite the throttle"

    # Lifted (kafka-configs, as an operator does when a throttled move takes too long).
    for broker in ("1", "2", "3"):
        kafka_tool(
            "org.apache.kafka.tools.ConfigCommand",
            "--bootstrap-server", boot, "--alter", "--entity-type", "brokers",
            "--entity-name", broker, "--delete-config",
            "leader.replication.throttled.rate,follower.replication.throttled.rate",
        )  # fmt: skip
    wait_until(lambda: isr(admin, topic) == [1, 2, 3], "the new replica in the ISR", 30)
    verified = kafka_tool(
        "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
        "--bootstrap-server", boot, "--reassignment-json-file", str(plan), "--verify",
    )  # fmt: skip
    assert "is completed" in verified, verified
    topic_configs = kafka_tool(
        "org.apache.kafka.tools.ConfigCommand",
        "--bootstrap-server", boot, "--describe", "--entity-type", "topics", "--entity-name", topic,
    )  # fmt: skip
    # --verify clears the throttled-replicas lists it had set.
    assert "throttled.replicas" not in topic_configs, topic_configs


def test_everyday_tools(cluster: LocalCluster, topic: str, tmp_path: Path) -> None:
    boot = cluster.bootstrap
    admin = AdminClient({"bootstrap.servers": boot})
    admin.create_topics([NewTopic(topic, 3, config=CLASSIC)])[topic].result(20)
    producer = Producer({"bootstrap.servers": boot, "acks": "all"})
    for i in range(30):
        producer.produce(topic, b"v%d" % i, partition=i % 3)
    assert producer.flush(30) == 0

    listed = kafka_tool("org.apache.kafka.tools.TopicCommand", "--bootstrap-server", boot, "--list")
    assert topic in listed.split()
    described = kafka_tool(
        "org.apache.kafka.tools.TopicCommand", "--bootstrap-server", boot, "--describe",
        "--topic", topic,
    )  # fmt: skip
    assert f"Topic: {topic}" in described and "PartitionCount: 3" in described, described
    offsets = kafka_tool(
        "org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", boot, "--topic", topic,
    )  # fmt: skip
    assert sorted(offsets.split()) == sorted(f"{topic}:{p}:10" for p in range(3)), offsets

    plan = {"partitions": [{"topic": topic, "partition": 0, "offset": 4}], "version": 1}
    plan_file = tmp_path / "delete-records.json"
    plan_file.write_text(json.dumps(plan))
    deleted = kafka_tool(
        "org.apache.kafka.tools.DeleteRecordsCommand", "--bootstrap-server", boot,
        "--offset-json-file", str(plan_file),
    )  # fmt: skip
    assert "low_watermark: 4" in deleted, deleted
    earliest = kafka_tool(
        "org.apache.kafka.tools.GetOffsetShell", "--bootstrap-server", boot, "--topic", topic,
        "--partitions", "0", "--time", "-2",
    )  # fmt: skip
    assert earliest.split() == [f"{topic}:0:4"], earliest

    log_dirs = kafka_tool(
        "org.apache.kafka.tools.LogDirsCommand", "--bootstrap-server", boot, "--describe",
        "--topic-list", topic,
    )  # fmt: skip
    assert topic in log_dirs, log_dirs
    groups = kafka_tool(
        "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand", "--bootstrap-server", boot,
        "--list",
    )  # fmt: skip
    assert "Error" not in groups, groups
    transactions = kafka_tool(
        "org.apache.kafka.tools.TransactionsCommand", "--bootstrap-server", boot, "list",
    )  # fmt: skip
    assert "TransactionalId" in transactions, transactions
