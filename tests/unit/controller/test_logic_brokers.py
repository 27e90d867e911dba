"""Broker registration, heartbeats, session expiry, and the leader elections they cause."""

from __future__ import annotations

import uuid

from kio.schema.errors import ErrorCode

from controller.election import desired_state
from controller.image import PartitionState
from controller.logic import ControllerLogic
from controller.logic_config import ControllerConfig
from controller.records import FenceBroker, PartitionChange, RegisterBroker, UnfenceBroker
from controller.requests import BrokerRegistrationRequest, Reassignment

from .harness import SESSION_MS, Cluster, uuids

SIX_IN_THREE = {1: "a", 2: "a", 3: "b", 4: "b", 5: "c", 6: "c"}
OTHERS = [2, 3, 4, 5, 6]


def fence_1(c: Cluster) -> None:
    """Broker 1 goes silent until the session timeout passes."""
    c.advance(SESSION_MS // 2, heartbeating=OTHERS)
    assert not c.image.brokers[1].fenced
    c.advance(SESSION_MS // 2 + 1, heartbeating=OTHERS)
    assert c.image.brokers[1].fenced


def test_registration_is_fenced_until_the_first_heartbeat() -> None:
    c = Cluster()
    epoch = c.register(1, "a")
    broker = c.image.brokers[1]
    assert broker.fenced and broker.broker_epoch == epoch and broker.rack == "a"
    assert (broker.host, broker.port) == ("host1", 9092)
    result = c.heartbeat(1)
    assert result.error_code == ErrorCode.none and result.is_fenced is False
    assert not c.image.brokers[1].fenced
    # Further heartbeats change nothing.
    outcome = c.logic.broker_heartbeat(c.image, 1, epoch, c.now)
    assert outcome.records == [] and outcome.response.is_fenced is False


def test_want_fence_keeps_a_broker_fenced_and_fences_an_unfenced_one() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b"})
    c.create("t", 2)
    result = c.heartbeat(1, want_fence=True)
    assert result.is_fenced and c.image.brokers[1].fenced
    # Diskless: the ISR stays the replica set and leaders stay (the transformer routes).
    assert all(p.isr == p.replicas and p.leader_epoch == 0 for p in c.partitions("t").values())
    assert c.heartbeat(1, want_fence=True).is_fenced
    assert c.heartbeat(1).is_fenced is False


def test_reregistration_of_the_same_incarnation_is_idempotent() -> None:
    c = Cluster()
    incarnation = uuid.uuid4()
    epoch = c.register(1, "a", incarnation)
    request = BrokerRegistrationRequest(1, incarnation, "host1", 9092, "a")
    outcome = c.logic.register_broker(c.image, request, c.now)
    assert outcome.records == [] and outcome.response.broker_epoch == epoch
    # A changed listener amends the registration, keeping the epoch and fenced state.
    moved = BrokerRegistrationRequest(1, incarnation, "elsewhere", 9999, "a")
    outcome = c.logic.register_broker(c.image, moved, c.now)
    assert outcome.records == [RegisterBroker(1, incarnation, epoch, "elsewhere", 9999, "a")]
    c.commit(outcome)
    assert c.image.brokers[1].host == "elsewhere" and c.image.brokers[1].broker_epoch == epoch


def test_new_incarnation_elsewhere_while_the_old_session_lives_is_a_duplicate() -> None:
    c = Cluster()
    c.start({1: "a"})
    request = BrokerRegistrationRequest(1, uuid.uuid4(), "host9", 9092, "a")
    outcome = c.logic.register_broker(c.image, request, c.now + 1_000)
    assert outcome.records == []
    assert outcome.response.error_code == ErrorCode.duplicate_broker_registration


def test_new_incarnation_at_the_same_address_replaces_the_live_one_at_once() -> None:
    # A broker killed and restarted within its session: its listener is bound by the new
    # process, so the old incarnation is gone. No waiting for the session to expire.
    c = Cluster()
    c.start({1: "a", 2: "b"})
    c.create("t", 4)
    old_epoch = c.epochs[1]
    c.now += 1_000
    new_epoch = c.register(1, "a")
    assert new_epoch > old_epoch and c.image.brokers[1].fenced
    # Diskless partitions keep their leaders and ISRs (no epoch bump for clients to chase).
    before = dict(c.partitions("t"))
    assert {p.leader for p in before.values()} == {1, 2}
    stale = c.logic.broker_heartbeat(c.image, 1, old_epoch, c.now)
    assert stale.response.error_code == ErrorCode.stale_broker_epoch
    assert c.heartbeat(1).is_fenced is False
    assert c.partitions("t") == before


def test_new_incarnation_after_the_session_expired_gets_a_new_epoch() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b"})
    c.create("t", 4)
    old_epoch = c.epochs[1]
    # Restarted before the controller's tick fenced it: the old incarnation's leaderships
    # are moved in the same batch as the new registration.
    c.now += SESSION_MS + 1
    c.heartbeat(2)
    new_epoch = c.register(1, "a")
    assert new_epoch > old_epoch and c.image.brokers[1].fenced
    assert all(p.isr == p.replicas for p in c.partitions("t").values())
    # The old incarnation's heartbeats are refused.
    stale = c.logic.broker_heartbeat(c.image, 1, old_epoch, c.now)
    assert stale.response.error_code == ErrorCode.stale_broker_epoch and stale.records == []
    # A fenced broker may re-register at once (e.g. after a controlled shutdown).
    assert c.register(1, "a") > new_epoch


def test_epochs_are_never_reused_even_after_unregistration_and_snapshot() -> None:
    c = Cluster()
    c.start({1: "a", 2: "a"})
    top = c.epochs[2]
    c.commit(c.logic.unregister_broker(c.image, 2))
    restored = type(c.image).from_records(c.image.snapshot())
    c.image = restored
    assert c.register(3, "a") > top


def test_heartbeat_errors() -> None:
    c = Cluster()
    unknown = c.logic.broker_heartbeat(c.image, 7, 1, c.now)
    assert unknown.response.error_code == ErrorCode.broker_id_not_registered
    assert unknown.response.is_fenced


def test_cluster_id_is_checked() -> None:
    logic = ControllerLogic(ControllerConfig(cluster_id="abc"))
    c = Cluster()
    bad = BrokerRegistrationRequest(1, uuid.uuid4(), "h", 1, None, cluster_id="xyz")
    assert (
        logic.register_broker(c.image, bad, 0).response.error_code
        == ErrorCode.inconsistent_cluster_id
    )
    good = BrokerRegistrationRequest(1, uuid.uuid4(), "h", 1, None, cluster_id="abc")
    assert logic.register_broker(c.image, good, 0).response.error_code == ErrorCode.none
    negative = BrokerRegistrationRequest(-1, uuid.uuid4(), "h", 1, None)
    assert logic.register_broker(c.image, negative, 0).response.error_code == (
        ErrorCode.invalid_request
    )


def test_fence_after_session_timeout_keeps_diskless_isr_and_leaders() -> None:
    """Seed 000: "for diskless topics, all replicas are always in the ISR"; the transformer
    routes around the lost broker, the controller changes nothing (no ISR shrink, no leader
    epoch bump)."""
    c = Cluster()
    c.start(SIX_IN_THREE)
    c.create("t", 12)
    before = dict(c.partitions("t"))
    assert any(p.leader == 1 for p in before.values())
    fence_1(c)
    assert c.image.brokers[1].fenced
    assert c.partitions("t") == before
    for p in c.partitions("t").values():
        assert p.isr == p.replicas


def test_fencing_records_move_leaders_before_the_fence() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b"})
    c.create("t", 2)
    c.now += SESSION_MS + 1
    c.heartbeat(2)
    records = c.logic.tick(c.image, c.now)
    assert isinstance(records[-1], FenceBroker)
    assert all(isinstance(r, PartitionChange) for r in records[:-1])
    # Nothing more to do until something changes.
    c.commit(records)
    assert c.logic.tick(c.image, c.now) == []


def test_unfence_restores_isr_and_preferred_leaders() -> None:
    c = Cluster()
    c.start(SIX_IN_THREE)
    c.create("t", 12)
    before = dict(c.partitions("t"))
    fence_1(c)
    result = c.heartbeat(1)
    assert result.is_fenced is False
    for i, p in c.partitions("t").items():
        old = before[i]
        assert p == old  # nothing moved, nothing to move back


def test_returning_broker_does_not_take_leaderships_it_is_not_preferred_for() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b"})
    c.create("t", 4)
    parts = c.partitions("t")
    led_by_2 = [i for i, p in parts.items() if p.replicas[0] == 2]
    assert led_by_2
    # 2 is unregistered (gone for good): 1 leads all; a new 2 registers and comes back:
    # it takes back only its preferred partitions, 1 keeps the others.
    c.commit(c.logic.unregister_broker(c.image, 2))
    assert all(p.leader == 1 for p in c.partitions("t").values())
    c.register(2, "b")
    c.heartbeat(2)
    for i, p in c.partitions("t").items():
        assert p.leader == (2 if i in led_by_2 else 1)


def test_all_replicas_fenced_keeps_diskless_leaders_and_isr() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b"})
    c.create("t", 2)
    c.advance(SESSION_MS + 1)
    assert all(c.image.brokers[b].fenced for b in (1, 2))
    before = dict(c.partitions("t"))
    assert c.partitions("t") == before  # diskless: leaders and ISR stay
    c.heartbeat(2)
    assert c.partitions("t") == before
    # A partition without a leader gets the first alive replica.
    leaderless = PartitionState((1, 2), (1, 2), -1)
    assert desired_state(leaderless, {2}).leader == 2
    assert desired_state(leaderless, set()).leader == -1


def test_brokers_expiring_together_move_no_diskless_leader_or_isr() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b", 3: "c"})
    c.create("t", 6)
    before = dict(c.partitions("t"))
    c.advance(SESSION_MS + 1, heartbeating=[3])
    assert c.image.brokers[1].fenced and c.image.brokers[2].fenced
    assert c.partitions("t") == before


def test_controlled_shutdown_fences_at_once() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b"})
    c.create("t", 2)
    result = c.heartbeat(1, want_shutdown=True)
    assert result.should_shut_down and result.is_fenced
    assert c.image.brokers[1].fenced
    assert all(p.isr == p.replicas and p.leader_epoch == 0 for p in c.partitions("t").values())
    # Still asking to shut down: stays fenced, no new records.
    outcome = c.logic.broker_heartbeat(c.image, 1, c.epochs[1], c.now, want_shutdown=True)
    assert outcome.records == [] and outcome.response.should_shut_down


def test_unregister_moves_leaders_and_keeps_offline_replicas() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b"})
    c.create("t", 2)
    c.commit(c.logic.unregister_broker(c.image, 1))
    assert 1 not in c.image.brokers
    for p in c.partitions("t").values():
        # Gone for good: no leadership on it; still a replica (offline) until reassigned.
        assert 1 in p.replicas and p.leader == 2 and p.isr == p.replicas
    again = c.logic.unregister_broker(c.image, 1)
    assert again.response.error_code == ErrorCode.broker_id_not_registered


def test_a_new_active_controller_gives_every_broker_a_fresh_session() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b"})
    # Brokers talked to the old controller; the new one took over much later.
    successor = ControllerLogic(c.config)
    later = c.now + 10 * SESSION_MS
    successor.become_active(c.image, later)
    assert successor.tick(c.image, later + SESSION_MS) == []
    c.logic, c.now = successor, later + SESSION_MS + 1
    assert c.expire() == [1, 2]  # one per tick


def test_a_broker_the_controller_never_heard_of_gets_a_session_at_the_first_tick() -> None:
    c = Cluster()
    c.start({1: "a"})
    logic = ControllerLogic(ControllerConfig(new_uuid=uuids()))  # become_active not called
    assert logic.tick(c.image, c.now + 100 * SESSION_MS) == []
    assert logic.tick(c.image, c.now + 101 * SESSION_MS + 1) != []


def test_unfence_completes_a_pending_reassignment() -> None:
    c = Cluster()
    c.start({1: "a", 2: "b", 3: "c"})
    c.create("t", 1)
    c.advance(SESSION_MS + 1, heartbeating=[1, 2])
    assert c.image.brokers[3].fenced
    p = c.partitions("t")[0]
    target = tuple(r for r in p.replicas if r != 3)
    spare = c.register(4, "c")  # registered, fenced
    assert spare
    c.commit(c.logic.alter_partition_reassignments(c.image, [Reassignment("t", 0, (*target, 4))]))
    p = c.partitions("t")[0]
    assert p.adding_replicas == (4,) and p.removing_replicas == (3,)
    outcome = c.logic.broker_heartbeat(c.image, 4, c.epochs[4], c.now)
    assert isinstance(outcome.records[0], UnfenceBroker)
    c.commit(outcome)
    p = c.partitions("t")[0]
    assert p.replicas == (*target, 4) and not p.reassigning and set(p.isr) == set(p.replicas)


def test_expired_brokers_are_fenced_one_at_a_time_the_silent_longest_first() -> None:
    """Kafka's maybeFenceOneStaleBroker: each fence is its own record batch, with its own
    elections among the brokers still unfenced."""
    c = Cluster()
    c.start({1: "a", 2: "b", 3: "c"})
    c.now += 1000
    c.heartbeat(1)  # 1 heard from last: fenced last
    c.now += SESSION_MS
    first = c.logic.tick(c.image, c.now)
    assert [r.node_id for r in first if isinstance(r, FenceBroker)] == [2]
    c.commit(first)
    assert c.expire() == [3]  # 1's session has not expired yet
    c.now += 1000
    assert c.expire() == [1]


def test_a_classic_partition_whose_replicas_all_expire_keeps_the_last_one_in_its_isr() -> None:
    """After a failover that every broker's heartbeats missed, the partition's leader (it
    had died) is fenced first, leadership moves on, and the ISR ends with a broker that can
    lead again once it heartbeats, as in Kafka. (Fenced all at once, the ISR kept only the
    dead leader: nobody could be elected.)"""
    c = Cluster(ControllerConfig(new_uuid=uuids(), classic_topics=True))
    c.start({1: "a", 2: "b", 3: "c"})
    c.create("t", 1, replication_factor=3, configs={"diskless.enable": "false"})
    (before,) = c.partitions("t").values()
    assert set(before.isr) == {1, 2, 3}
    successor = ControllerLogic(c.config)
    successor.become_active(c.image, c.now)
    c.logic = successor
    c.advance(SESSION_MS + 1)
    assert all(c.image.brokers[b].fenced for b in (1, 2, 3))
    (p,) = c.partitions("t").values()
    assert p.leader == -1 and len(p.isr) == 1
    last = p.isr[0]
    assert last != before.leader
    c.heartbeat(last)
    (p,) = c.partitions("t").values()
    assert p.leader == last
