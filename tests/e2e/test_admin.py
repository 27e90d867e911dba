"""Admin and offset APIs: ListOffsets, DeleteTopics, CreatePartitions, DescribeConfigs,
auto-create. Driven through confluent-kafka (and kafka-python where it adds a wire version)."""

from __future__ import annotations

import time

import pytest
from confluent_kafka import KafkaError, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
)

from ._kafka import (
    Msg,
    confluent_consume,
    confluent_consumer,
    confluent_create_topic,
    confluent_produce,
    confluent_topic_partitions,
)
from .conftest import BrokerFactory, SluiceBroker

pytestmark = pytest.mark.e2e


def wait_for(predicate, timeout: float = 10.0, what: str = "condition") -> None:  # type: ignore[no-untyped-def]
    # Topic deletion and partition changes are asynchronous in Kafka's own contract (clients
    # are told to expect propagation delay), so give metadata a short while to catch up.
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def test_watermarks_earliest_latest(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap, topic, partitions=2)
    consumer = confluent_consumer(broker.bootstrap)
    try:
        tp0, tp1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        assert consumer.get_watermark_offsets(tp0, timeout=10, cached=False) == (0, 0)
        confluent_produce(broker.bootstrap, topic, [Msg(b"k", b"v")] * 25, partition=0)
        confluent_produce(broker.bootstrap, topic, [Msg(b"k", b"v")] * 3, partition=1)
        assert consumer.get_watermark_offsets(tp0, timeout=10, cached=False) == (0, 25)
        assert consumer.get_watermark_offsets(tp1, timeout=10, cached=False) == (0, 3)
    finally:
        consumer.close()


def test_offsets_for_times(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap, topic)
    base = 1_700_000_000_000
    ts = [base + 1000 * i for i in range(10)]
    # Several small batches so the lookup has to pick the right batch, then the right record.
    confluent_produce(
        broker.bootstrap,
        topic,
        [Msg(b"k", f"v{i}".encode()) for i in range(10)],
        timestamps=ts,
        **{"batch.size": 200, "linger.ms": 0},
    )
    consumer = confluent_consumer(broker.bootstrap)
    try:
        queries = {
            "before all": (base - 5000, 0),
            "exact first": (base, 0),
            "between 3 and 4": (base + 3500, 4),
            "exact 7": (base + 7000, 7),
            "exact last": (base + 9000, 9),
            # Past the last timestamp Kafka answers offset -1 (no such record).
            "after all": (base + 60_000, -1),
        }
        for what, (t, want) in queries.items():
            (res,) = consumer.offsets_for_times([TopicPartition(topic, 0, t)], timeout=10)
            assert res.error is None, (what, res.error)
            assert res.offset == want, f"{what}: offset {res.offset}, want {want}"
    finally:
        consumer.close()


def test_delete_topic(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap, topic, partitions=2)
    confluent_produce(broker.bootstrap, topic, [Msg(b"k", b"v")] * 5)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic], operation_timeout=15)[topic].result(timeout=20)
    wait_for(
        lambda: topic not in admin.list_topics(timeout=10).topics,
        what=f"{topic} to disappear from metadata",
    )
    # Deleting it again must say it does not exist, not succeed silently.
    with pytest.raises(Exception) as exc:
        admin.delete_topics([topic], operation_timeout=15)[topic].result(timeout=20)
    assert exc.value.args[0].code() == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_delete_then_recreate_starts_empty(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap, topic)
    confluent_produce(broker.bootstrap, topic, [Msg(b"old", b"data")] * 4)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.delete_topics([topic], operation_timeout=15)[topic].result(timeout=20)
    wait_for(lambda: topic not in admin.list_topics(timeout=10).topics, what="deletion")
    confluent_create_topic(broker.bootstrap, topic)
    confluent_produce(broker.bootstrap, topic, [Msg(b"new", b"data")])
    got = confluent_consume(broker.bootstrap, topic, expected=1)
    # A re-created topic is a new topic (new topic ID): old records must not resurface.
    assert [(g.offset, g.key) for g in got] == [(0, b"new")]


def test_create_partitions(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap, topic, partitions=1)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_partitions([NewPartitions(topic, 3)], operation_timeout=15)[topic].result(20)
    wait_for(
        lambda: confluent_topic_partitions(broker.bootstrap, topic) == 3,
        what="3 partitions in metadata",
    )
    # The new partitions take writes and serve reads like the original one.
    producer = Producer(
        {"bootstrap.servers": broker.bootstrap, "topic.metadata.refresh.interval.ms": 500}
    )
    errs: list[object] = []
    for p in range(3):
        producer.produce(
            topic, f"p{p}".encode(), partition=p, on_delivery=lambda e, m: errs.append(e)
        )
    assert producer.flush(20) == 0
    assert errs == [None, None, None]
    got = confluent_consume(broker.bootstrap, topic, partitions=[0, 1, 2], expected=3)
    assert sorted((g.partition, g.offset, g.value) for g in got) == [
        (0, 0, b"p0"),
        (1, 0, b"p1"),
        (2, 0, b"p2"),
    ]
    # Shrinking is not allowed in Kafka.
    with pytest.raises(Exception) as exc:
        admin.create_partitions([NewPartitions(topic, 2)], operation_timeout=15)[topic].result(20)
    assert exc.value.args[0].code() == KafkaError.INVALID_PARTITIONS


