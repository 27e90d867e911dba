"""The controller's side of topic migration classic → diskless (issue 18): the state
machine in the metadata log, leader reports, the final placement, failover and snapshots."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from controller.image import MIGRATION_MIGRATED, MIGRATION_SEALING, TO_DISKLESS, MetadataImage
from controller.logic import ControllerLogic
from controller.logic_config import ControllerConfig
from controller.migration import SealReport, describe_entries, migration_state, one_per_rack
from controller.records import decode_batch, encode_batch
from controller.requests import AlterTopicConfigs, ConfigOp, IsrChange, OpType

from .harness import SESSION_MS, Cluster, uuids

RACKS = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"}
CLASSIC = {"diskless.enable": "false"}


def cluster() -> Cluster:
    c = Cluster(ControllerConfig(new_uuid=uuids(), classic_topics=True))
    c.start(RACKS)
    return c


def start(c: Cluster, name: str = "t", value: str | None = "true") -> Any:
    op = (
        ConfigOp("diskless.enable", OpType.SET, value)
        if value
        else ConfigOp("diskless.enable", OpType.DELETE)
    )
    (r,) = c.commit(c.logic.alter_configs(c.image, [AlterTopicConfigs(name, [op])]))
    return r


def seal(c: Cluster, index: int, boundary: int, name: str = "t", **kw: Any) -> Any:
    topic = c.image.topic(name)
    assert topic is not None and topic.migration is not None
    p = topic.partitions[index]
    report = SealReport(
        kw.pop("broker_id", p.leader),
        topic.topic_id,
        index,
        kw.pop("generation", topic.migration.generation),
        kw.pop("leader_epoch", p.leader_epoch),
        boundary,
        kw.pop("old_bytes", 100),
        kw.pop("old_start", -1),
    )
    return c.commit(c.logic.partition_sealed(c.image, report))


def test_enabling_diskless_on_a_classic_topic_starts_a_migration_and_sealing_finishes_it() -> None:
    c = cluster()
    c.create("t", 2, replication_factor=3, configs=CLASSIC)
    r = start(c)
    assert r.error_code == ErrorCode.none
    topic = c.image.topic("t")
    assert topic is not None and topic.migration is not None
    # Still classic until every partition is sealed: the leaders keep serving it.
    assert not topic.diskless and topic.migration.state == MIGRATION_SEALING
    assert topic.migration.direction == TO_DISKLESS and migration_state(topic) == "pending"
    # Asked again while it runs: nothing new, no error.
    assert start(c).error_code == ErrorCode.none
    assert seal(c, 0, 42).error_code == ErrorCode.none
    assert migration_state(topic) == "sealing" and not topic.diskless
    assert topic.migration.boundary(0) == 42
    # A repeat of the same report (the leader missed the answer) is fine and changes nothing.
    before = len(c.log)
    assert seal(c, 0, 42).error_code == ErrorCode.none and len(c.log) == before
    assert seal(c, 0, 41).error_code == ErrorCode.invalid_request
    assert seal(c, 1, 7).error_code == ErrorCode.none
    assert topic.diskless and topic.migration.state == MIGRATION_MIGRATED
    assert migration_state(topic) == "migrated"
    assert describe_entries(topic) == {
        "diskless.migration.state": "migrated (to-diskless, generation 0)",
        "diskless.migration.boundaries": "0:42,1:7",
        "diskless.migration.classic.bytes": "200",
    }
    # Followers replaying the log get the same image, and so does a snapshot.
    assert c.rebuilt() == c.image
    assert MetadataImage.from_records(decode_batch(encode_batch(c.image.snapshot()))) == c.image
    # Migrated: enabling again is a no-op.
    assert start(c).error_code == ErrorCode.none


def test_back_to_classic_keeps_the_replicas_and_flips_the_kind_when_sealed() -> None:
    c = cluster()
    c.create("t", 2, replication_factor=3, configs=CLASSIC)
    start(c)
    seal(c, 0, 42)
    seal(c, 1, 7)
    before = dict(c.partitions("t"))
    assert start(c, value="false").error_code == ErrorCode.none
    topic = c.image.topic("t")
    assert topic is not None and topic.migration is not None
    assert topic.diskless and topic.migration.direction == "TO_CLASSIC"
    assert topic.migration.generation == 1 and migration_state(topic) == "pending"
    # The diskless logs' starts (the first boundaries) come with the seals.
    assert seal(c, 0, 50, old_start=42).error_code == ErrorCode.none
    assert seal(c, 1, 9, old_start=7).error_code == ErrorCode.none
    assert not topic.diskless and topic.migration.state == MIGRATION_MIGRATED
    sealed = topic.migration.sealed_partition(0)
    assert sealed is not None and (sealed.boundary, sealed.old_start) == (50, 42)
    assert {i: p.replicas for i, p in c.partitions("t").items()} == {
        i: p.replicas for i, p in before.items()
    }
    assert describe_entries(topic)["diskless.migration.diskless.bytes"] == "200"
    assert c.rebuilt() == c.image
    assert MetadataImage.from_records(decode_batch(encode_batch(c.image.snapshot()))) == c.image
    # A diskless log sealed for classic cannot start again later: refused for now.
    assert start(c).error_code == ErrorCode.invalid_config


def test_only_the_current_leader_at_its_epoch_may_seal() -> None:
    c = cluster()
    c.create("t", 1, replication_factor=3, configs=CLASSIC)
    start(c)
    p = c.partitions("t")[0]
    other = next(r for r in p.replicas if r != p.leader)
    assert seal(c, 0, 5, broker_id=other).error_code == ErrorCode.not_leader_or_follower
    assert seal(c, 0, 5, leader_epoch=p.leader_epoch - 1).error_code == (
        ErrorCode.fenced_leader_epoch
    )
    assert seal(c, 0, 5, generation=3).error_code == ErrorCode.invalid_request
    topic = c.image.topic("t")
    assert topic is not None and topic.migration is not None and not topic.migration.sealed


def test_a_new_controller_resumes_from_the_log() -> None:
    c = cluster()
    c.create("t", 2, replication_factor=3, configs=CLASSIC)
    start(c)
    seal(c, 0, 10)
    # Failover: a fresh logic on the image rebuilt from the committed entries.
    image = c.rebuilt()
    logic = ControllerLogic(c.config)
    logic.become_active(image, c.now)
    topic = image.topic("t")
    assert topic is not None and topic.migration is not None
    assert topic.migration.boundary(0) == 10 and topic.migration.boundary(1) is None
    p = topic.partitions[1]
    out = logic.partition_sealed(
        image, SealReport(p.leader, topic.topic_id, 1, 0, p.leader_epoch, 3)
    )
    assert out.response.error_code == ErrorCode.none
    image.apply_batch(out.records)
    assert image.topic("t").diskless  # type: ignore[union-attr]


def isr_change(c: Cluster, new_isr: tuple[int, ...], name: str = "t") -> Any:
    topic = c.image.topic(name)
    assert topic is not None
    p = topic.partitions[0]
    change = IsrChange(topic.topic_id, 0, p.leader_epoch, p.partition_epoch, new_isr)
    result = c.commit(c.logic.alter_partition(c.image, p.leader, c.epochs[p.leader], [change]))
    assert result.error_code == ErrorCode.none
    return result.partitions[0]


def staged_cluster() -> Cluster:
    c = cluster()
    # Two replicas in rack a (1 and 4), none in c: one of them makes room for rack c.
    r = c.create("t", -1, configs=CLASSIC, assignments={0: [1, 4, 2]})
    assert r.error_code == ErrorCode.none, r
    start(c)
    seal(c, 0, 0)
    return c


def test_migrated_partitions_move_to_one_replica_per_rack_as_a_staged_reassignment() -> None:
    c = staged_cluster()
    p = c.partitions("t")[0]
    # Target 1, 2 and a broker of rack c; 4 stays until the new one holds the sealed log.
    target = p.target_replicas
    assert target[0] == 1 and len(target) == 3 and 2 in target and 4 not in target
    assert {RACKS[r] for r in target} == {"a", "b", "c"}
    (added,) = p.adding_replicas
    assert RACKS[added] == "c" and p.removing_replicas == (4,)
    assert set(p.replicas) == {1, 2, 4, added} and p.isr == (1, 4, 2) and p.leader == 1
    topic = c.image.topic("t")
    assert topic is not None and topic.diskless
    # Broker liveness does not put the new replica in the ISR (the diskless rule would).
    c.advance(100, heartbeating=[1, 2, 3, 4, 5, 6])
    assert c.partitions("t")[0].isr == (1, 4, 2)
    # Its leader reports it caught up: then 4 leaves, the reassignment is done.
    r = isr_change(c, (1, 4, 2, added))
    assert r.error_code == ErrorCode.none
    p = c.partitions("t")[0]
    assert p.replicas == target and not p.reassigning and set(p.isr) == set(target)
    # Done; while its sealed classic log has records its ISR stays classic (the leader
    # still says who holds that log), and once retention removed them (size 0 reported)
    # it is a diskless partition again, whose ISR follows liveness.
    topic = c.image.topic("t")
    assert topic is not None
    assert seal(c, 0, 0, old_bytes=0).error_code == ErrorCode.none
    p = c.partitions("t")[0]
    change = IsrChange(topic.topic_id, 0, p.leader_epoch, p.partition_epoch, (1, 2))
    refused = c.commit(c.logic.alter_partition(c.image, 1, c.epochs[1], [change]))
    assert refused.partitions[0].error_code == ErrorCode.invalid_request
    assert c.rebuilt() == c.image
    # Already one per rack: unchanged.
    assert one_per_rack(c.image, (1, 2, 3), 1) == (1, 2, 3)


def test_a_staged_move_survives_controller_failover_and_a_leader_death() -> None:
    c = staged_cluster()
    (added,) = c.partitions("t")[0].adding_replicas
    # A new active controller: the reassignment in progress is in the log.
    image = c.rebuilt()
    assert image == c.image and image.topic("t").partitions[0].adding_replicas == (added,)  # type: ignore[union-attr]
    c.logic = ControllerLogic(c.config)
    c.logic.become_active(image, c.now)
    c.image = image
    # The leader dies: an in-sync replica leads (the classic rule), not the new replica
    # that has not fetched the sealed log yet.
    c.advance(c.config.session_timeout_ms + 1, heartbeating=[2, 3, 4, 5, 6])
    p = c.partitions("t")[0]
    assert p.leader in (4, 2) and p.reassigning and added not in p.isr
    # It fetched the sealed log: in the ISR; the reassignment waits for 1 (a target).
    r = isr_change(c, tuple(x for x in p.replicas if x in (*p.isr, added)))
    assert r.error_code == ErrorCode.none and c.partitions("t")[0].reassigning


def test_a_second_migration_needs_the_first_to_finish() -> None:
    c = cluster()
    c.create("t", 1, replication_factor=3, configs=CLASSIC)
    start(c)
    # Deleting the override means the default (diskless): also asked again, no error.
    assert start(c, value=None).error_code == ErrorCode.none


def alter(c: Cluster, name: str, key: str, value: str) -> Any:
    op = ConfigOp(key, OpType.SET, value)
    (r,) = c.commit(c.logic.alter_configs(c.image, [AlterTopicConfigs(name, [op])]))
    return r


def test_a_tiered_topic_migrates_and_its_sealed_log_keeps_tiering() -> None:
    c = cluster()
    tiered = {**CLASSIC, "remote.storage.enable": "true"}
    c.create("t", 1, replication_factor=3, configs=tiered)
    assert start(c).error_code == ErrorCode.none
    seal(c, 0, 10)
    topic = c.image.topic("t")
    assert topic is not None and topic.diskless
    assert topic.configs["remote.storage.enable"] == "true"
    # Its other configs still change (the sealed classic log tiers: not refused as for a
    # topic created diskless), and tiering can be disabled (KIP-950) as before.
    assert alter(c, "t", "retention.ms", "60000").error_code == ErrorCode.none
    assert alter(c, "t", "remote.storage.enable", "false").error_code == ErrorCode.none
    assert topic.tiering is not None and topic.tiering.state == "DISABLING"
    # A topic created diskless still refuses tiering.
    c.create("d", 1)
    assert alter(c, "d", "remote.storage.enable", "true").error_code == ErrorCode.invalid_config


def test_no_migration_while_tiering_is_being_disabled() -> None:
    c = cluster()
    c.create("t", 1, replication_factor=3, configs={**CLASSIC, "remote.storage.enable": "true"})
    assert alter(c, "t", "remote.storage.enable", "false").error_code == ErrorCode.none
    assert start(c).error_code == ErrorCode.invalid_config


def test_metrics_show_state_boundaries_and_old_bytes() -> None:
    from controller.migration import migration_metrics

    c = cluster()
    c.create("t", 2, replication_factor=3, configs=CLASSIC)
    c.create("other", 1, replication_factor=3, configs=CLASSIC)
    start(c)
    m = migration_metrics(c.image)
    assert m.state == {("t", "to-diskless"): 0} and m.boundary == {}
    seal(c, 1, 9, old_bytes=300)
    m = migration_metrics(c.image)
    assert m.state == {("t", "to-diskless"): 1}
    assert m.boundary == {("t", 1): 9} and m.old_bytes == {"t": 300}
    seal(c, 0, 4, old_bytes=5)
    assert migration_metrics(c.image).state == {("t", "to-diskless"): 2}


def test_bytes_still_classic_follow_the_leaders_reports() -> None:
    from controller.migration import migration_metrics

    c = cluster()
    c.create("t", 2, replication_factor=3, configs=CLASSIC)
    start(c)
    seal(c, 0, 4, old_bytes=500)
    seal(c, 1, 4, old_bytes=70)
    topic = c.image.topic("t")
    assert topic is not None and topic.diskless
    assert describe_entries(topic)["diskless.migration.classic.bytes"] == "570"
    # Retention left 120 bytes of partition 0: its leader reports again, with its size.
    before = len(c.log)
    assert seal(c, 0, 4, old_bytes=120).error_code == ErrorCode.none
    assert len(c.log) == before + 1
    assert describe_entries(topic)["diskless.migration.classic.bytes"] == "190"
    assert migration_metrics(c.image).old_bytes == {"t": 190}
    # The same size again: nothing recorded; another replica, or an old epoch: ignored.
    assert seal(c, 0, 4, old_bytes=120).error_code == ErrorCode.none and len(c.log) == before + 1
    p = c.partitions("t")[1]
    other = next(r for r in p.replicas if r != p.leader)
    seal(c, 1, 4, old_bytes=0, broker_id=other)
    seal(c, 1, 4, old_bytes=0, leader_epoch=p.leader_epoch - 1)
    assert len(c.log) == before + 1
    # Everything deleted: 0, and the state survives a rebuild and a snapshot.
    seal(c, 1, 4, old_bytes=0)
    assert describe_entries(topic)["diskless.migration.classic.bytes"] == "120"
    assert c.rebuilt() == c.image
    assert MetadataImage.from_records(decode_batch(encode_batch(c.image.snapshot()))) == c.image


def test_a_migration_to_classic_moves_leaders_off_lost_brokers() -> None:
    """Diskless leaders stay on a lost broker (seed 000: the transformer routes around
    it), except where the leader must act: a migration to classic, whose leaders seal."""
    c = cluster()
    c.create("t", 6)
    lost = c.partitions("t")[0].leader
    others = [b for b in RACKS if b != lost]
    c.advance(SESSION_MS + 1, heartbeating=others)
    assert c.image.brokers[lost].fenced
    led = [i for i, p in c.partitions("t").items() if p.leader == lost]
    assert led and all(p.isr == p.replicas for p in c.partitions("t").values())
    assert start(c, value="false").error_code == ErrorCode.none
    for i in led:
        p = c.partitions("t")[i]
        assert p.leader != lost and p.leader in others and p.isr == p.replicas
        assert seal(c, i, 5, old_start=0).error_code == ErrorCode.none


def test_a_leader_lost_during_a_migration_to_classic_is_replaced() -> None:
    c = cluster()
    c.create("t", 2)
    assert start(c, value="false").error_code == ErrorCode.none
    lost = c.partitions("t")[0].leader
    c.advance(SESSION_MS + 1, heartbeating=[b for b in RACKS if b != lost])
    p = c.partitions("t")[0]
    assert p.leader != lost and p.leader_epoch == 1 and p.isr == p.replicas


def test_a_sealed_classic_log_with_records_keeps_a_classic_isr_so_a_short_replica_never_leads() -> (
    None
):
    """Broker 1 leads, dies, and the classic log is sealed without it (ISR 2, 3). Back, it
    holds only what it had: it must not lead the sealed log (the others would truncate to
    it) and joins the ISR only when the leader says it caught up. Found by an e2e run where
    the returning preferred replica took the leadership back and two replicas truncated
    acknowledged records."""
    c = Cluster(ControllerConfig(new_uuid=uuids(), classic_topics=True))
    c.start({1: "a", 2: "b", 3: "c"})
    c.create("t", -1, configs=CLASSIC, assignments={0: [1, 2, 3]})
    c.advance(SESSION_MS + 1, heartbeating=[2, 3])
    p = c.partitions("t")[0]
    assert (p.leader, p.isr) == (2, (2, 3))
    start(c)
    assert seal(c, 0, 100, old_bytes=500).error_code == ErrorCode.none
    topic = c.image.topic("t")
    assert topic is not None and topic.diskless
    c.register(1, "a")
    assert c.heartbeat(1).is_fenced is False
    c.advance(100, heartbeating=[1, 2, 3])
    p = c.partitions("t")[0]
    assert (p.leader, p.isr) == (2, (2, 3)), "a diskless ISR would take 1 back at once"
    # The leader reports 1 caught up: accepted (a diskless partition's would be refused).
    assert isr_change(c, (1, 2, 3)).error_code == ErrorCode.none
    # The leader dies: another holder of the whole log leads, as Kafka elects from the ISR.
    c.advance(SESSION_MS + 1, heartbeating=[1, 3])
    p = c.partitions("t")[0]
    assert p.leader in (1, 3) and 2 not in p.isr
    # Retention removed the sealed log's records (its size reported 0): diskless again.
    assert seal(c, 0, 100, old_bytes=0).error_code == ErrorCode.none
    c.advance(100, heartbeating=[1, 3])
    assert c.partitions("t")[0].isr == (1, 2, 3)
    assert c.rebuilt() == c.image


def test_a_migration_back_to_classic_keeps_the_sealed_logs_isr() -> None:
    c = Cluster(ControllerConfig(new_uuid=uuids(), classic_topics=True))
    c.start({1: "a", 2: "b", 3: "c"})
    c.create("t", -1, configs=CLASSIC, assignments={0: [1, 2, 3]})
    c.advance(SESSION_MS + 1, heartbeating=[2, 3])
    start(c)
    seal(c, 0, 100, old_bytes=500)
    c.register(1, "a")
    c.heartbeat(1)
    c.advance(100, heartbeating=[1, 2, 3])
    assert start(c, value="false").error_code == ErrorCode.none
    p = c.partitions("t")[0]
    assert (p.leader, p.isr) == (2, (2, 3))
    assert seal(c, 0, 150, old_start=100).error_code == ErrorCode.none
    topic = c.image.topic("t")
    assert topic is not None and not topic.diskless
    # Classic again: 1 still lacks part of the first sealed log, so it is not in the ISR.
    p = c.partitions("t")[0]
    assert (p.leader, p.isr) == (2, (2, 3))
