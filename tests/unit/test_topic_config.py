"""Topic config rules: Kafka's type and range checks, and where a value comes from."""

from __future__ import annotations

import pytest

from broker.config import BrokerConfig
from broker.metadata import topic_config
from common.topic_config_validation import InvalidConfig, validate


@pytest.mark.parametrize(
    "configs",
    [
        {"max.message.bytes": "2147483647"},  # INT's maximum
        {"retention.ms": "-1"},
        {"retention.bytes": "-5"},  # Kafka sets no lower bound
        {"compression.gzip.level": "-1"},
        {"compression.zstd.level": "-131072"},
        {"min.cleanable.dirty.ratio": "1"},
        {"cleanup.policy": "compact, delete"},
        {"unclean.leader.election.enable": "TRUE"},
        {"leader.replication.throttled.replicas": "0:1,1:2"},
        {"follower.replication.throttled.replicas": ""},
        {"local.retention.ms": "-2"},
        {"retention.ms": None},  # removing an override
        {"diskless.enable": "false"},  # a classic topic (the controller decides if it may)
    ],
)
def test_accepted(configs: dict[str, str | None]) -> None:
    validate(configs)


@pytest.mark.parametrize(
    "configs",
    [
        {"max.message.bytes": "2147483648"},
        {"retention.ms": "-2"},
        {"retention.ms": "1_000"},
        {"compression.gzip.level": "0"},
        {"compression.lz4.level": "18"},
        {"min.cleanable.dirty.ratio": "nan"},
        {"cleanup.policy": ""},
        {"leader.replication.throttled.replicas": "0-1"},
        {"segment.bytes": "1048575"},
        {"message.timestamp.type": "createtime"},
        {"diskless.enable": "maybe"},
        {"log.retention.ms": "1"},  # a broker config, not a topic config
    ],
)
def test_refused(configs: dict[str, str]) -> None:
    with pytest.raises(InvalidConfig):
        validate(configs)


def test_compaction_lags_must_not_cross() -> None:
    with pytest.raises(InvalidConfig, match="conflict"):
        validate({"max.compaction.lag.ms": "10"}, current={"min.compaction.lag.ms": "20"})
    validate({"max.compaction.lag.ms": None}, current={"min.compaction.lag.ms": "20"})


def test_sources_and_synonyms() -> None:
    broker = BrokerConfig(message_max_bytes=5000)
    resolved = topic_config.resolve(broker, {}, "max.message.bytes")
    assert (resolved.value, resolved.source) == ("5000", topic_config.SOURCE_STATIC_BROKER)
    assert [(s.name, s.source) for s in resolved.synonyms] == [
        ("message.max.bytes", topic_config.SOURCE_STATIC_BROKER),
        ("message.max.bytes", topic_config.SOURCE_DEFAULT),
    ]
    resolved = topic_config.resolve(broker, {"max.message.bytes": "7"}, "max.message.bytes")
    assert (resolved.value, resolved.source) == ("7", topic_config.SOURCE_DYNAMIC_TOPIC)
    assert resolved.synonyms[0].name == "max.message.bytes"
    assert topic_config.int_config(broker, {}, "max.message.bytes") == 5000
    assert topic_config.effective(BrokerConfig(), {})["retention.ms"] == "604800000"


def test_timestamp_bounds_read_the_legacy_difference() -> None:
    broker = BrokerConfig()
    assert topic_config.timestamp_bounds(broker, {}) == (2**63 - 1, 3_600_000)
    legacy = {"message.timestamp.difference.max.ms": "5000"}
    assert topic_config.timestamp_bounds(broker, legacy) == (5000, 5000)
    both = {**legacy, "message.timestamp.after.max.ms": "10"}
    assert topic_config.timestamp_bounds(broker, both) == (5000, 10)


def test_kafkas_broker_level_topic_defaults_apply_to_topics_without_their_own() -> None:
    """server.properties keys Kafka operators set (log.retention.hours, log.segment.bytes,
    compression.type, min.insync.replicas, ...) are accepted, checked as the topic config
    they default, and give topics without an override their value."""
    from broker.config import load_config

    config = load_config(
        {
            "log.retention.hours": "72",
            "log.segment.bytes": "1048576",
            "compression.type": "zstd",
            "min.insync.replicas": "2",
            "log.cleanup.policy": "compact",
        }
    )
    effective = topic_config.effective(config, {"retention.ms": "1000"})
    assert effective["retention.ms"] == "1000"  # the topic's own value first
    effective = topic_config.effective(config, {})
    assert effective["retention.ms"] == str(72 * 3_600_000)
    assert effective["segment.bytes"] == "1048576" and effective["compression.type"] == "zstd"
    assert effective["min.insync.replicas"] == "2" and effective["cleanup.policy"] == "compact"
    # Described as Kafka does: set ones from the broker (static), with the default after.
    segment = topic_config.resolve(config, {}, "segment.bytes")
    assert segment.source == topic_config.SOURCE_STATIC_BROKER
    assert [(s.name, s.value, s.source) for s in segment.synonyms] == [
        ("log.segment.bytes", "1048576", topic_config.SOURCE_STATIC_BROKER),
        ("log.segment.bytes", "1073741824", topic_config.SOURCE_DEFAULT),
    ]
    # Kafka's quirk kept: log.retention.hours is dropped from retention.ms's synonyms (they
    # start at log.retention.ms), so the source is DEFAULT_CONFIG though the value is set.
    retention = topic_config.resolve(config, {}, "retention.ms")
    assert retention.synonyms == () and retention.source == topic_config.SOURCE_DEFAULT
    for bad, message in (
        ({"log.retention.hours": "x"}, "integer"),
        ({"log.cleanup.policy": "bogus"}, "cleanup.policy"),
        ({"min.insync.replicas": "0"}, "min.insync.replicas"),
        ({"unclean.leader.election.enable": "true"}, "controllers"),
    ):
        with pytest.raises(ValueError, match=message):
            load_config(bad)


def test_broker_configs_are_described_with_kafkas_types_sources_and_synonyms() -> None:
    from broker.admin.configs import _broker_configs
    from broker.config import load_config
    from common import topic_config_keys as k

    config = load_config({"auto.create.topics.enable": "false", "log.retention.hours": "72"})
    shown = {c["name"]: c for c in _broker_configs(config, None, True)}
    auto = shown["auto.create.topics.enable"]
    assert (auto["value"], auto["config_type"], auto["config_source"]) == ("false", k.BOOLEAN, 4)
    assert [(s["value"], s["source"]) for s in auto["synonyms"]] == [("false", 4), ("true", 5)]
    size = shown["message.max.bytes"]
    assert (size["value"], size["config_type"], size["config_source"]) == ("1048588", k.INT, 5)
    assert shown["num.partitions"]["config_type"] == k.INT
    assert shown["replica.lag.time.max.ms"]["config_type"] == k.LONG
    # Kafka's topic defaults, set or not (unset: a null value, DEFAULT_CONFIG, no synonym).
    unset = shown["log.retention.ms"]
    assert (unset["value"], unset["config_source"], unset["synonyms"]) == (None, 5, [])
    assert unset["config_type"] == k.LONG
    hours = shown["log.retention.hours"]
    assert (hours["value"], hours["config_source"], hours["config_type"]) == ("72", 4, k.INT)
    # Without include_synonyms: none listed, the source still said.
    plain = {c["name"]: c for c in _broker_configs(config, {"log.retention.hours"}, False)}
    assert list(plain) == ["log.retention.hours"] and plain["log.retention.hours"]["synonyms"] == []
