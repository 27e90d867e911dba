"""Seed 000 metrics derived from the image."""

from __future__ import annotations

from controller import metrics
from controller.records import Partition, Topic
from controller.requests import Reassignment

from .harness import SESSION_MS, Cluster


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
    assert metrics.offline(c.image) == [("t", 0), ("t", 1)]
    c.heartbeat(1)
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
