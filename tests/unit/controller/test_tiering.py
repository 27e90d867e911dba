"""KIP-950 in the controller: tiering configs of classic topics and the disablement state
machine (ENABLED → DISABLING → DISABLED, per-partition completion, re-enabling), driven by
the controller: DisableRemoteTopic to each partition's leader in its heartbeat answers until
that leader, at its leader epoch, acknowledges it; resent from the metadata log after a
controller failover."""

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
from controller.requests import (
    AlterTopicConfigs,
    ConfigOp,
    DisableRemoteAck,
    DisableRemoteTopic,
    OpType,
)
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


def ack(c: Cluster, partition: int, generation: int = 0, name: str = "t", **overrides: Any) -> Any:
    """The outcome of the partition's leader acknowledging the disablement in a heartbeat
    (``overrides``: another broker, leader epoch or error)."""
    topic = c.image.topic(name)
    assert topic is not None
    p = topic.partitions[partition]
    node = overrides.pop("node", p.leader)
    answer = DisableRemoteAck(topic.topic_id, partition, p.leader_epoch, generation)
    answer = DisableRemoteAck(**{**answer.__dict__, **overrides})
    return c.logic.tiering_heartbeat(c.image, node, [answer])


def done(c: Cluster, partition: int, generation: int = 0) -> None:
    outcome = ack(c, partition, generation)
    assert outcome.records, outcome
    c.commit(outcome.records)


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
    parts = c.partitions("t")
    assert c.logic.tiering_pending(c.image) == [
        PendingDisable(topic_id, i, parts[i].leader, 0, "retain", parts[i].leader_epoch)
        for i in range(3)
    ]
    # Each leader is sent DisableRemoteTopic for its own partitions, with the leader epoch.
    for node in (1, 2, 3):
        sent = c.logic.tiering_heartbeat(c.image, node, []).response
        assert sent == tuple(
            DisableRemoteTopic(topic_id, i, parts[i].leader_epoch, 0, "retain")
            for i in range(3)
            if parts[i].leader == node
        )
    done(c, 1)
    assert state(c).done == {1}
    # A repeat (the broker did not hear back) is fine and changes nothing; nor is the
    # partition sent again.
    again = ack(c, 1)
    assert again.records == []
    assert all(r.partition != 1 for r in again.response)
    done(c, 0)
    last = ack(c, 2)
    assert [type(r) for r in last.records] == [TieringPartitionDisabled, TopicTiering]
    c.commit(last.records)
    assert state(c).state == "DISABLED" and c.logic.tiering_pending(c.image) == []
    assert c.rebuilt() == c.image


def test_only_the_partitions_leader_at_its_epoch_completes_it() -> None:
    c = cluster()
    enabled(c)
    alter(c, remote_storage_enable="false")
    p = c.partitions("t")[0]
    follower = next(r for r in p.replicas if r != p.leader)
    refused = [
        ack(c, 0, node=follower),  # not the leader
        ack(c, 0, leader_epoch=p.leader_epoch - 1),  # a deposed leader's epoch
        ack(c, 0, leader_epoch=p.leader_epoch + 1),
        ack(c, 0, error_code=ErrorCode.not_leader_or_follower),  # the leader could not
        ack(c, 0, generation=1),  # another period
    ]
    for outcome in refused:
        assert outcome.records == []
    # The leader is still sent the request: it is not done.
    assert [r.partition for r in ack(c, 0, error_code=ErrorCode.kafka_storage_error).response] == [
        0
    ]
    # A new leader (the old one fenced): the request goes to it, with its epoch; the old
    # leader's late answer no longer counts.
    c.heartbeat(p.leader, want_shutdown=True)
    moved = c.partitions("t")[0]
    assert moved.leader != p.leader and moved.leader_epoch > p.leader_epoch
    late = DisableRemoteAck(c.image.topic("t").topic_id, 0, p.leader_epoch, 0)  # type: ignore[union-attr]
    assert c.logic.tiering_heartbeat(c.image, p.leader, [late]).records == []
    sent = c.logic.tiering_heartbeat(c.image, moved.leader, []).response
    assert (0, moved.leader_epoch) in [(r.partition, r.leader_epoch) for r in sent]
    done(c, 0)
    assert state(c).done == {0}


def test_re_enabling_after_disabled_starts_a_new_generation() -> None:
    c = cluster()
    enabled(c)
    topic_id = c.image.topic("t").topic_id  # type: ignore[union-attr]
    alter(c, remote_storage_enable="false")
    for p in range(3):
        done(c, p)
    assert alter(c, remote_storage_enable="true").error_code == 0
    assert (state(c).state, state(c).generation) == ("ENABLED", 1)
    alter(c, remote_storage_enable="false")
    assert (state(c).state, state(c).generation) == ("DISABLING", 1)
    # A completion of the earlier period does not count for this one.
    assert ack(c, 0, generation=0).records == []
    unknown = DisableRemoteAck(topic_id, 9, 1, 1)
    assert c.logic.tiering_heartbeat(c.image, 1, [unknown]).records == []
    assert state(c).done == frozenset()


def test_controller_failover_resumes_the_disablement_from_the_log() -> None:
    c = cluster()
    enabled(c)
    create(c, "other", 2)
    topic_id = c.image.topic("t").topic_id  # type: ignore[union-attr]
    alter(c, remote_storage_enable="false")
    done(c, 2)
    # A new active controller: its image from the committed log, or from a snapshot.
    from_log = c.rebuilt()
    from_snapshot = MetadataImage.from_records(decode_batch(encode_batch(c.image.snapshot())))
    assert from_log == c.image == from_snapshot
    successor = ControllerLogic(c.config)
    parts = c.partitions("t")
    for image in (from_log, from_snapshot):
        pending = successor.tiering_pending(image)
        assert [(p.partition, p.generation) for p in pending] == [(0, 0), (1, 0)]
        # It sends the requests again, each to the partition's leader.
        for i in (0, 1):
            sent = successor.tiering_heartbeat(image, parts[i].leader, []).response
            assert DisableRemoteTopic(topic_id, i, parts[i].leader_epoch, 0, "retain") in sent
        answers = [DisableRemoteAck(topic_id, i, parts[i].leader_epoch, 0) for i in (0, 1)]
        outcome = successor.tiering_heartbeat(image, parts[0].leader, answers[:1])
        image.apply_batch(outcome.records)
        outcome = successor.tiering_heartbeat(image, parts[1].leader, answers[1:])
        assert any(isinstance(r, TopicTiering) and r.state == "DISABLED" for r in outcome.records)


def test_two_last_partitions_acknowledged_in_one_heartbeat_complete_the_topic() -> None:
    c = cluster()
    c.create("one", 2, replication_factor=3, configs={**CLASSIC, "remote.storage.enable": "true"})
    topic = c.image.topic("one")
    assert topic is not None
    alter(c, "one", remote_storage_enable="false")
    for node in (2, 3):  # broker 1 then leads both partitions
        c.heartbeat(node, want_shutdown=True)
    parts = c.partitions("one")
    assert parts[0].leader == parts[1].leader == 1
    answers = [DisableRemoteAck(topic.topic_id, i, parts[i].leader_epoch, 0) for i in (0, 1)]
    outcome = c.logic.tiering_heartbeat(c.image, 1, answers)
    assert outcome.response == ()
    c.commit(outcome.records)
    assert state(c, "one").state == "DISABLED"


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
