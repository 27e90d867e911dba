"""What stock admin tooling needs beyond produce/consume: every Kafka topic config (and
compression.type applied), AlterConfigs (API 33), DescribeTopicPartitions (API 75),
authorized-operation bit sets and the controller id. Driven through confluent-kafka and
kafka-python on the shared broker.
"""

from __future__ import annotations

import asyncio

import pytest
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import (
    AclOperation,
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewTopic,
)
from kafka import KafkaConsumer
from kafka.admin import ConfigResource as KpResource
from kafka.admin import KafkaAdminClient
from kafka.admin import NewTopic as KpNewTopic
from kafka.protocol.admin import DescribeConfigsRequest

from ._kafka import confluent_create_topic, wait_until
from .conftest import SluiceBroker

pytestmark = pytest.mark.e2e

# Every topic config of Apache Kafka 4.x (TopicConfig + the throttled-replica quota keys),
# plus 3.x's message.timestamp.difference.max.ms, each with a valid value that is NOT
# Kafka's default, so reading it back proves it was stored.
NON_DEFAULT = {
    "cleanup.policy": "compact,delete",
    "compression.type": "zstd",
    "compression.gzip.level": "5",
    "compression.lz4.level": "12",
    "compression.zstd.level": "10",
    "delete.retention.ms": "3600000",
    "errors.deadletterqueue.group.enable": "true",
    "file.delete.delay.ms": "30000",
    "flush.messages": "1000",
    "flush.ms": "1000",
    "follower.replication.throttled.replicas": "0:1",
    "index.interval.bytes": "8192",
    "leader.replication.throttled.replicas": "*",
    "local.retention.bytes": "1000000",
    "local.retention.ms": "60000",
    "max.compaction.lag.ms": "86400000",
    "max.decompressed.message.bytes": "100000000",
    "max.message.bytes": "2000000",
    "message.timestamp.after.max.ms": "7200000",
    "message.timestamp.before.max.ms": "86400000",
    "message.timestamp.difference.max.ms": "86400000",
    "message.timestamp.type": "LogAppendTime",
    "min.cleanable.dirty.ratio": "0.25",
    "min.compaction.lag.ms": "1000",
    "min.insync.replicas": "2",
    "preallocate": "true",
    "remote.copy.lag.bytes": "1000",
    "remote.copy.lag.ms": "1000",
    "remote.log.copy.disable": "true",
    "remote.log.delete.on.disable": "true",
    "remote.storage.enable": "false",
    "retention.bytes": "1073741824",
    "retention.ms": "86400000",
    "segment.bytes": "536870912",
    "segment.index.bytes": "5242880",
    "segment.jitter.ms": "1000",
    "segment.ms": "3600000",
    "unclean.leader.election.enable": "true",
}

# Kafka 4.x's defaults, as its DescribeConfigs shows them for a topic without overrides.
KAFKA_DEFAULTS = {
    "cleanup.policy": "delete",
    "compression.type": "producer",
    "max.decompressed.message.bytes": "2147483639",
    "max.message.bytes": "1048588",
    "message.timestamp.after.max.ms": "3600000",
    "message.timestamp.before.max.ms": "9223372036854775807",
    "min.insync.replicas": "1",
    "remote.copy.lag.bytes": "-1",
    "retention.bytes": "-1",
    "retention.ms": "604800000",
    "segment.bytes": "1073741824",
    "segment.ms": "604800000",
    "unclean.leader.election.enable": "false",
}

# AclOperation codes per resource type when no authorizer is configured (KIP-430).
TOPIC_OPS = {"READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE"} | {
    "DESCRIBE_CONFIGS",
    "ALTER_CONFIGS",
}
CLUSTER_OPS = {"CREATE", "CLUSTER_ACTION", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"} | {
    "IDEMPOTENT_WRITE",
    "ALTER",
    "DESCRIBE",
}
GROUP_OPS = {"READ", "DESCRIBE", "DELETE", "DESCRIBE_CONFIGS", "ALTER_CONFIGS"}


def _describe(admin: AdminClient, topic: str) -> dict[str, ConfigEntry]:
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return admin.describe_configs([res])[res].result(timeout=20)


