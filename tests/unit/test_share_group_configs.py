"""Group configs: validation as Kafka's GroupConfig, defaults from the broker's
group.share.* and group.consumer.* settings."""

from __future__ import annotations

import pytest

from broker.config import load_config
from broker.groups.share.group_configs import (
    GroupConfigs,
    InvalidGroupConfig,
    ShareConfig,
    consumer_timings,
    duration_ms,
    settings,
)


def test_iso_durations() -> None:
    assert duration_ms("PT1H") == 3_600_000
    assert duration_ms("P1DT2M3.5S") == 86_400_000 + 120_000 + 3_500
    for bad in ("1h", "PT", "P", "-PT1H", "PT1X"):
        with pytest.raises(InvalidGroupConfig):
            duration_ms(bad)


def test_validation() -> None:
    configs = GroupConfigs(ShareConfig(), None)  # type: ignore[arg-type]
    ok = configs.validate(
        {
            "share.auto.offset.reset": "EARLIEST",
            "share.isolation.level": "read_committed",
            "share.record.lock.duration.ms": "15000",
            "share.delivery.count.limit": None,
        }
    )
    assert ok["share.auto.offset.reset"] == "earliest"
    assert configs.validate({"share.auto.offset.reset": "by_duration:PT5M"}) == {
        "share.auto.offset.reset": "by_duration:PT5M"
    }
    for key, value in (
        ("share.auto.offset.reset", "hello"),
        ("share.auto.offset.reset", "by_duration:1h"),
        ("share.isolation.level", "READ_COMMITTED"),
        ("share.record.lock.duration.ms", "1.2"),
        ("share.delivery.count.limit", "1"),
        ("consumer.unknown", "1"),
    ):
        with pytest.raises(InvalidGroupConfig):
            configs.validate({key: value})


def test_settings_fall_back_to_the_broker_defaults() -> None:
    config = ShareConfig(lock_ms=20_000, delivery_count_limit=4)
    default = settings(config, {})
    assert default.auto_offset_reset == "latest" and not default.read_committed
    assert default.limits.lock_ms == 20_000 and default.limits.delivery_count_limit == 4
    set_on = settings(
        config, {"share.delivery.count.limit": "7", "share.isolation.level": "read_committed"}
    )
    assert set_on.limits.delivery_count_limit == 7 and set_on.read_committed


SESSION = "consumer.session.timeout.ms"
INTERVAL = "consumer.heartbeat.interval.ms"


def test_consumer_keys_are_bounded_as_kafka_bounds_them() -> None:
    """Kafka 4.4's answers (INVALID_CONFIG with these messages), probed."""
    configs = GroupConfigs(ShareConfig(), None)  # type: ignore[arg-type]
    assert configs.validate({SESSION: "45000", INTERVAL: "15000"}) == {
        SESSION: "45000",
        INTERVAL: "15000",
    }
    for key, value, message in (
        (SESSION, "44999", f"{SESSION} must be in the range 45000 to 60000 inclusive."),
        (SESSION, "60001", f"{SESSION} must be in the range 45000 to 60000 inclusive."),
        (INTERVAL, "4999", f"{INTERVAL} must be in the range 5000 to 15000 inclusive."),
        (INTERVAL, "15001", f"{INTERVAL} must be in the range 5000 to 15000 inclusive."),
        (SESSION, "0", f"Invalid value 0 for configuration {SESSION}: Value must be at least 1"),
        (
            INTERVAL,
            "abc",
            f"Invalid value abc for configuration {INTERVAL}: Not a number of type INT",
        ),
    ):
        with pytest.raises(InvalidGroupConfig) as refused:
            configs.validate({key: value})
        assert str(refused.value) == message


def test_consumer_bounds_come_from_the_broker() -> None:
    wide = ShareConfig(consumer_session_bounds=(1000, 90_000), consumer_heartbeat_bounds=(100, 900))
    configs = GroupConfigs(wide, None)  # type: ignore[arg-type]
    assert configs.validate({SESSION: "2000", INTERVAL: "300"}) == {
        SESSION: "2000",
        INTERVAL: "300",
    }
    with pytest.raises(InvalidGroupConfig, match="range 100 to 900"):
        configs.validate({INTERVAL: "5000"})


