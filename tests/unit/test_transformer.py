"""The metadata transformer, case by case through its routing rules."""

from __future__ import annotations

import logging
import uuid

import pytest

from broker.metadata.transformer import (
    AZ_HASH,
    CROSS_AZ,
    HASH,
    HASH_ABS,
    HASH_TO_POSITIVE,
    LOCAL,
    NONE,
    RECORDED,
    DecisionLog,
    hash_index,
    kafka_uuid,
    partition_hash,
    pick,
    preferred_read_replica,
    route,
    route_without_replicas,
)
from protocol.murmur2 import INT_MIN, murmur2

TOPIC = uuid.UUID("8c1f4b0e-2f6a-4d0e-9a55-3b6f7d2e1c90")
RACKS = {1: "az-a", 2: "az-a", 3: "az-b", 4: "az-b", 5: "az-c", 6: "az-c"}
REPLICAS = (1, 3, 5)  # one per rack, as the controller places diskless partitions


def alive(*down: int) -> dict[int, str | None]:
    return {b: rack for b, rack in RACKS.items() if b not in down}


def test_kafka_uuid_is_url_safe_base64_without_padding() -> None:
    assert kafka_uuid(uuid.UUID(int=0)) == "AAAAAAAAAAAAAAAAAAAAAA"
    assert len(kafka_uuid(TOPIC)) == 22 and "=" not in kafka_uuid(TOPIC)


def test_hash_is_murmur2_of_topic_id_dash_partition() -> None:
    key = f"{kafka_uuid(TOPIC)}-7".encode()
    assert partition_hash(TOPIC, 7) == murmur2(key)
    assert pick([6, 2, 4], TOPIC, 7) == [2, 4, 6][abs(murmur2(key)) % 3]


# (signed murmur2, n, index by seed 001's abs(h) % n, index by Kafka's toPositive(h) % n)
HASH_VECTORS = [
    (479470107, 3, 479470107 % 3, 479470107 % 3),  # murmur2("abc"): positive, both agree
    # murmur2("21") = -973932308: abs 973932308 % 3 = 2; toPositive 1173551340 % 3 = 0
    (-973932308, 3, 2, 0),
    (-790332482, 5, 790332482 % 5, (2**31 - 790332482) % 5),  # murmur2("foobar")
    # Integer.MIN_VALUE: Math.abs overflows (stays MIN_VALUE), Java's % gives -2 for n=3
    # (Java would then throw indexing a list): taken from the end, index 1; toPositive: 0.
    (INT_MIN, 3, 1, 0),
    (INT_MIN, 2, 0, 0),  # -2^31 is even: remainder 0 either way
]


@pytest.mark.parametrize(("h", "n", "by_abs", "by_to_positive"), HASH_VECTORS)
def test_hash_index_is_the_seeds_abs_with_java_semantics(
    h: int, n: int, by_abs: int, by_to_positive: int
) -> None:
    assert hash_index(h, n, HASH_ABS) == by_abs
    assert hash_index(h, n, HASH_TO_POSITIVE) == by_to_positive
    assert hash_index(h, n) == by_abs  # the default is the seed's formula


def test_a_key_hashing_to_min_value_gets_an_index() -> None:
    # A 4-byte key whose murmur2 is Integer.MIN_VALUE (found by inverting murmur2's steps).
    h = murmur2(b"\xa7\xd6Pl")
    assert h == INT_MIN
    assert [hash_index(h, n) for n in (1, 2, 3, 5, 6)] == [0, 0, 1, 2, 4]


def test_abs_and_to_positive_disagree_on_a_third_of_partitions() -> None:
    # What the issue measured: with 3 candidates, about 1/3 of partitions differ; the
    # default must be the seed's formula, not Kafka's toPositive.
    differ = sum(
        hash_index(partition_hash(TOPIC, p), 3, HASH_ABS)
        != hash_index(partition_hash(TOPIC, p), 3, HASH_TO_POSITIVE)
        for p in range(1000)
    )
    assert 250 < differ < 420
    chosen = [pick([1, 2, 3], TOPIC, p) for p in range(1000)]
    assert chosen == [[1, 2, 3][abs(partition_hash(TOPIC, p)) % 3] for p in range(1000)]


def test_alive_replica_in_client_az_is_the_only_one_returned() -> None:
    for az, expected in (("az-a", 1), ("az-b", 3), ("az-c", 5)):
        r = route(TOPIC, 0, REPLICAS, REPLICAS, 3, alive(), az)
        assert r.reason == LOCAL
        assert (r.leader, r.replicas, r.isr, r.offline) == (expected, (expected,), (expected,), ())
        assert not r.hash_fallback and not r.routed_around


