"""The controller's side of classic topics: Kafka's rack-aware placement with a chosen RF,
manual assignments, election from the ISR (clean and unclean), and AlterPartition."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from controller.classic_placement import place_classic, rack_alternated
from controller.logic_config import ControllerConfig
from controller.placement import Load
from controller.requests import IsrChange, NewPartitions, Reassignment

from .harness import SESSION_MS, Cluster, uuids

THREE_RACKS = {1: "a", 2: "b", 3: "c", 4: "a", 5: "b", 6: "c"}
CLASSIC = {"diskless.enable": "false"}


def cluster(racks: dict[int, str | None] | None = None, **kwargs: Any) -> Cluster:
    c = Cluster(ControllerConfig(new_uuid=uuids(), classic_topics=True, **kwargs))
    c.start(THREE_RACKS if racks is None else racks)
    return c


def create(c: Cluster, name: str, partitions: int = 1, rf: int = 3, **kwargs: Any) -> Any:
    configs = {**CLASSIC, **kwargs.pop("configs", {})}
    return c.create(name, partitions, replication_factor=rf, configs=configs, **kwargs)


def rack_of(node_id: int) -> str:
    return THREE_RACKS[node_id]


# --- placement ---------------------------------------------------------------------------


def test_rack_aware_placement_spans_racks_and_spreads_leaders() -> None:
    c = cluster()
    result = create(c, "orders", partitions=12, rf=3)
    assert result.error_code == ErrorCode.none and result.replication_factor == 3
    topic = c.image.topic("orders")
    assert topic is not None and not topic.diskless
    assert topic.configs["diskless.enable"] == "false"
    for p in topic.partitions.values():
        assert len(p.replicas) == 3
        assert {rack_of(r) for r in p.replicas} == {"a", "b", "c"}
        # Every replica of a new partition is alive and holds the (empty) log: all in sync.
        assert p.isr == p.replicas and p.leader == p.replicas[0]
    leaders = Counter(p.leader for p in topic.partitions.values())
    assert sorted(leaders.values()) == [2] * 6
    # Followers of one leader vary (a failed leader's partitions do not all go to one broker).
    seconds = {p.replicas[1] for p in topic.partitions.values() if p.replicas[0] == 1}
    assert len(seconds) == 2


def test_rf_smaller_than_racks_uses_distinct_racks() -> None:
    c = cluster()
    create(c, "t", partitions=6, rf=2)
    for p in c.partitions("t").values():
        assert len({rack_of(r) for r in p.replicas}) == 2


def test_rf_larger_than_racks_reuses_racks_but_not_brokers() -> None:
    c = cluster({1: "a", 2: "a", 3: "b", 4: "b"})
    create(c, "t", partitions=4, rf=3)
    for p in c.partitions("t").values():
        assert len(set(p.replicas)) == 3


def test_successive_topics_spread_leaders() -> None:
    c = cluster({1: None, 2: None, 3: None})
    for name in ("a", "b", "c"):
        create(c, name, partitions=1, rf=1)
    leaders = {c.partitions(name)[0].leader for name in ("a", "b", "c")}
    assert leaders == {1, 2, 3}


def test_rack_alternated_order() -> None:
    c = cluster({6: "c", 5: "b", 4: "a", 3: "c", 2: "b", 1: "a", 7: "a"})
    order = [b.node_id for b in rack_alternated(list(c.image.brokers.values()))]
    assert order == [1, 2, 3, 4, 5, 6, 7]


@pytest.mark.parametrize(
    ("rf", "code"),
    [
        (7, ErrorCode.invalid_replication_factor),
        (0, ErrorCode.invalid_replication_factor),
        (-2, ErrorCode.invalid_replication_factor),
    ],
)
def test_bad_replication_factor(rf: int, code: ErrorCode) -> None:
    c = cluster()
    assert create(c, "t", rf=rf).error_code == code
    assert c.image.topic("t") is None


def test_rf_counts_only_unfenced_brokers() -> None:
    c = cluster()
    c.advance(SESSION_MS + 1, heartbeating=[1, 2, 3, 4])
    result = create(c, "t", rf=5)
    assert result.error_code == ErrorCode.invalid_replication_factor
    assert "only 4 broker(s)" in (result.error_message or "")
    create(c, "u", partitions=8, rf=2)
    assert all(set(p.replicas) <= {1, 2, 3, 4} for p in c.partitions("u").values())


def test_default_replication_factor() -> None:
    c = cluster(default_replication_factor=2)
    assert create(c, "t", rf=-1).replication_factor == 2


def test_cluster_default_kind() -> None:
    c = cluster(default_diskless=False)
    result = c.create("plain", 2, replication_factor=2)
    assert result.error_code == ErrorCode.none
    topic = c.image.topic("plain")
    assert topic is not None and not topic.diskless
    # An explicit diskless.enable still makes a diskless topic with the managed RF.
    c.create("dl", 1, configs={"diskless.enable": "true"})
    assert len(c.partitions("dl")[0].replicas) == 3


def test_refused_while_brokers_do_not_serve_classic_topics() -> None:
    c = Cluster(ControllerConfig(new_uuid=uuids()))
    c.start(THREE_RACKS)
    assert create(c, "t").error_code == ErrorCode.invalid_config


def test_placement_function_updates_load() -> None:
    brokers = cluster().image.brokers
    load = Load()
    first = place_classic(brokers, load, 3, 2)
    second = place_classic(brokers, load, 3, 2)
    assert {r[0] for r in first} | {r[0] for r in second} == set(THREE_RACKS)


# --- manual assignment --------------------------------------------------------------------


def test_manual_assignment() -> None:
    c = cluster()
    result = create(c, "t", partitions=-1, rf=-1, assignments={0: [3, 1], 1: [2, 4]})
    assert result.error_code == ErrorCode.none
    parts = c.partitions("t")
    assert parts[0].replicas == (3, 1) and parts[0].leader == 3
    assert parts[1].replicas == (2, 4)


@pytest.mark.parametrize(
    ("kwargs", "code"),
    [
        ({"partitions": 2, "assignments": {0: [1, 2]}}, ErrorCode.invalid_request),
        ({"rf": 2, "assignments": {0: [1, 2]}}, ErrorCode.invalid_request),
        ({"assignments": {0: [1, 2], 2: [2, 3]}}, ErrorCode.invalid_replica_assignment),
        ({"assignments": {0: [1, 1]}}, ErrorCode.invalid_replica_assignment),
        ({"assignments": {0: [1, 9]}}, ErrorCode.invalid_replica_assignment),
        ({"assignments": {0: [1, 2], 1: [3]}}, ErrorCode.invalid_replica_assignment),
        ({"assignments": {0: []}}, ErrorCode.invalid_replica_assignment),
    ],
)
def test_bad_manual_assignment(kwargs: dict[str, Any], code: ErrorCode) -> None:
    c = cluster()
    args = {"partitions": -1, "rf": -1, **kwargs}
    assert create(c, "t", **args).error_code == code
    assert c.image.topic("t") is None


def test_create_partitions_keeps_rf_and_takes_assignments() -> None:
    c = cluster()
    create(c, "t", partitions=2, rf=2)
    (r,) = c.commit(c.logic.create_partitions(c.image, [NewPartitions("t", 4)]))
    assert r.error_code == ErrorCode.none
    assert [len(p.replicas) for p in c.partitions("t").values()] == [2, 2, 2, 2]
    (r,) = c.commit(c.logic.create_partitions(c.image, [NewPartitions("t", 5, [[6, 5]])]))
    assert r.error_code == ErrorCode.none and c.partitions("t")[4].replicas == (6, 5)
    for assignments in ([[1]], [[1, 2], [2, 3]], [[1, 1]]):
        (r,) = c.commit(c.logic.create_partitions(c.image, [NewPartitions("t", 6, assignments)]))
        assert r.error_code == ErrorCode.invalid_replica_assignment, assignments


def test_changing_the_kind_starts_a_migration_and_keeps_the_kind_until_sealed() -> None:
    from controller.requests import AlterTopicConfigs, ConfigOp, OpType

    c = cluster()
    create(c, "t")
    for op in (ConfigOp("diskless.enable", OpType.SET, "true"), ConfigOp("diskless.enable", 1)):
        (r,) = c.commit(c.logic.alter_configs(c.image, [AlterTopicConfigs("t", [op])]))
        assert r.error_code == ErrorCode.none
    topic = c.image.topic("t")
    # (tests/unit/controller/test_migration.py: the rest of the migration)
    assert topic is not None and not topic.diskless and topic.migration is not None


# --- election -----------------------------------------------------------------------------


def fence(c: Cluster, *node_ids: int) -> None:
    for n in node_ids:
        c.heartbeat(n, want_shutdown=True)


def unfence(c: Cluster, n: int) -> None:
    assert c.heartbeat(n).is_fenced is False


def test_leader_moves_to_next_isr_member() -> None:
    c = cluster()
    create(c, "t", assignments={0: [1, 2, 3]}, partitions=-1, rf=-1)
    fence(c, 1)
    p = c.partitions("t")[0]
    assert p.leader == 2 and p.isr == (2, 3) and p.leader_epoch == 1
    # Back, but not in sync until the leader says so: no ISR change, no leadership.
    unfence(c, 1)
    p = c.partitions("t")[0]
    assert p.leader == 2 and p.isr == (2, 3) and p.leader_epoch == 1


def test_last_isr_member_is_kept_and_leads_again() -> None:
    c = cluster()
    create(c, "t", assignments={0: [1, 2, 3]}, partitions=-1, rf=-1)
    fence(c, 1)
    fence(c, 2)
    fence(c, 3)
    p = c.partitions("t")[0]
    assert p.leader == -1 and p.isr == (3,)
    # Replica 1 returns first: not in the ISR, so no clean leader.
    unfence(c, 1)
    p = c.partitions("t")[0]
    assert p.leader == -1 and p.isr == (3,)
    unfence(c, 3)
    p = c.partitions("t")[0]
    assert p.leader == 3 and p.isr == (3,)


def test_unclean_election_when_enabled() -> None:
    c = cluster()
    create(
        c,
        "t",
        assignments={0: [1, 2, 3]},
        partitions=-1,
        rf=-1,
        configs={"unclean.leader.election.enable": "true"},
    )
    fence(c, 1, 2, 3)
    unfence(c, 2)
    p = c.partitions("t")[0]
    assert p.leader == 2 and p.isr == (2,)


def test_diskless_partitions_keep_their_rule() -> None:
    c = cluster()
    c.create("dl", 1)
    before = c.partitions("dl")[0]
    fence(c, before.replicas[0])
    unfence(c, before.replicas[0])
    after = c.partitions("dl")[0]
    # Diskless: a returning broker is back in the ISR at once.
    assert after.isr == before.isr


# --- AlterPartition -----------------------------------------------------------------------


def isr_change(c: Cluster, topic: str, new_isr: tuple[int, ...], **over: Any) -> Any:
    t = c.image.topic(topic)
    assert t is not None
    p = t.partitions[0]
    broker = over.get("broker", p.leader)
    epoch = over.get("broker_epoch", c.epochs[broker])
    change = IsrChange(
        t.topic_id,
        0,
        over.get("leader_epoch", p.leader_epoch),
        over.get("partition_epoch", p.partition_epoch),
        new_isr,
    )
    result = c.commit(c.logic.alter_partition(c.image, broker, epoch, [change]))
    return result.error_code, (result.partitions[0] if result.partitions else None)


def test_shrink_and_expand() -> None:
    c = cluster()
    create(c, "t", assignments={0: [1, 2, 3]}, partitions=-1, rf=-1)
    code, r = isr_change(c, "t", (1, 2))
    assert code == ErrorCode.none and r.error_code == ErrorCode.none
    assert r.isr == (1, 2) and r.partition_epoch == 1 and r.leader_epoch == 0
    p = c.partitions("t")[0]
    assert p.isr == (1, 2) and p.partition_epoch == 1 and p.leader_epoch == 0
    # Expansion; the answer is the state once committed, in replica order.
    code, r = isr_change(c, "t", (3, 1, 2))
    assert r.error_code == ErrorCode.none and r.isr == (1, 2, 3)
    assert c.partitions("t")[0].isr == (1, 2, 3)
    assert c.rebuilt().topic("t").partitions[0].isr == (1, 2, 3)  # type: ignore[union-attr]


@pytest.mark.parametrize(
    ("over", "new_isr", "code"),
    [
        ({"partition_epoch": 5}, (1, 2), ErrorCode.invalid_update_version),
        ({"leader_epoch": -1}, (1, 2), ErrorCode.fenced_leader_epoch),
        ({"leader_epoch": 3}, (1, 2), ErrorCode.not_leader_or_follower),
        ({"broker": 2}, (2, 3), ErrorCode.invalid_request),
        ({}, (2, 3), ErrorCode.invalid_request),  # drops the leader
        ({}, (1, 5), ErrorCode.invalid_request),  # not a replica
        ({}, (1, 1), ErrorCode.invalid_request),
        ({}, (), ErrorCode.invalid_request),
    ],
)
def test_alter_partition_refusals(
    over: dict[str, Any], new_isr: tuple[int, ...], code: Any
) -> None:
    c = cluster()
    create(c, "t", assignments={0: [1, 2, 3]}, partitions=-1, rf=-1)
    _, r = isr_change(c, "t", new_isr, **over)
    assert r.error_code == code
    p = c.partitions("t")[0]
    assert p.isr == (1, 2, 3) and p.partition_epoch == 0


def test_fenced_replica_cannot_join() -> None:
    c = cluster()
    create(c, "t", assignments={0: [1, 2, 3]}, partitions=-1, rf=-1)
    fence(c, 3)
    assert c.partitions("t")[0].isr == (1, 2)
    _, r = isr_change(c, "t", (1, 2, 3))
    assert r.error_code == ErrorCode.ineligible_replica


def test_stale_broker_epoch() -> None:
    c = cluster()
    create(c, "t", assignments={0: [1, 2, 3]}, partitions=-1, rf=-1)
    code, r = isr_change(c, "t", (1, 2), broker_epoch=999)
    assert code == ErrorCode.stale_broker_epoch and r is None


def test_diskless_partition_refused() -> None:
    c = cluster()
    c.create("dl", 1)
    p = c.partitions("dl")[0]
    _, r = isr_change(c, "dl", p.isr[:1])
    assert r.error_code == ErrorCode.invalid_request


def test_classic_reassignment_completes_when_caught_up() -> None:
    c = cluster()
    create(c, "t", assignments={0: [1, 2]}, partitions=-1, rf=-1)
    (r,) = c.commit(c.logic.alter_partition_reassignments(c.image, [Reassignment("t", 0, [3, 2])]))
    assert r.error_code == ErrorCode.none
    p = c.partitions("t")[0]
    # Broker 3 is alive but has not caught up: the reassignment waits for it.
    assert p.adding_replicas == (3,) and p.removing_replicas == (1,) and p.leader == 1
    _, res = isr_change(c, "t", (1, 2, 3))
    assert res.error_code == ErrorCode.none
    p = c.partitions("t")[0]
    assert p.replicas == (3, 2) and not p.reassigning
    # The old leader left with the reassignment: the first target replica in sync leads.
    assert p.isr == (3, 2) and p.leader == 3 and p.leader_epoch == 1
    assert res.leader == 3 and res.leader_epoch == 1


def test_unbalanced_racks_still_span_two_racks() -> None:
    # Walking the rack-alternated list (1, 4, 2, 3) from broker 2 meets broker 3 first, in
    # the same rack: it is skipped for broker 4 while a rack holds no replica.
    c = cluster({1: "a", 2: "a", 3: "a", 4: "b"})
    create(c, "t", partitions=8, rf=2)
    for p in c.partitions("t").values():
        assert {4} & set(p.replicas), p.replicas
