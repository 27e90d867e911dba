"""Dynamic broker configs in the metadata image (controller/broker_config_admin.py): the
replication throttle rates, per broker or as the cluster default; everything else refused
as static; the values survive a snapshot and are read broker, then default, then Kafka's."""

from __future__ import annotations

import uuid

from controller.broker_config_admin import (
    LONG_MAX,
    BrokerConfigAlteration,
    alter_broker_configs,
    dynamic_value,
)
from controller.image import MetadataImage
from controller.records import RegisterBroker, decode_batch, encode_batch

LEADER = "leader.replication.throttled.rate"
FOLLOWER = "follower.replication.throttled.rate"


def commit(image: MetadataImage, outcome):  # type: ignore[no-untyped-def]
    image.apply_batch(decode_batch(encode_batch(outcome.records)))
    return outcome.response


def image_with_brokers() -> MetadataImage:
    image = MetadataImage()
    for node in (1, 2):
        image.apply(RegisterBroker(node, uuid.uuid4(), node, "h", 9000 + node, fenced=False))
    return image


def test_rates_per_broker_and_as_the_default() -> None:
    image = image_with_brokers()
    assert dynamic_value(image, 1, LEADER) == (LONG_MAX, "")
    results = commit(
        image,
        alter_broker_configs(
            image,
            [
                BrokerConfigAlteration("", {LEADER: "1000", FOLLOWER: "2000"}),
                BrokerConfigAlteration("2", {LEADER: "500"}),
            ],
            validate_only=False,
        ),
    )
    assert [r.error_code for r in results] == [0, 0]
    assert dynamic_value(image, 1, LEADER) == (1000, "default")
    assert dynamic_value(image, 2, LEADER) == (500, "broker")
    assert dynamic_value(image, 2, FOLLOWER) == (2000, "default")
    # Removed (IncrementalAlterConfigs DELETE): back to the default's value.
    commit(image, alter_broker_configs(image, [BrokerConfigAlteration("2", {LEADER: None})], False))
    assert dynamic_value(image, 2, LEADER) == (1000, "default")
    # Legacy AlterConfigs replaces the resource's set: a key left out is removed.
    commit(
        image,
        alter_broker_configs(
            image, [BrokerConfigAlteration("", {LEADER: "7"}, replace=True)], False
        ),
    )
    assert dynamic_value(image, 1, FOLLOWER) == (LONG_MAX, "")
    assert dynamic_value(image, 1, LEADER) == (7, "default")
    copy = MetadataImage.from_records(decode_batch(encode_batch(image.snapshot())))
    assert copy == image and copy.broker_configs == {"": {LEADER: "7"}}


def test_refusals_change_nothing() -> None:
    image = image_with_brokers()
    outcome = alter_broker_configs(
        image,
        [
            BrokerConfigAlteration("1", {"num.partitions": "3"}),  # static
            BrokerConfigAlteration("9", {LEADER: "1"}),  # no such broker
            BrokerConfigAlteration("x", {LEADER: "1"}),
            BrokerConfigAlteration("1", {LEADER: "fast"}),
            BrokerConfigAlteration("1", {LEADER: "-1"}),
        ],
        validate_only=False,
    )
    assert [r.error_code for r in outcome.response] == [42, 42, 42, 40, 40]
    assert "dynamically" in (outcome.response[0].error_message or "")
    assert outcome.records == []
    checked = alter_broker_configs(image, [BrokerConfigAlteration("1", {LEADER: "5"})], True)
    assert checked.response[0].error_code == 0 and checked.records == []
