"""Rack-aware placement of diskless topics: RF = rack count, one replica per rack, balanced."""

from __future__ import annotations

from collections import Counter

import pytest
from kio.schema.errors import ErrorCode

from controller.placement import Load, place_partitions, plan_rf_expansion
from controller.records import Partition, Topic
from controller.requests import NewPartitions, NewTopic

from .harness import SESSION_MS, Cluster

SIX_IN_THREE = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}


def racks_of(c: Cluster, replicas: tuple[int, ...]) -> list[str | None]:
    return [c.image.brokers[r].rack for r in replicas]


def test_six_brokers_three_racks_rf3_one_replica_per_rack_balanced() -> None:
    c = Cluster()
    c.start(SIX_IN_THREE)
    n = 60
    result = c.create("orders", n)
    assert result.error_code == ErrorCode.none
    assert result.replication_factor == 3 and result.num_partitions == n
    parts = c.partitions("orders")
    assert sorted(parts) == list(range(n))
    leaders: Counter[int] = Counter()
    replicas: Counter[int] = Counter()
    for p in parts.values():
        assert len(p.replicas) == 3
        assert sorted(racks_of(c, p.replicas)) == ["a", "b", "c"]
        assert p.leader == p.replicas[0]  # everyone alive: the preferred replica leads
        assert set(p.isr) == set(p.replicas)
        leaders[p.leader] += 1
        replicas.update(p.replicas)
    for node in SIX_IN_THREE:
        assert abs(leaders[node] - n / 6) <= 1, leaders
        assert abs(replicas[node] - n * 3 / 6) <= 1, replicas


@pytest.mark.parametrize("n", [1, 5, 6, 7, 12])
def test_every_broker_leads_before_any_leads_twice(n: int) -> None:
    c = Cluster()
    c.start(SIX_IN_THREE)
    c.create("orders", n)
    leaders = Counter(p.leader for p in c.partitions("orders").values())
    counts = [leaders[b] for b in SIX_IN_THREE]
    assert max(counts) - min(counts) <= 1, leaders


def test_balance_holds_for_partition_counts_not_divisible_and_across_topics() -> None:
    c = Cluster()
    c.start(SIX_IN_THREE)
    total_leaders: Counter[int] = Counter()
    total = 0
    for i, n in enumerate([1, 5, 7, 11, 2]):
        c.create(f"t{i}", n)
        total += n
        leaders = Counter(p.leader for p in c.partitions(f"t{i}").values())
        # Within one topic: each broker leads n/6 rounded, ± 1.
        assert all(abs(leaders[b] - n / 6) <= 1 for b in SIX_IN_THREE), (n, leaders)
        total_leaders.update(leaders)
    # Across topics the load carries over, so the cluster stays balanced too.
    assert max(total_leaders.values()) - min(total_leaders[b] for b in SIX_IN_THREE) <= 1


def test_failover_order_spreads_over_racks() -> None:
    # The second replica (who leads when the first is down) is not always in the same rack.
    c = Cluster()
    c.start(SIX_IN_THREE)
    c.create("t", 12)
    second_racks = Counter(racks_of(c, p.replicas)[1] for p in c.partitions("t").values())
    assert set(second_racks) == {"a", "b", "c"}


def test_a_failed_leaders_partitions_fail_over_to_several_brokers() -> None:
    c = Cluster()
    c.start(SIX_IN_THREE)
    c.create("t", 24)
    led_by_1 = [i for i, p in c.partitions("t").items() if p.leader == 1]
    assert len(led_by_1) == 4
    # Diskless leaders stay on a lost broker (seed 000); one removed for good loses them.
    c.commit(c.logic.unregister_broker(c.image, 1))
    new_leaders = Counter(c.partitions("t")[i].leader for i in led_by_1)
    assert len(new_leaders) >= 3, new_leaders


def test_load_counts_shared_partitions() -> None:
    load = Load()
    load.add((1, 2, 3))
    load.add((1, 4), counted=1)  # 1 was counted before: only 4 is new
    assert load.replicas == {1: 1, 2: 1, 3: 1, 4: 1}
    assert load.leaders == {1: 1}
    assert load.shared == {(1, 2): 1, (1, 3): 1, (2, 3): 1, (1, 4): 1}
    assert load.failover == {(1, 2): 1, (1, 4): 1}
    assert load.sharing(1, [2, 3, 4]) == 3


def test_uneven_racks() -> None:
    c = Cluster()
    c.start({1: "a", 2: "a", 3: "a", 4: "a", 5: "b", 6: "c"})
    n = 24
    assert c.create("t", n).replication_factor == 3
    parts = c.partitions("t")
    replicas: Counter[int] = Counter()
    leaders: Counter[int] = Counter()
    for p in parts.values():
        assert sorted(racks_of(c, p.replicas)) == ["a", "b", "c"]
        assert 5 in p.replicas and 6 in p.replicas  # the only broker of their rack
        replicas.update(p.replicas)
        leaders[p.leader] += 1
    # Rack a's four brokers share its replicas evenly.
    assert [replicas[b] for b in (1, 2, 3, 4)] == [6, 6, 6, 6]
    # Leaders still spread over all six brokers.
    assert all(abs(leaders[b] - n / 6) <= 1 for b in range(1, 7)), leaders