def _create_error(admin: AdminClient, topic: str, config: dict[str, str]) -> KafkaError:
    with pytest.raises(Exception) as exc:
        admin.create_topics([NewTopic(topic, 1, config=config)])[topic].result(20)
    return exc.value.args[0]


def test_every_kafka_topic_config(broker: SluiceBroker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, 1, config=NON_DEFAULT)])[topic].result(20)
    configs = _describe(admin, topic)
    for name, value in NON_DEFAULT.items():
        assert configs[name].value == value, name
        assert configs[name].source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, name

    plain = topic + "-defaults"
    confluent_create_topic(broker.bootstrap, plain)
    configs = _describe(admin, plain)
    # 3.x's key is not one of Kafka 4.4's: listed only where a topic sets it.
    legacy = "message.timestamp.difference.max.ms"
    assert legacy not in configs
    assert set(NON_DEFAULT) - {legacy} <= set(configs), set(NON_DEFAULT) - set(configs)
    for name, value in KAFKA_DEFAULTS.items():
        assert configs[name].value == value, name
        assert configs[name].source == ConfigSource.DEFAULT_CONFIG.value, name
        assert configs[name].is_default, name
    # The broker config a default comes from, as Kafka names it; as Kafka, none when the
    # key's primary broker config is unset (log.retention.ms: not log.retention.hours).
    synonyms = configs["max.message.bytes"].synonyms
    assert synonyms["message.max.bytes"].value == "1048588", synonyms
    assert not configs["retention.ms"].synonyms, configs["retention.ms"].synonyms

    # A bad value or an unknown name is INVALID_CONFIG, as in Kafka; nothing is created.
    for bad in (
        {"segment.bytes": "1000"},  # below Kafka's 1 MiB minimum
        {"min.insync.replicas": "0"},
        {"compression.type": "brotli"},
        {"unclean.leader.election.enable": "maybe"},
        {"retention.ms": "a week"},
        {"min.cleanable.dirty.ratio": "1.5"},
        {"max.message.bytes": "3000000000"},  # past INT
        {"no.such.config": "1"},
        {"remote.storage.enable": "true"},  # diskless topics have no tiered copy
    ):
        error = _create_error(admin, topic + "-bad", bad)
        assert error.code() == KafkaError.INVALID_CONFIG, (bad, error)
    assert topic + "-bad" not in admin.list_topics(timeout=10).topics

    # IncrementalAlterConfigs: SET any key; APPEND/SUBTRACT on list keys only.
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        plain,
        incremental_configs=[
            ConfigEntry("segment.ms", "60000", incremental_operation=AlterConfigOpType.SET),
            ConfigEntry(
                "cleanup.policy", "compact", incremental_operation=AlterConfigOpType.APPEND
            ),
        ],
    )
    admin.incremental_alter_configs([res])[res].result(20)
    configs = _describe(admin, plain)
    assert configs["segment.ms"].value == "60000"
    assert configs["cleanup.policy"].value == "delete,compact"
    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        plain,
        incremental_configs=[
            ConfigEntry("retention.ms", "1", incremental_operation=AlterConfigOpType.APPEND)
        ],
    )
    with pytest.raises(Exception) as exc:
        admin.incremental_alter_configs([res])[res].result(20)
    assert exc.value.args[0].code() == KafkaError.INVALID_CONFIG


