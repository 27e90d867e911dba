"""ElectLeaders and the automatic preferred-leader rebalance (controller.leader_election)."""

from __future__ import annotations

from kio.schema.errors import ErrorCode

from controller.requests import AlterTopicConfigs, ConfigOp, IsrChange, LeaderElection

from .harness import Cluster
from .test_classic_topics import cluster, create, fence, isr_change, unfence

PREFERRED, UNCLEAN = 0, 1


def elect(c, election_type: int, partitions):  # type: ignore[no-untyped-def]
    return c.commit(c.logic.elect_leaders(c.image, LeaderElection(election_type, partitions)))


def codes(results) -> dict[tuple[str, int], int]:  # type: ignore[no-untyped-def]
    return {(r.topic, r.partition): r.error_code for r in results}


def test_preferred_election_brings_back_a_caught_up_preferred_replica() -> None:
    c = cluster()
    create(c, "t", assignments={0: [1, 2, 3]}, partitions=-1, rf=-1)
    fence(c, 1)
    unfence(c, 1)
    assert c.partitions("t")[0].leader == 2  # classic: back as a follower
    # Not in the ISR yet: it may lack acknowledged records.
    got = elect(c, PREFERRED, [("t", 0)])
    assert codes(got) == {("t", 0): ErrorCode.preferred_leader_not_available}
    assert c.partitions("t")[0].leader == 2
    code, _ = isr_change(c, "t", (1, 2, 3))  # the leader says it caught up
    assert code == ErrorCode.none
    got = elect(c, PREFERRED, [("t", 0)])
    assert codes(got) == {("t", 0): ErrorCode.none}
    p = c.partitions("t")[0]
    assert p.leader == 1 and p.leader_epoch == 2 and p.isr == (1, 2, 3)
    assert c.rebuilt().topic("t").partitions[0].leader == 1  # type: ignore[union-attr]
    # Again: nothing to do; unknown partitions are named.
    got = elect(c, PREFERRED, [("t", 0), ("t", 7), ("nope", 0)])
    assert codes(got) == {
        ("t", 0): ErrorCode.election_not_needed,
        ("t", 7): ErrorCode.unknown_topic_or_partition,
        ("nope", 0): ErrorCode.unknown_topic_or_partition,
    }


def test_all_partitions_leaves_out_those_that_need_nothing() -> None:
    c = cluster()
    create(c, "t", assignments={0: [1, 2, 3], 1: [2, 3, 1]}, partitions=-1, rf=-1)
    fence(c, 1)
    unfence(c, 1)
    isr_change(c, "t", (1, 2, 3))
    got = elect(c, PREFERRED, None)
    assert codes(got) == {("t", 0): ErrorCode.none}
    assert elect(c, PREFERRED, None) == []


def test_unclean_election_only_for_leaderless_partitions() -> None:
    c = cluster()
    create(c, "t", assignments={0: [1, 2, 3]}, partitions=-1, rf=-1)
    assert codes(elect(c, UNCLEAN, [("t", 0)])) == {("t", 0): ErrorCode.election_not_needed}
    fence(c, 1, 2, 3)
    assert codes(elect(c, UNCLEAN, [("t", 0)])) == {
        ("t", 0): ErrorCode.eligible_leaders_not_available
    }
    unfence(c, 2)  # not the last ISR member (3): no clean leader
    p = c.partitions("t")[0]
    assert p.leader == -1 and p.isr == (3,)
    assert codes(elect(c, UNCLEAN, [("t", 0)])) == {("t", 0): ErrorCode.none}
    p = c.partitions("t")[0]
    assert p.leader == 2 and p.isr == (2,)


def test_unknown_election_type_is_refused() -> None:
    c = cluster()
    create(c, "t", assignments={0: [1, 2, 3]}, partitions=-1, rf=-1)
    assert codes(elect(c, 9, [("t", 0)])) == {("t", 0): ErrorCode.invalid_request}