def test_brokers_without_rack_are_one_rack() -> None:
    c = Cluster()
    c.start({1: None, 2: None, 3: None})
    assert c.create("t", 6).replication_factor == 1
    leaders = Counter(p.leader for p in c.partitions("t").values())
    assert leaders == {1: 2, 2: 2, 3: 2}


def test_rackless_brokers_count_as_one_more_rack_in_a_mixed_cluster() -> None:
    c = Cluster()
    c.start({1: None, 2: "a", 3: "b", 4: None})
    assert c.create("t", 4).replication_factor == 3
    for p in c.partitions("t").values():
        assert sorted(racks_of(c, p.replicas), key=str) == sorted([None, "a", "b"], key=str)


def test_add_partitions_keep_the_topics_rf_when_racks_are_added() -> None:
    """Seed 000: placement is static; new partitions use the one-per-rack logic with the
    topic's RF, not the rack count now (else one topic mixes RF 2 and 3)."""
    c = Cluster()
    c.start({1: "a", 2: "b"})
    c.create("t", 2)
    assert all(len(p.replicas) == 2 for p in c.partitions("t").values())
    c.start({3: "c", 4: "c"})  # a rack is added
    (result,) = c.commit(c.logic.create_partitions(c.image, [NewPartitions("t", 8)]))
    assert result.error_code == ErrorCode.none
    parts = c.partitions("t")
    assert [len(parts[i].replicas) for i in range(8)] == [2] * 8
    for i in range(2, 8):
        racks = racks_of(c, parts[i].replicas)
        assert len(set(racks)) == 2  # one replica per rack, over two of the three racks
    # The new rack takes its share of the new replicas (it was the least loaded).
    new = Counter(r for i in range(2, 8) for r in parts[i].replicas)
    assert new[3] + new[4] >= 4
    # A topic created now gets the three racks.
    assert c.create("u", 1).replication_factor == 3


def test_add_partitions_keep_the_topics_rf_when_racks_go_away() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b", 3: "c", 4: "a"})
    c.create("t", 1)
    c.commit(c.logic.unregister_broker(c.image, 3))  # rack c is gone
    c.commit(c.logic.create_partitions(c.image, [NewPartitions("t", 3)]))
    parts = c.partitions("t")
    for i in (1, 2):
        assert len(parts[i].replicas) == 3 and len(set(parts[i].replicas)) == 3
        assert set(racks_of(c, parts[i].replicas)) == {"a", "b"}


def test_add_partitions_beyond_the_brokers_is_refused() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b", 3: "c"})
    c.create("t", 1)
    c.commit(c.logic.unregister_broker(c.image, 3))
    c.commit(c.logic.unregister_broker(c.image, 2))
    (result,) = c.commit(c.logic.create_partitions(c.image, [NewPartitions("t", 2)]))
    assert result.error_code == ErrorCode.invalid_replication_factor


def test_unfenced_brokers_are_preferred_within_a_rack() -> None:
    c = Cluster()
    c.start({1: "a", 2: "a", 3: "b"})
    c.advance(5_000, heartbeating=[1, 3])
    c.advance(5_000, heartbeating=[1, 3])  # broker 2 is fenced now
    assert c.image.brokers[2].fenced
    c.create("t", 4)
    for p in c.partitions("t").values():
        assert 2 not in p.replicas and sorted(p.replicas) == [1, 3]


def test_fenced_only_rack_still_gets_its_replica_but_not_the_leadership() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b"})
    c.advance(5_000, heartbeating=[1])
    c.advance(5_000, heartbeating=[1])
    assert c.image.brokers[2].fenced
    result = c.create("t", 3)
    assert result.replication_factor == 2  # racks count registered brokers
    for p in c.partitions("t").values():
        assert p.replicas == (1, 2) and p.leader == 1 and p.isr == (1, 2)


def test_rf_other_than_the_managed_one_is_rejected() -> None:
    c = Cluster()
    c.start(SIX_IN_THREE)
    for rf in (2, 4, 0, -2):
        result = c.create("t", 3, replication_factor=rf)
        assert result.error_code == ErrorCode.invalid_replication_factor
        assert "managed" in result.error_message and "3 rack" in result.error_message
    assert c.create("t1", 3, replication_factor=1).replication_factor == 3
    assert c.create("t2", 3, replication_factor=-1).replication_factor == 3
    assert c.image.topic("t") is None


def test_rf_equal_to_the_rack_count_is_the_managed_one() -> None:
    """Kafka Connect's and MirrorMaker 2's internal topics ask for RF 3 by default (a Kafka
    of three brokers grants it): in three racks that is the factor the controller would
    choose, so it is granted, one replica per rack, as -1 would be."""
    c = Cluster()
    c.start(SIX_IN_THREE)
    result = c.create("mm2-configs.kafka.internal", 1, replication_factor=3)
    assert result.error_code == ErrorCode.none and result.replication_factor == 3
    (partition,) = c.partitions("mm2-configs.kafka.internal").values()
    assert sorted(racks_of(c, partition.replicas)) == ["a", "b", "c"]
    # One rack: 3 is more than the cluster can place, as on a one-broker Kafka.
    single = Cluster()
    single.start({1: "a", 2: "a"})
    refused = single.create("t", 1, replication_factor=3)
    assert refused.error_code == ErrorCode.invalid_replication_factor
    assert "use -1, 1 or 1" in refused.error_message