def test_alter_configs_api33_replaces_all(broker: SluiceBroker, topic: str) -> None:
    # kafka-python with incremental=False speaks only AlterConfigs (API 33), as older tools
    # and a popular Node.js client do.
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        admin.create_topics(
            [KpNewTopic(topic, 1, 1, topic_configs={"retention.ms": "1000", "segment.ms": "5000"})]
        )
        resource = KpResource("TOPIC", topic, {"min.insync.replicas": "2"})
        result = admin.alter_configs([resource], incremental=False)
        assert result == {"topic": {topic: "OK"}}

        def overrides() -> dict[str, str]:
            described = admin.describe_configs([KpResource("TOPIC", topic)])
            return {k: v["value"] for k, v in described["topic"][topic].items()}

        # The client re-sent the other overrides (it knows API 33 replaces all of them).
        assert overrides() == {
            "retention.ms": "1000",
            "segment.ms": "5000",
            "min.insync.replicas": "2",
        }
        # A partial reset over API 33 sends the keys to keep: the broker drops the others.
        admin.reset_configs([KpResource("TOPIC", topic, ["segment.ms"])], incremental=False)
        assert overrides() == {"retention.ms": "1000", "min.insync.replicas": "2"}

        check = KpResource("TOPIC", topic, {"segment.bytes": "2097152"})
        assert admin.alter_configs([check], validate_only=True, incremental=False) == {
            "topic": {topic: "OK"}
        }
        assert "segment.bytes" not in overrides()
        bad = KpResource("TOPIC", topic, {"segment.bytes": "1"})
        result = admin.alter_configs([bad], incremental=False)
        assert "InvalidConfigurationError" in result["topic"][topic], result

        # Broker configs are static: an empty replacement succeeds, a key is refused.
        empty = KpResource("BROKER", "1", {})
        assert admin.alter_configs([empty], incremental=False, raise_on_unknown=False) == {
            "broker": {"1": "OK"}
        }
        key = KpResource("BROKER", "1", {"log.retention.ms": "1"})
        result = admin.alter_configs([key], incremental=False, raise_on_unknown=False)
        assert "InvalidRequestError" in result["broker"]["1"], result

        # DescribeConfigs v3+: types and the documentation field, which tells which keys
        # mean nothing for a diskless topic.
        request = DescribeConfigsRequest(
            resources=[(2, topic, ["segment.bytes", "retention.ms"])],
            include_synonyms=True,
            include_documentation=True,
        )
        response = admin._manager.run(admin._manager.send, request)
        (described,) = response.results
        docs = {c.name: (c.config_type, c.documentation) for c in described.configs}
        assert docs["segment.bytes"][0] == 3 and "No effect on diskless" in docs["segment.bytes"][1]
        assert docs["retention.ms"][0] == 5 and "No effect" not in docs["retention.ms"][1]
    finally:
        admin.close()


def test_describe_topic_partitions_pages(broker: SluiceBroker, topic: str) -> None:
    a, b, missing = topic + "-a", topic + "-b", topic + "-c-missing"  # answered in name order
    confluent_create_topic(broker.bootstrap, a, partitions=3)
    confluent_create_topic(broker.bootstrap, b, partitions=2)
    admin = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        first = admin.describe_topic_partitions([b, a, missing], 4)
        assert [t["name"] for t in first["topics"]] == [a, b]
        assert [len(t["partitions"]) for t in first["topics"]] == [3, 1]
        assert first["next_cursor"] == {"topic_name": b, "partition_index": 1}
        rest = admin.describe_topic_partitions([b, a, missing], 4, cursor=first["next_cursor"])
        assert rest["next_cursor"] is None
        assert [t["name"] for t in rest["topics"]] == [b, missing]
        assert [p["partition_index"] for p in rest["topics"][0]["partitions"]] == [1]
        assert rest["topics"][1]["error_code"] == 3  # UNKNOWN_TOPIC_OR_PARTITION
        topic_a = first["topics"][0]
        assert all(p["leader_id"] == 1 and p["replica_nodes"] == [1] for p in topic_a["partitions"])
        ops = {
            AclOperation(bit).name
            for bit in range(32)
            if topic_a["topic_authorized_operations"] >> bit & 1
        }
        assert ops == TOPIC_OPS
    finally:
        admin.close()


