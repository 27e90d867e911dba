"""Share groups' group configs: validation as Kafka's GroupConfig, defaults from the
broker's group.share.* settings."""

from __future__ import annotations

import pytest

from broker.groups.share.group_configs import (
    GroupConfigs,
    InvalidGroupConfig,
    ShareConfig,
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