def test_manual_assignments_are_rejected() -> None:
    c = Cluster()
    c.start(SIX_IN_THREE)
    result = c.create("t", -1, assignments={0: [1, 3, 5]})
    assert result.error_code == ErrorCode.invalid_request
    assert "Manual partition assignments" in result.error_message
    c.create("u", 1)
    (result,) = c.commit(
        c.logic.create_partitions(c.image, [NewPartitions("u", 2, assignments=[[1, 3, 5]])])
    )
    assert result.error_code == ErrorCode.invalid_request
    assert len(c.partitions("u")) == 1


def test_no_broker_or_no_unfenced_broker() -> None:
    c = Cluster()
    result = c.create("t", 1)
    assert result.error_code == ErrorCode.invalid_replication_factor
    assert "no broker is registered" in result.error_message
    c.register(1, "a")  # registered, still fenced
    assert "no broker is unfenced" in c.create("t", 1).error_message


def test_place_partitions_is_deterministic_and_updates_load() -> None:
    c = Cluster()
    c.start(SIX_IN_THREE)
    load = Load()
    first = place_partitions(c.image.brokers, load.copy(), 12)
    again = place_partitions(c.image.brokers, load, 12)
    assert first == again
    assert sum(load.replicas.values()) == 36 and sum(load.leaders.values()) == 12


def test_plan_rf_expansion_of_a_legacy_rf1_topic() -> None:
    c = Cluster()
    c.start(SIX_IN_THREE)
    # A legacy topic written by the old binary: RF=1, one replica naming an unknown broker.
    legacy = c.config.new_uuid()
    c.commit(
        [
            Topic("legacy", legacy),
            Partition(legacy, 0, (3,), (3,), 3),
            Partition(legacy, 1, (42,), (), -1),
        ]
    )
    changes = plan_rf_expansion(c.image, legacy)
    assert [ch.partition for ch in changes] == [0, 1]
    c.commit(changes)
    p0, p1 = c.partitions("legacy")[0], c.partitions("legacy")[1]
    # The existing replica stays first and keeps leading (no leader change for clients).
    assert p0.replicas[0] == 3 and p0.leader == 3 and p0.leader_epoch == 0
    assert sorted(racks_of(c, p0.replicas)) == ["a", "b", "c"]
    assert set(p0.isr) == set(p0.replicas)
    # The unknown broker is replaced by a fresh placement, and a leader is elected.
    assert 42 not in p1.replicas and sorted(racks_of(c, p1.replicas)) == ["a", "b", "c"]
    assert p1.leader == p1.replicas[0] and p1.leader_epoch == 1
    # Done: nothing more to plan; managed topics are never touched.
    assert plan_rf_expansion(c.image, legacy) == []
    c.create("managed", 3)
    assert plan_rf_expansion(c.image, c.image.topic("managed").topic_id) == []


def test_expansion_waits_while_every_broker_is_fenced() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b"})
    legacy = c.config.new_uuid()
    c.commit([Topic("legacy", legacy), Partition(legacy, 0, (42,), (), -1)])
    c.advance(SESSION_MS + 1)
    assert plan_rf_expansion(c.image, legacy) == []
    c.heartbeat(1)
    assert len(plan_rf_expansion(c.image, legacy)) == 1


def test_no_expansion_in_a_single_rack_cluster() -> None:
    c = Cluster()
    c.start({1: None, 2: None})
    c.create("t", 2)
    assert plan_rf_expansion(c.image, c.image.topic("t").topic_id) == []
    assert c.logic.expand_legacy_topics(c.image) == []


def test_expand_legacy_topics_limits_and_balances() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b"})
    for name in ("x", "y", "z"):
        tid = c.config.new_uuid()
        c.commit([Topic(name, tid), *(Partition(tid, i, (1,), (1,), 1) for i in range(2))])
    c.commit(c.logic.expand_legacy_topics(c.image, max_topics=2))
    rfs = {n: {len(p.replicas) for p in c.partitions(n).values()} for n in ("x", "y", "z")}
    assert rfs == {"x": {2}, "y": {2}, "z": {1}}
    c.commit(c.logic.expand_legacy_topics(c.image))
    assert all(len(p.replicas) == 2 for p in c.partitions("z").values())


def test_create_many_topics_in_one_request_shares_the_load() -> None:
    c = Cluster()
    c.start(SIX_IN_THREE)
    results = c.commit(c.logic.create_topics(c.image, [NewTopic(f"t{i}", 1) for i in range(6)]))
    assert all(r.error_code == ErrorCode.none for r in results)
    leaders = Counter(c.partitions(f"t{i}")[0].leader for i in range(6))
    assert leaders == {b: 1 for b in SIX_IN_THREE}