def test_consumer_timings_fall_back_to_the_broker_defaults() -> None:
    config = ShareConfig(consumer_session_timeout_ms=30_000, consumer_heartbeat_interval_ms=3000)
    assert consumer_timings(config, {}) == (30_000, 3000, 1000)
    assert consumer_timings(config, {SESSION: "50000"}) == (50_000, 3000, 1000)
    assert consumer_timings(config, {INTERVAL: "6000"}) == (30_000, 6000, 1000)
    assigning = {"consumer.assignment.interval.ms": "0"}
    assert consumer_timings(config, assigning) == (30_000, 3000, 0)


class _Store:
    def __init__(self) -> None:
        self.configs: dict[str, dict[str, str]] = {}

    async def group_configs(self, group_id: str) -> dict[str, str]:
        return dict(self.configs.get(group_id, {}))

    async def alter_group_configs(self, group_id: str, changes: dict[str, str | None]) -> None:
        mine = self.configs.setdefault(group_id, {})
        for key, value in changes.items():
            if value is None:
                mine.pop(key, None)
            else:
                mine[key] = value


async def test_describe_lists_the_consumer_keys_as_kafka() -> None:
    """Kafka 4.4: the default's synonym is the broker config it comes from."""
    configs = GroupConfigs(ShareConfig(), _Store())  # type: ignore[arg-type]
    await configs.alter("g", {SESSION: "50000"})
    listed = {c["name"]: c for c in await configs.describe("g", None, False, True)}
    session, interval = listed[SESSION], listed[INTERVAL]
    assert (session["value"], session["config_source"], session["is_default"]) == (
        "50000",
        8,
        False,
    )
    assert session["synonyms"] == [
        {"name": SESSION, "value": "50000", "source": 8},
        {"name": "group.consumer.session.timeout.ms", "value": "45000", "source": 5},
    ]
    assert (interval["value"], interval["config_source"], interval["config_type"]) == ("5000", 5, 3)
    assert interval["synonyms"] == [
        {"name": "group.consumer.heartbeat.interval.ms", "value": "5000", "source": 5}
    ]
    assert (
        listed["share.session.timeout.ms"]["synonyms"][0]["name"]
        == "group.share.session.timeout.ms"
    )
    assert await configs.consumer_timings("g") == (50_000, 5000, 1000)


def test_the_consumer_bounds_are_broker_configs() -> None:
    config = load_config(
        {
            "group.consumer.min.session.timeout.ms": "10000",
            "group.consumer.max.heartbeat.interval.ms": "20000",
        }
    )
    share = ShareConfig.from_broker(config)
    assert (share.consumer_session_bounds, share.consumer_heartbeat_bounds) == (
        (10_000, 60_000),
        (5000, 20_000),
    )
    with pytest.raises(ValueError, match=r"group\.consumer\.min\.session\.timeout\.ms"):
        load_config({"group.consumer.min.session.timeout.ms": "70000"})


def test_a_consumer_groups_assignment_interval_within_the_brokers_bounds() -> None:
    """consumer.assignment.interval.ms (KIP-1263): 0 to 15000 by default, as Kafka 4.4."""
    key = "consumer.assignment.interval.ms"
    configs = GroupConfigs(ShareConfig(), None)  # type: ignore[arg-type]
    assert configs.validate({key: "0"}) == {key: "0"}
    assert configs.validate({key: "15000"}) == {key: "15000"}
    with pytest.raises(InvalidGroupConfig):
        configs.validate({key: "15001"})
    share = ShareConfig.from_broker(load_config({"group.consumer.assignment.interval.ms": "250"}))
    assert share.consumer_assignment_interval_ms == 250
    assert consumer_timings(share, {}).assignment_interval_ms == 250
    with pytest.raises(ValueError, match=r"group\.consumer\.assignment\.interval\.ms"):
        load_config({"group.consumer.assignment.interval.ms": "20000"})