def test_several_alive_replicas_in_az_pick_deterministically() -> None:
    r1 = route(TOPIC, 3, (1, 2, 3), (1, 2, 3), 3, alive(), "az-a")
    r2 = route(TOPIC, 3, (2, 1, 3), (3, 2, 1), 2, alive(), "az-a")
    assert r1.reason == LOCAL and r1.leader == r2.leader == pick([1, 2], TOPIC, 3)


def test_offline_local_replica_goes_to_the_other_broker_of_the_az() -> None:
    # Broker 1 (az-a's replica) is down: az-a's other broker serves (any broker serves
    # any diskless partition), never another AZ.
    r = route(TOPIC, 0, REPLICAS, (3, 5), 3, alive(1), "az-a")
    assert r.reason == AZ_HASH and (r.leader, r.replicas, r.isr) == (2, (2,), (2,))
    assert r.routed_around == (1,) and r.hash_fallback and not r.all_offline


def test_az_hash_without_offline_replica_is_a_hash_fallback_too() -> None:
    # A rack added after the topic was created has no replica: its clients are hashed to
    # one of its brokers. Nothing is offline, but it is a hash fallback (seed 000's metric).
    r = route(TOPIC, 0, (1, 3), (1, 3), 1, alive(), "az-c")
    assert r.reason == AZ_HASH and r.hash_fallback and not r.routed_around


def test_seed_table_to_the_letter_falls_back_cross_az() -> None:
    r = route(TOPIC, 0, REPLICAS, (3, 5), 3, alive(1), "az-a", local_fallback=False)
    assert r.reason == CROSS_AZ
    assert r.replicas == (3, 5) and r.leader == 3 and r.leader in r.isr
    assert r.routed_around == (1,)


def test_no_alive_broker_in_client_az_returns_all_alive_replicas() -> None:
    r = route(TOPIC, 0, REPLICAS, (3, 5), 5, alive(1, 2), "az-a")
    assert r.reason == CROSS_AZ and r.replicas == (3, 5) and r.leader == 5
    assert set(r.isr) == {3, 5}


def test_cross_az_with_dead_recorded_leader_leads_with_an_alive_replica() -> None:
    r = route(TOPIC, 0, REPLICAS, REPLICAS, 1, alive(1, 2), "az-a")
    assert r.leader in (3, 5) and r.leader == pick([3, 5], TOPIC, 0) and r.leader in r.isr


def test_unknown_az_is_a_miss_and_falls_back_cross_az() -> None:
    r = route(TOPIC, 0, REPLICAS, REPLICAS, 3, alive(), "az-typo")
    assert r.reason == CROSS_AZ and r.replicas == REPLICAS and r.leader == 3


def test_all_replicas_offline_hashes_within_client_az() -> None:
    r = route(TOPIC, 4, REPLICAS, (), -1, alive(1, 3, 5), "az-b")
    assert r.reason == HASH and r.hash_fallback and r.all_offline and r.leader == 4
    assert (r.replicas, r.isr) == ((4,), (4,)) and r.routed_around == REPLICAS


def test_all_replicas_offline_and_az_empty_hashes_over_all_alive() -> None:
    r = route(TOPIC, 4, REPLICAS, (), -1, alive(1, 3, 5, 4), "az-b")
    assert r.reason == HASH and r.leader == pick([2, 6], TOPIC, 4)


def test_nothing_alive() -> None:
    r = route(TOPIC, 0, REPLICAS, (), -1, {}, "az-a")
    assert r.reason == NONE and r.leader == -1 and r.replicas == ()


def test_unaware_client_gets_recorded_placement() -> None:
    r = route(TOPIC, 0, REPLICAS, REPLICAS, 3, alive(), None)
    assert r.reason == RECORDED
    assert (r.leader, r.replicas, r.isr, r.offline) == (3, REPLICAS, REPLICAS, ())


def test_unaware_client_is_told_the_alive_part_of_a_diskless_isr() -> None:
    # The controller keeps offline broker 5 in the ISR (seed 000); the answer lists it as
    # offline and leaves it out of the ISR clients see.
    r = route(TOPIC, 0, REPLICAS, REPLICAS, 3, alive(5), None)
    assert (r.leader, r.replicas, r.isr, r.offline) == (3, REPLICAS, (1, 3), (5,))


def test_unaware_client_is_routed_around_a_dead_leader() -> None:
    # The controller has not fenced broker 3 yet: the answer avoids it meanwhile.
    r = route(TOPIC, 0, REPLICAS, REPLICAS, 3, alive(3), None)
    assert r.reason == RECORDED and r.leader in (1, 5) and r.leader in r.isr
    assert 3 not in r.isr and r.offline == (3,) and r.routed_around == (3,)
    assert r.replicas == REPLICAS