def rejoin_everywhere(c: Cluster, topic: str, leader: int, isr: tuple[int, ...]) -> None:
    """The leader of every partition of ``topic`` reports ``isr`` (its follower caught up)."""
    t = c.image.topic(topic)
    assert t is not None
    changes = [
        IsrChange(t.topic_id, i, p.leader_epoch, p.partition_epoch, isr)
        for i, p in t.partitions.items()
    ]
    result = c.commit(c.logic.alter_partition(c.image, leader, c.epochs[leader], changes))
    assert result.error_code == ErrorCode.none


def test_rebalance_moves_leaders_back_past_the_imbalance_threshold() -> None:
    c = cluster()
    # Broker 1 is the preferred leader of ten partitions.
    create(c, "t", assignments={i: [1, 2, 3] for i in range(10)}, partitions=-1, rf=-1)
    fence(c, 1)
    unfence(c, 1)
    assert all(p.leader == 2 for p in c.partitions("t").values())
    # Out of every ISR: nothing can move yet.
    assert c.logic.rebalance_leaders(c.image, 10) == []
    rejoin_everywhere(c, "t", 2, (1, 2, 3))
    # 10 of 10 led elsewhere > 10 %: all move back, each with a new leader epoch.
    c.commit(c.logic.rebalance_leaders(c.image, 10))
    assert all(p.leader == 1 and p.leader_epoch == 2 for p in c.partitions("t").values())
    assert c.logic.rebalance_leaders(c.image, 10) == []


def test_rebalance_tolerates_an_imbalance_under_the_threshold() -> None:
    c = cluster()
    create(c, "t", assignments={i: [1, 2, 3] for i in range(10)}, partitions=-1, rf=-1)
    fence(c, 1)
    unfence(c, 1)
    rejoin_everywhere(c, "t", 2, (1, 2, 3))
    elect(c, PREFERRED, [("t", i) for i in range(1, 10)])
    # One of ten partitions led elsewhere is exactly 10 %: tolerated, not above 5 %.
    assert [p.leader for p in c.partitions("t").values()].count(2) == 1
    assert c.logic.rebalance_leaders(c.image, 10) == []
    assert len(c.logic.rebalance_leaders(c.image, 5)) == 1


def test_turning_unclean_election_on_elects_a_leaderless_partition() -> None:
    c = cluster()
    create(c, "t", assignments={0: [1, 2, 3]}, partitions=-1, rf=-1)
    fence(c, 1, 2, 3)
    unfence(c, 2)  # not the last ISR member (3): no clean leader
    assert c.partitions("t")[0].leader == -1
    other = [ConfigOp("retention.ms", 0, "1000")]
    c.commit(c.logic.alter_configs(c.image, [AlterTopicConfigs("t", other)]))
    assert c.partitions("t")[0].leader == -1  # not allowed yet
    ops = [ConfigOp("unclean.leader.election.enable", 0, "true")]
    c.commit(c.logic.alter_configs(c.image, [AlterTopicConfigs("t", ops)]))
    p = c.partitions("t")[0]
    assert p.leader == 2 and p.isr == (2,)
    assert c.rebuilt().topic("t").partitions[0].leader == 2  # type: ignore[union-attr]
    # Set again: nothing left to elect, nothing written.
    assert c.logic.alter_configs(c.image, [AlterTopicConfigs("t", ops)]).records == []


def test_removing_the_unclean_override_falls_back_to_the_default() -> None:
    # IncrementalAlterConfigs DELETE, or a legacy AlterConfigs that leaves the key out,
    # reaches the logic as a None value: it once crashed on None.lower() (HTTP 500).
    c = cluster()
    create(c, "t", assignments={0: [1, 2, 3]}, partitions=-1, rf=-1,
           configs={"unclean.leader.election.enable": "true"})  # fmt: skip
    delete = [ConfigOp("unclean.leader.election.enable", 1, None)]
    (result,) = c.commit(c.logic.alter_configs(c.image, [AlterTopicConfigs("t", delete)]))
    assert result.error_code == ErrorCode.none
    assert "unclean.leader.election.enable" not in c.image.topic("t").configs  # type: ignore[union-attr]
    # The default (false) is in force: nobody outside the ISR is elected.
    fence(c, 1, 2, 3)
    unfence(c, 2)
    assert c.partitions("t")[0].leader == -1
