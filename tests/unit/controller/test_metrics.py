"""Seed 000 metrics derived from the image."""

from __future__ import annotations

from controller import metrics
from controller.image import MetadataImage
from controller.logic_config import ControllerConfig
from controller.records import Partition, Topic
from controller.requests import IsrChange, NewPartitions, Reassignment

from .harness import SESSION_MS, Cluster, uuids


def test_metrics_of_a_healthy_managed_cluster() -> None:
    c = Cluster()
    c.start({1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"})
    c.create("t", 6)
    m = metrics.collect(c.image)
    assert m.effective_rf == {"t": 3}
    assert set(m.rack_aware.values()) == {True} and len(m.rack_aware) == 6
    assert m.rf1_topics_total == 0
    assert m.under_replicated_partitions == 0 and m.offline_partitions == 0
    assert (m.brokers_registered, m.brokers_fenced) == (6, 0)


def test_fenced_and_offline() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b"})
    c.create("t", 2)
    c.advance(SESSION_MS + 1, heartbeating=[1])
    m = metrics.collect(c.image)
    assert m.under_replicated_partitions == 2 and m.offline_partitions == 0
    assert m.brokers_fenced == 1
    c.advance(SESSION_MS + 1)
    # Diskless: offline only once no broker at all is alive (the transformer serves a
    # diskless partition from any alive broker).
    assert metrics.offline(c.image) == [("t", 0), ("t", 1)]
    c.heartbeat(1)
    assert metrics.offline(c.image) == []
    c.heartbeat(2)
    assert metrics.under_replicated(c.image) == [] and metrics.offline(c.image) == []


def test_rack_aware_flag_and_legacy_topics() -> None:
    c = Cluster()
    c.start({1: "a", 2: "a", 3: "b"})
    c.create("t", 2)
    # An operator moves partition 0 to two brokers of one rack: no longer rack-aware.
    c.commit(c.logic.alter_partition_reassignments(c.image, [Reassignment("t", 0, (1, 2))]))
    assert metrics.rack_aware(c.image) == {("t", 0): False, ("t", 1): True}
    # A legacy RF=1 topic (and one naming an unknown broker).
    tid = c.config.new_uuid()
    c.commit(
        [Topic("legacy", tid), Partition(tid, 0, (3,), (3,), 3), Partition(tid, 1, (9,), (), -1)]
    )
    assert metrics.rf1_topics(c.image) == ["legacy"]
    assert metrics.effective_rf(c.image) == {"t": 2, "legacy": 1}
    aware = metrics.rack_aware(c.image)
    # RF=1 spans min(1, 2 racks) = 1 rack: rack-aware; an unknown broker has no known rack.
    assert aware[("legacy", 0)] is True and aware[("legacy", 1)] is False
    assert ("legacy", 1) in metrics.under_replicated(c.image)
    c.commit(c.logic.expand_legacy_topics(c.image))
    assert metrics.rf1_topics(c.image) == []


def test_rf1_is_not_legacy_in_a_single_rack_cluster() -> None:
    c = Cluster()
    c.start({1: None, 2: None})
    c.create("t", 2)
    m = metrics.collect(c.image)
    assert m.effective_rf == {"t": 1} and m.rf1_topics_total == 0
    assert set(m.rack_aware.values()) == {True}


def test_effective_rf_ignores_replicas_being_added() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b", 3: "c"})
    c.create("t", 1)
    c.advance(SESSION_MS + 1, heartbeating=[1, 2])
    c.register(4, "d")  # fenced: a reassignment to it stays pending
    p = c.partitions("t")[0]
    c.commit(
        c.logic.alter_partition_reassignments(c.image, [Reassignment("t", 0, (*p.replicas, 4))])
    )
    assert c.partitions("t")[0].reassigning
    assert metrics.effective_rf(c.image) == {"t": 3}


def test_a_classic_partition_with_a_lagging_follower_is_under_replicated() -> None:
    """Kafka's meaning: the ISR is smaller than the replica set, also with every broker
    alive (a follower fell behind and its leader removed it)."""
    c = Cluster(ControllerConfig(new_uuid=uuids(), classic_topics=True))
    c.start({1: "a", 2: "b", 3: "c"})
    c.create("c", 1, replication_factor=3, configs={"diskless.enable": "false"})
    p = c.partitions("c")[0]
    change = IsrChange(c.image.topic("c").topic_id, 0, p.leader_epoch, p.partition_epoch,
                       (p.leader,))  # fmt: skip
    c.commit(c.logic.alter_partition(c.image, p.leader, c.epochs[p.leader], [change]))
    assert c.partitions("c")[0].isr == (p.leader,) and not c.image.offline_replicas(p)
    assert metrics.under_replicated(c.image) == [("c", 0)]
    assert metrics.offline(c.image) == []
    # Seed 000's metrics are about diskless topics only.
    assert metrics.effective_rf(c.image) == {} and metrics.rack_aware(c.image) == {}


def test_rack_aware_means_one_replica_per_rack() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b", 3: "c", 4: "a"})
    c.create("t", 1)
    assert metrics.rack_aware(c.image) == {("t", 0): True}
    # Racks a, a, b, c: two replicas share rack a, although every rack has one.
    p = c.partitions("t")[0]
    extra = 4 if 1 in p.replicas else 1
    c.commit(
        c.logic.alter_partition_reassignments(c.image, [Reassignment("t", 0, (*p.replicas, extra))])
    )
    assert len(c.partitions("t")[0].replicas) == 4
    assert metrics.rack_aware(c.image) == {("t", 0): False}


def test_effective_rf_is_the_rf_assigned_at_creation() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b"})
    c.create("t", 2)
    c.start({3: "c"})  # a rack added later changes neither the RF nor rack-awareness
    c.commit(c.logic.alter_partition_reassignments(c.image, [Reassignment("t", 0, (1, 2, 3))]))
    assert len(c.partitions("t")[0].replicas) == 3
    assert metrics.effective_rf(c.image) == {"t": 2}
    assert set(metrics.rack_aware(c.image).values()) == {True}


def test_a_topic_created_with_one_rack_is_not_legacy_when_a_second_registers() -> None:
    """Static placement (seed 000): RF=1 was the managed value when it was created."""
    c = Cluster(ControllerConfig(new_uuid=uuids()))
    c.start({1: "a"})
    c.create("t", 2)
    assert c.image.topic("t").legacy is False
    c.start({2: "b"})
    assert metrics.rf1_topics(c.image) == []
    assert metrics.collect(c.image).rf1_topics_total == 0
    # Not expanded by controller.legacy.rf.expansion.enable either.
    assert c.logic.expand_legacy_topics(c.image) == []
    # Its new partitions keep its RF.
    c.commit(c.logic.create_partitions(c.image, [NewPartitions("t", 4)]))
    assert [len(p.replicas) for p in c.partitions("t").values()] == [1, 1, 1, 1]


def test_a_legacy_topic_is_recorded_at_creation_and_expanded() -> None:
    c = Cluster()
    c.start({1: "a"})
    tid = c.config.new_uuid()
    # As the embedded controller imports a pre-controller catalog: RF=1 by the old rule.
    c.commit([Topic("old", tid, 1, legacy=True), Partition(tid, 0, (1,), (1,), 1)])
    assert metrics.rf1_topics(c.image) == []  # one rack: RF=1 is what it would get now
    c.start({2: "b"})
    assert metrics.rf1_topics(c.image) == ["old"]
    c.commit(c.logic.expand_legacy_topics(c.image))
    assert len(c.partitions("old")[0].replicas) == 2 and metrics.rf1_topics(c.image) == []


def test_topics_from_an_older_log_get_their_creation_fields_from_the_log() -> None:
    """Topic records written before the fields: legacy iff a diskless single replica while
    several racks were registered (the managed rule never made that), as of that record."""
    c = Cluster()
    c.start({1: "a"})
    one, two, three = (c.config.new_uuid() for _ in range(3))
    c.commit([Topic("one_rack", one), Partition(one, 0, (1,), (1,), 1)])
    c.start({2: "b"})
    c.commit([Topic("faked", two), Partition(two, 0, (2,), (2,), 2)])
    c.commit([Topic("managed", three), Partition(three, 0, (1, 2), (1, 2), 1)])
    topics = {t.name: (t.replication_factor, t.legacy) for t in c.image.topics.values()}
    assert topics == {"one_rack": (1, False), "faked": (1, True), "managed": (2, False)}
    assert metrics.rf1_topics(c.image) == ["faked"]
    # Snapshots carry the values: a rebuilt image agrees even with other racks by then.
    c.start({3: "c"})
    assert MetadataImage.from_records(c.image.snapshot()) == c.image
    assert c.rebuilt() == c.image
