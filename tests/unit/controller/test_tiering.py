"""KIP-950 in the controller: tiering configs of classic topics and the disablement state
machine (ENABLED → DISABLING → DISABLED, per-partition completion, re-enabling), rebuilt
from the metadata log after a controller failover."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from controller.image import MetadataImage
from controller.logic import ControllerLogic
from controller.logic_config import ControllerConfig
from controller.records import (
    TieringPartitionDisabled,
    TopicTiering,
    decode_batch,
    encode_batch,
)
from controller.requests import AlterTopicConfigs, ConfigOp, OpType
from controller.tiering import PendingDisable

from .harness import Cluster, uuids

RACKS = {1: "a", 2: "b", 3: "c"}
CLASSIC = {"diskless.enable": "false"}


def cluster() -> Cluster:
    c = Cluster(ControllerConfig(new_uuid=uuids(), classic_topics=True))
    c.start(RACKS)
    return c


def create(c: Cluster, name: str = "t", partitions: int = 3, **configs: str) -> Any:
    """Configs as keywords, dots spelled "_" (remote_storage_enable=...)."""
    named = {k.replace("_", "."): v for k, v in configs.items()}
    return c.create(name, partitions, replication_factor=3, configs={**CLASSIC, **named})


def alter(c: Cluster, name: str = "t", **sets: str | None) -> Any:
    ops = [
        ConfigOp(k.replace("_", "."), OpType.SET if v is not None else OpType.DELETE, v)
        for k, v in sets.items()
    ]
    (result,) = c.commit(c.logic.alter_configs(c.image, [AlterTopicConfigs(name, ops)]))
    return result


def state(c: Cluster, name: str = "t") -> Any:
    topic = c.image.topic(name)
    assert topic is not None
    return topic.tiering


def enabled(c: Cluster) -> None:
    assert create(c, remote_storage_enable="true").error_code == ErrorCode.none


def test_creation_checks_the_tiering_configs() -> None:
    c = cluster()
    refused = {
        "diskless": {"diskless.enable": "true", "remote.storage.enable": "true"},
        "compact": {"cleanup.policy": "compact", "remote.storage.enable": "true"},
        "local ms": {"remote.storage.enable": "true", "retention.ms": "1000",
                     "local.retention.ms": "2000"},
        "local -1": {"remote.storage.enable": "true", "retention.bytes": "1000",
                     "local.retention.bytes": "-1"},
        "policy": {"remote.log.disable.policy": "shred"},
        "contradiction": {"remote.log.disable.policy": "retain",
                          "remote.log.delete.on.disable": "true"},
    }  # fmt: skip
    for name, configs in refused.items():
        rf = -1 if configs.get("diskless.enable") == "true" else 3
        result = c.create(
            name.replace(" ", "-"), 1, replication_factor=rf, configs={**CLASSIC, **configs}
        )
        assert result.error_code == ErrorCode.invalid_config, name
    ok = {"remote.storage.enable": "true", "retention.ms": "5000", "local.retention.ms": "1000",
          "local.retention.bytes": "-2"}  # fmt: skip
    assert create(c, **{k.replace(".", "_"): v for k, v in ok.items()}).error_code == 0
    # Created tiered: ENABLED implicitly (the config), no state record needed.
    assert state(c) is None
    assert c.logic.tiering_pending(c.image) == []


def test_disable_with_the_default_policy_retains_then_completes_per_partition() -> None:
    c = cluster()
    enabled(c)
    topic_id = c.image.topic("t").topic_id  # type: ignore[union-attr]
    assert alter(c, remote_storage_enable="false").error_code == 0
    t = state(c)
    assert (t.state, t.generation, t.policy, t.done) == ("DISABLING", 0, "retain", frozenset())
    leaders = {i: p.leader for i, p in c.partitions("t").items()}
    assert c.logic.tiering_pending(c.image) == [
        PendingDisable(topic_id, i, leaders[i], 0, "retain") for i in range(3)
    ]
    assert c.commit(c.logic.complete_tiering_disable(c.image, topic_id, 1, 0)).error_code == 0
    assert state(c).done == {1}
    # A repeat (the broker did not hear back) is fine and changes nothing.
    outcome = c.logic.complete_tiering_disable(c.image, topic_id, 1, 0)
    assert outcome.records == [] and outcome.response.error_code == 0
    c.commit(c.logic.complete_tiering_disable(c.image, topic_id, 0, 0))
    last = c.logic.complete_tiering_disable(c.image, topic_id, 2, 0)
    assert [type(r) for r in last.records] == [TieringPartitionDisabled, TopicTiering]
    c.commit(last)
    assert state(c).state == "DISABLED" and c.logic.tiering_pending(c.image) == []
    assert c.rebuilt() == c.image


def test_delete_policy_in_either_spelling() -> None:
    for sets in (
        {"remote_storage_enable": "false", "remote_log_disable_policy": "delete"},
        {"remote_storage_enable": "false", "remote_log_delete_on_disable": "true"},
    ):
        c = cluster()
        enabled(c)
        assert alter(c, **sets).error_code == 0
        assert state(c).policy == "delete"


def test_copy_disable_is_only_a_config() -> None:
    c = cluster()
    enabled(c)
    assert alter(c, remote_log_copy_disable="true").error_code == 0
    assert state(c) is None
    assert c.image.topic("t").configs["remote.log.copy.disable"] == "true"  # type: ignore[union-attr]


def test_no_change_of_the_disablement_while_disabling() -> None:
    c = cluster()
    enabled(c)
    alter(c, remote_storage_enable="false")
    for sets in (
        {"remote_storage_enable": "true"},
        {"remote_log_disable_policy": "delete"},
        {"remote_storage_enable": None},
    ):
        assert alter(c, **sets).error_code == ErrorCode.invalid_config, sets
    # Other configs still change.
    assert alter(c, retention_ms="100000").error_code == 0
    assert state(c).state == "DISABLING"


def test_re_enabling_after_disabled_starts_a_new_generation() -> None:
    c = cluster()
    enabled(c)
    topic_id = c.image.topic("t").topic_id  # type: ignore[union-attr]
    alter(c, remote_storage_enable="false")
    for p in range(3):
        c.commit(c.logic.complete_tiering_disable(c.image, topic_id, p, 0))
    assert alter(c, remote_storage_enable="true").error_code == 0
    assert (state(c).state, state(c).generation) == ("ENABLED", 1)
    alter(c, remote_storage_enable="false")
    assert (state(c).state, state(c).generation) == ("DISABLING", 1)
    # A completion of the earlier period does not count for this one.
    stale = c.logic.complete_tiering_disable(c.image, topic_id, 0, 0)
    assert stale.records == [] and stale.response.error_code == ErrorCode.invalid_request
    assert c.logic.complete_tiering_disable(c.image, topic_id, 9, 1).response.error_code == (
        ErrorCode.unknown_topic_or_partition
    )


def test_controller_failover_resumes_the_disablement_from_the_log() -> None:
    c = cluster()
    enabled(c)
    create(c, "other", 2)
    topic_id = c.image.topic("t").topic_id  # type: ignore[union-attr]
    alter(c, remote_storage_enable="false")
    c.commit(c.logic.complete_tiering_disable(c.image, topic_id, 2, 0))
    # A new active controller: its image from the committed log, or from a snapshot.
    from_log = c.rebuilt()
    from_snapshot = MetadataImage.from_records(decode_batch(encode_batch(c.image.snapshot())))
    assert from_log == c.image == from_snapshot
    successor = ControllerLogic(c.config)
    for image in (from_log, from_snapshot):
        pending = successor.tiering_pending(image)
        assert [(p.partition, p.generation) for p in pending] == [(0, 0), (1, 0)]
        done = successor.complete_tiering_disable(image, topic_id, 0, 0)
        image.apply_batch(done.records)
        done = successor.complete_tiering_disable(image, topic_id, 1, 0)
        assert any(isinstance(r, TopicTiering) and r.state == "DISABLED" for r in done.records)


def test_records_that_do_not_fit_are_refused_by_the_image() -> None:
    c = cluster()
    enabled(c)
    topic_id = c.image.topic("t").topic_id  # type: ignore[union-attr]
    image = c.image.copy()
    image.apply(TopicTiering(topic_id, "ENABLED", 0))
    for bad in (
        TopicTiering(topic_id, "DISABLED", 0),  # must go through DISABLING
        TopicTiering(topic_id, "ENABLED", 1),  # already enabled
        TopicTiering(topic_id, "DISABLING", 3),  # another period
        TopicTiering(topic_id, "BROKEN", 0),
        TieringPartitionDisabled(topic_id, 0, 0),  # not disabling
    ):
        before = image.copy()
        try:
            image.apply_batch([bad])
        except ValueError:
            pass
        else:
            raise AssertionError(f"{bad} applied")
        assert image == before