def test_describe_configs(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(
        broker.bootstrap, topic, config={"retention.ms": "3600000", "cleanup.policy": "delete"}
    )
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([res])[res].result(timeout=20)
    assert configs["retention.ms"].value == "3600000"
    assert not configs["retention.ms"].is_default
    assert configs["cleanup.policy"].value == "delete"
    # Unset configs are still listed, with the broker default (tools render the whole table).
    assert "max.message.bytes" in configs, sorted(configs)
    assert configs["max.message.bytes"].value is not None


@pytest.mark.filterwarnings("ignore:alter_configs has been deprecated:DeprecationWarning")
@pytest.mark.parametrize("kind", ["classic", "diskless"])
def test_legacy_alter_configs_replaces_the_set(broker: SluiceBroker, topic: str, kind: str) -> None:
    # AlterConfigs (API 33) replaces a topic's overrides: the keys it leaves out go back to
    # their defaults, as on Kafka. Dropping unclean.leader.election.enable once made the
    # controller answer 500, and the client REQUEST_TIMED_OUT. diskless.enable (the topic's
    # kind, read-only) stays: leaving it out must not start a migration.
    config = {"unclean.leader.election.enable": "true", "retention.ms": "3600000"}
    if kind == "classic":
        config["diskless.enable"] = "false"
    confluent_create_topic(broker.bootstrap, topic, config=config)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"retention.ms": "60000"})
    admin.alter_configs([res])[res].result(timeout=20)
    configs = admin.describe_configs([res])[res].result(timeout=20)
    assert configs["retention.ms"].value == "60000"
    assert configs["unclean.leader.election.enable"].value == "false"
    assert configs["unclean.leader.election.enable"].is_default
    assert configs["diskless.enable"].value == ("false" if kind == "classic" else "true")
    assert "diskless.migration.state" not in configs, configs["diskless.migration.state"]
    # A bad value is an error code for that resource, not a timeout.
    bad = ConfigResource(ConfigResource.Type.TOPIC, topic, set_config={"retention.ms": "x"})
    with pytest.raises(KafkaException) as refused:
        admin.alter_configs([bad])[bad].result(timeout=20)
    assert refused.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_odd_config_alterations_get_error_codes(broker: SluiceBroker, topic: str) -> None:
    # Requests a client may legally send: each resource gets Kafka's error code (the
    # broker fixture also fails the test on a logged traceback), never a timeout.
    confluent_create_topic(broker.bootstrap, topic)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    op = AlterConfigOpType

    def incremental(name: str, kind: AlterConfigOpType, value: str | None = None) -> int:
        entry = ConfigEntry(name, value, incremental_operation=kind)
        res = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
        try:
            admin.incremental_alter_configs([res])[res].result(timeout=20)
        except KafkaException as exc:
            return int(exc.args[0].code())
        return 0

    assert incremental("unclean.leader.election.enable", op.DELETE) == 0
    assert incremental("remote.storage.enable", op.DELETE) == 0
    assert incremental("diskless.enable", op.DELETE) == 0
    assert incremental("nope", op.DELETE) == KafkaError.INVALID_CONFIG
    assert incremental("retention.ms", op.SUBTRACT, "1") == KafkaError.INVALID_CONFIG
    assert incremental("cleanup.policy", op.APPEND, "bogus") == KafkaError.INVALID_CONFIG
    assert incremental("retention.ms", op.SET, "") == KafkaError.INVALID_CONFIG
    assert incremental("min.compaction.lag.ms", op.SET, "9" * 20) == KafkaError.INVALID_CONFIG
    assert "diskless.migration.state" not in admin.describe_configs(
        [ConfigResource(ConfigResource.Type.TOPIC, topic)]
    )[ConfigResource(ConfigResource.Type.TOPIC, topic)].result(timeout=20)


def test_describe_broker_configs(broker: SluiceBroker) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    res = ConfigResource(ConfigResource.Type.BROKER, "1")
    configs = admin.describe_configs([res])[res].result(timeout=20)
    assert configs, "broker 1 described with no configs"


def test_auto_create_on_produce(broker: SluiceBroker, topic: str) -> None:
    # Default broker: auto.create.topics.enable defaults to true, as in Kafka.
    assert confluent_topic_partitions(broker.bootstrap, topic) is None
    delivered = confluent_produce(broker.bootstrap, topic, [Msg(b"k", b"v")], partition=None)
    assert delivered[0][1] == 0
    assert confluent_topic_partitions(broker.bootstrap, topic) is not None
    got = confluent_consume(broker.bootstrap, topic, partitions=[delivered[0][0]], expected=1)
    assert [(g.key, g.value) for g in got] == [(b"k", b"v")]


def test_auto_create_uses_num_partitions(broker_factory: BrokerFactory, topic: str) -> None:
    b = broker_factory(**{"num.partitions": "3"})
    confluent_produce(b.bootstrap, topic, [Msg(b"k", b"v")], partition=None)
    assert confluent_topic_partitions(b.bootstrap, topic) == 3


def test_auto_create_disabled(broker_factory: BrokerFactory, topic: str) -> None:
    b = broker_factory(**{"auto.create.topics.enable": "false"})
    producer = Producer({"bootstrap.servers": b.bootstrap, "message.timeout.ms": 3000})
    errs: list[KafkaError] = []
    producer.produce(topic, b"v", on_delivery=lambda e, m: errs.append(e))
    producer.flush(15)
    assert len(errs) == 1 and errs[0] is not None, errs
    assert errs[0].code() in (
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._MSG_TIMED_OUT,
    ), errs[0]
    assert confluent_topic_partitions(b.bootstrap, topic) is None


def test_kafka_python_delete_topics(broker: SluiceBroker, topic: str) -> None:
    from kafka.admin import KafkaAdminClient

    confluent_create_topic(broker.bootstrap, topic)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.delete_topics([topic], timeout_ms=15_000)
        wait_for(lambda: topic not in admin.list_topics(), what="deletion via kafka-python")
    finally:
        admin.close()