def test_unaware_client_all_offline_hashes_over_all_alive() -> None:
    r = route(TOPIC, 2, REPLICAS, (), -1, alive(1, 3, 5), None)
    assert r.reason == HASH and r.leader == pick([2, 4, 6], TOPIC, 2)


def test_same_partition_same_broker_within_az_spread_across_partitions() -> None:
    chosen = {route(TOPIC, p, (9,), (), -1, alive(), "az-c").leader for p in range(64)}
    assert chosen == {5, 6}  # both brokers of the AZ get partitions
    for p in range(16):
        assert route(TOPIC, p, REPLICAS, (), -1, alive(1, 3, 5), "az-a").leader == 2
        assert route(TOPIC, p, (9,), (), -1, alive(), "az-a").leader == pick([1, 2], TOPIC, p)


def test_without_replicas_mode() -> None:
    assert route_without_replicas(TOPIC, 1, alive(), "az-b", 6) == pick([3, 4], TOPIC, 1)
    assert route_without_replicas(TOPIC, 1, alive(), "az-x", 6) == 6


@pytest.mark.parametrize(
    ("me", "rack", "down", "expected"),
    [
        (3, "az-a", (), 1),  # another AZ's broker sends the consumer to its AZ's replica
        (1, "az-a", (), -1),  # already the right broker
        (3, "az-a", (1,), 2),  # replica down: the other broker of the AZ
        (3, "az-a", (1, 2), -1),  # nothing alive in the AZ: keep serving here
        (3, "az-x", (), -1),  # unknown rack
    ],
)
def test_preferred_read_replica(me: int, rack: str, down: tuple[int, ...], expected: int) -> None:
    got = preferred_read_replica(TOPIC, 0, REPLICAS, REPLICAS, 3, alive(*down), rack, me)
    assert got == expected


def test_decision_log_logs_each_decision_once(caplog: pytest.LogCaptureFixture) -> None:
    decisions = DecisionLog()
    routed = route(TOPIC, 0, REPLICAS, (3, 5), 3, alive(1), "az-a", local_fallback=False)
    hashed = route(TOPIC, 0, REPLICAS, (), -1, alive(1, 3, 5), "az-a")
    with caplog.at_level(logging.INFO, logger="sluice.transformer"):
        for _ in range(5):
            decisions.note("foo", 0, TOPIC, routed)
            decisions.note("foo", 0, TOPIC, hashed)
            decisions.note("foo", 0, TOPIC, route(TOPIC, 0, REPLICAS, REPLICAS, 3, alive(), "az-a"))
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "[Transformer] Diskless partition 'foo-0' has offline replica (broker 1), "
        "routing to alive replicas (brokers 3, 5) in other AZs, leader 3",
        "[Transformer] Diskless partition 'foo-0' has ALL replicas offline, "
        "using hash-based fallback to broker 2",
    ]


def test_decision_log_says_what_happened(caplog: pytest.LogCaptureFixture) -> None:
    """The seed's "routing to alive replica" only when the answer is an alive replica."""
    decisions = DecisionLog()
    az_hash = route(TOPIC, 0, REPLICAS, (3, 5), 3, alive(1), "az-a")  # to broker 2
    unaware = route(TOPIC, 0, REPLICAS, REPLICAS, 1, alive(1), None)
    one_left = route(TOPIC, 0, REPLICAS, (5,), 5, alive(1, 2, 3), "az-a")
    with caplog.at_level(logging.INFO, logger="sluice.transformer"):
        for r in (az_hash, unaware, one_left):
            decisions.note("foo", 0, TOPIC, r)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "[Transformer] Diskless partition 'foo-0' has offline replica (broker 1), "
        "routing to broker 2 of the client's AZ (not a replica: none is alive there; "
        "hash-based choice)",
        "[Transformer] Diskless partition 'foo-0' has offline replica (broker 1), "
        f"routing to alive replica (broker {unaware.leader})",
        "[Transformer] Diskless partition 'foo-0' has offline replicas (brokers 1, 3), "
        "routing to alive replica (broker 5) in another AZ",
    ]
    assert unaware.leader in (3, 5)


def test_hash_config_is_checked_and_applied() -> None:
    from broker.config import load_config
    from broker.metadata import transformer

    assert load_config({}).diskless_transformer_hash == HASH_ABS
    assert load_config({"diskless.transformer.hash": "to_positive"}).diskless_transformer_hash == (
        HASH_TO_POSITIVE
    )
    with pytest.raises(ValueError, match=r"diskless\.transformer\.hash"):
        load_config({"diskless.transformer.hash": "floor"})
    try:
        transformer.set_hash_mode(HASH_TO_POSITIVE)
        assert hash_index(-973932308, 3) == 0
    finally:
        transformer.set_hash_mode(HASH_ABS)
    assert hash_index(-973932308, 3) == 2
