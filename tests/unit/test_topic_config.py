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