def test_authorized_operations_and_controller(broker: SluiceBroker, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    cluster = admin.describe_cluster(include_authorized_operations=True).result(20)
    assert {op.name for op in cluster.authorized_operations} == CLUSTER_OPS
    assert cluster.controller is not None
    assert cluster.controller.id in {n.id for n in cluster.nodes}

    confluent_create_topic(broker.bootstrap, topic)
    described = admin.describe_topics(
        _topic_collection([topic]), include_authorized_operations=True
    )[topic].result(20)
    assert {op.name for op in described.authorized_operations} == TOPIC_OPS

    group = "g-" + topic
    consumer = KafkaConsumer(
        bootstrap_servers=broker.bootstrap, group_id=group, auto_offset_reset="earliest"
    )
    try:
        consumer.subscribe([topic])
        wait_until(lambda: bool(consumer.poll(200) is not None and consumer.assignment()), "join")
        (result,) = admin.describe_consumer_groups(
            [group], include_authorized_operations=True
        ).values()
        ops = result.result(20).authorized_operations
        assert {op.name for op in ops} == GROUP_OPS
    finally:
        consumer.close()


def _topic_collection(names: list[str]):  # type: ignore[no-untyped-def]
    from confluent_kafka import TopicCollection

    return TopicCollection(names)


def _stored_codecs(bootstrap: str, topic: str) -> list[tuple[int, list[bytes]]]:
    """(codec, values) of each stored batch, read with aiokafka's lower layer (its Fetch
    and batch reader): stock consumers decompress without saying what the broker sent."""
    from aiokafka.client import AIOKafkaClient
    from aiokafka.protocol.fetch import FetchRequest
    from aiokafka.record.memory_records import MemoryRecords

    async def run() -> list[tuple[int, list[bytes]]]:
        client = AIOKafkaClient(bootstrap_servers=bootstrap)
        await client.bootstrap()
        try:
            node = 1  # `sluice dev` is one broker
            request = FetchRequest(
                max_wait_time=100,
                min_bytes=1,
                max_bytes=8 << 20,
                isolation_level=0,
                topics=[(topic, [(0, 0, 8 << 20)])],
            )
            response = await client.send(node, request)
        finally:
            await client.close()
        part = response.topics[0][1][0]
        records = MemoryRecords(part[-1] or b"")
        out = []
        while (batch := records.next_batch()) is not None:
            out.append((batch.compression_type, [r.value for r in batch]))
        return out

    return asyncio.run(run())


def test_compression_type_recompresses(broker: SluiceBroker, topic: str) -> None:
    from kafka import KafkaProducer

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    confluent_create_topic(broker.bootstrap, topic, config={"compression.type": "zstd"})
    producer = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "lz4"})
    for i in range(5):
        producer.produce(topic, value=b"lz4-%d" % i * 20, partition=0)
    assert producer.flush(30) == 0
    plain = KafkaProducer(bootstrap_servers=broker.bootstrap)
    plain.send(topic, b"none" * 20, partition=0).get(30)
    plain.close()

    stored = _stored_codecs(broker.bootstrap, topic)
    assert {codec for codec, _ in stored} == {4}  # zstd, whatever the producers used
    assert [v for _, values in stored for v in values] == [
        *(b"lz4-%d" % i * 20 for i in range(5)),
        b"none" * 20,
    ]

    res = ConfigResource(
        ConfigResource.Type.TOPIC,
        topic,
        incremental_configs=[
            ConfigEntry(
                "compression.type", "uncompressed", incremental_operation=AlterConfigOpType.SET
            )
        ],
    )
    admin.incremental_alter_configs([res])[res].result(20)
    gzip = Producer({"bootstrap.servers": broker.bootstrap, "compression.type": "gzip"})
    gzip.produce(topic, value=b"gzip" * 20, partition=0)
    assert gzip.flush(30) == 0
    last_codec, last_values = _stored_codecs(broker.bootstrap, topic)[-1]
    assert (last_codec, last_values) == (0, [b"gzip" * 20])

    # A compression bomb (a few KB that inflate past the 64 MiB a batch may decompress to)
    # is refused with MESSAGE_TOO_LARGE, before any recompression; the broker stays up and
    # the partition unchanged.
    bomb = KafkaProducer(
        bootstrap_servers=broker.bootstrap,
        compression_type="zstd",
        max_request_size=200 << 20,
        retries=0,
    )
    try:
        with pytest.raises(Exception) as exc:
            bomb.send(topic, b"\0" * (110 << 20), partition=0).get(60)
        assert "MessageSizeTooLarge" in type(exc.value).__name__, exc.value
    finally:
        bomb.close()
    assert len(_stored_codecs(broker.bootstrap, topic)) == len(stored) + 1
