"""The metadata image: deterministic apply, all-or-nothing batches, snapshots, copies."""

from __future__ import annotations

import uuid

import pytest

from controller.image import ImageError, MetadataImage, PartitionState
from controller.records import (
    FenceBroker,
    Partition,
    PartitionChange,
    RegisterBroker,
    RemoveTopic,
    Topic,
    TopicConfig,
    UnfenceBroker,
    UnregisterBroker,
    decode_batch,
    encode_batch,
)
from controller.requests import NewTopic, Reassignment

from .harness import SESSION_MS, Cluster

T1 = uuid.UUID(int=1)
T2 = uuid.UUID(int=2)
INC = uuid.UUID(int=99)


def base() -> MetadataImage:
    return MetadataImage.from_records(
        [
            RegisterBroker(1, INC, 5, "h1", 1, "a", fenced=False),
            RegisterBroker(2, INC, 6, "h2", 1, "b", fenced=False),
            Topic("t", T1),
            TopicConfig(T1, "retention.ms", "1"),
            Partition(T1, 0, (1, 2), (1, 2), 1),
        ]
    )


def test_apply_builds_the_expected_state() -> None:
    image = base()
    assert image.last_broker_epoch == 6
    assert image.alive_brokers() == {1, 2} and image.racks() == {"a", "b"}
    topic = image.topic("t")
    assert topic is not None and image.topic_by_id(T1) is topic
    assert topic.configs == {"retention.ms": "1"} and topic.diskless
    assert image.partition(T1, 0) == PartitionState((1, 2), (1, 2), 1)
    image.apply(FenceBroker(1, 5))
    assert not image.is_alive(1) and image.brokers[1].fenced
    assert image.offline_replicas(image.partition(T1, 0)) == [1]  # type: ignore[arg-type]
    image.apply(UnfenceBroker(1, 5))
    assert image.is_alive(1)
    image.apply(TopicConfig(T1, "retention.ms", None))
    image.apply(TopicConfig(T1, "diskless.enable", "false"))
    assert topic.configs == {"diskless.enable": "false"} and not topic.diskless


def test_partition_change_bumps_epochs() -> None:
    image = base()
    image.apply(PartitionChange(T1, 0, isr=(1,)))
    assert image.partition(T1, 0) == PartitionState((1, 2), (1,), 1, 0, 1)
    image.apply(PartitionChange(T1, 0, leader=1))  # a leader field always bumps the epoch
    assert image.partition(T1, 0) == PartitionState((1, 2), (1,), 1, 1, 2)
    image.apply(PartitionChange(T1, 0, leader=-1, isr=()))
    assert image.partition(T1, 0) == PartitionState((1, 2), (), -1, 2, 3)
    image.apply(
        PartitionChange(T1, 0, replicas=(3, 1, 2), adding_replicas=(3,), removing_replicas=(1, 2))
    )
    p = image.partition(T1, 0)
    assert p is not None and p.original_replicas == (1, 2) and p.target_replicas == (3,)


def test_remove_topic() -> None:
    image = base()
    image.apply(RemoveTopic(T1))
    assert image.topics == {} and image.topic("t") is None
    image.apply(Topic("t", T2))  # the name can be reused
    assert image.topic("t").topic_id == T2  # type: ignore[union-attr]


@pytest.mark.parametrize(
    "record",
    [
        Topic("t", T2),  # duplicate name
        Topic("u", T1),  # duplicate id
        TopicConfig(T2, "k", "v"),
        Partition(T1, 0, (1,), (1,), 1),  # exists
        Partition(T1, -1, (1,), (1,), 1),
        Partition(T1, 1, (), (), -1),
        Partition(T1, 1, (1, 1), (1,), 1),
        Partition(T1, 1, (1, 2), (3,), -1),  # ISR not within replicas
        Partition(T1, 1, (1, 2), (1,), 2),  # leader not in ISR
        Partition(T1, 1, (1, 2), (1,), 1, adding_replicas=(3,)),
        Partition(T1, 1, (1, 2), (1,), 1, adding_replicas=(1,), removing_replicas=(1,)),
        Partition(T1, 1, (1, 2), (1,), 1, removing_replicas=(1, 2)),
        Partition(T2, 0, (1,), (1,), 1),
        PartitionChange(T1, 5, leader=1),
        PartitionChange(T2, 0, leader=1),
        PartitionChange(T1, 0, leader=3),
        PartitionChange(T1, 0, replicas=(1,)),  # ISR (1, 2) no longer within replicas
        FenceBroker(3, 1),
        FenceBroker(1, 4),  # wrong epoch
        UnfenceBroker(2, 7),
        UnregisterBroker(1, 6),
        RemoveTopic(T2),
        RegisterBroker(-1, INC, 1, "h", 1),
    ],
)
def test_records_that_do_not_fit_raise_and_change_nothing(record: object) -> None:
    image = base()
    with pytest.raises(ImageError):
        image.apply(record)  # type: ignore[arg-type]
    assert image == base()


def test_a_batch_applies_all_or_nothing() -> None:
    image = base()
    batch = [
        RegisterBroker(3, INC, 7, "h3", 1, "c"),
        UnregisterBroker(2, 6),
        FenceBroker(1, 5),
        Topic("u", T2),
        Partition(T2, 0, (1,), (), -1),
        TopicConfig(T1, "retention.ms", "9"),
        PartitionChange(T1, 0, isr=(1,)),
        RemoveTopic(T1),
        Topic("t", uuid.UUID(int=3)),
        PartitionChange(T2, 9, leader=1),  # does not fit: the whole batch is undone
    ]
    with pytest.raises(ImageError):
        image.apply_batch(batch)
    assert image == base()
    assert image.topic("t").topic_id == T1 and image.topic("u") is None  # type: ignore[union-attr]
    image.apply_batch(batch[:-1])
    assert image.topic("u") is not None and 2 not in image.brokers
    assert image.last_broker_epoch == 7


def test_a_not_a_record_is_refused() -> None:
    with pytest.raises(ImageError):
        MetadataImage().apply("hello")  # type: ignore[arg-type]


def test_copy_is_independent() -> None:
    image = base()
    copy = image.copy()
    assert copy == image
    copy.apply_all([FenceBroker(1, 5), TopicConfig(T1, "x", "y"), PartitionChange(T1, 0, isr=(1,))])
    assert copy != image and image == base()
    assert image.topic("t").configs == {"retention.ms": "1"}  # type: ignore[union-attr]


def busy_cluster() -> Cluster:
    """A cluster with some history: fences, reassignments, deletions, configs."""
    c = Cluster()
    c.start({1: "a", 2: "b", 3: "c", 4: "a"})
    c.commit(
        c.logic.create_topics(c.image, [NewTopic("x", 4), NewTopic("y", 3, configs={"k": "v"})])
    )
    c.advance(SESSION_MS + 1, heartbeating=[2, 3, 4])
    c.commit(c.logic.alter_partition_reassignments(c.image, [Reassignment("x", 0, (1, 2))]))
    c.commit(c.logic.delete_topics(c.image, ["y"]))
    c.create("z", 2)
    c.commit(c.logic.unregister_broker(c.image, 4))
    c.heartbeat(1)
    return c


def test_equal_images_give_equal_decisions() -> None:
    c = busy_cluster()
    c.create("another", 3)
    snapshot = c.image.snapshot()
    # The same state built in another order: topics, and partitions within them, reversed.
    head = [r for r in snapshot if not hasattr(r, "topic_id")]
    groups: dict[uuid.UUID, list[object]] = {}
    for r in snapshot:
        if hasattr(r, "topic_id"):
            groups.setdefault(r.topic_id, []).append(r)  # type: ignore[attr-defined]
    reordered = list(head)
    for records in reversed(list(groups.values())):
        parts = [r for r in records if isinstance(r, Partition)]
        reordered += [r for r in records if not isinstance(r, Partition)] + parts[::-1]
    other = MetadataImage.from_records(reordered)  # type: ignore[arg-type]
    assert other == c.image
    assert list(other.iter_partitions()) == list(c.image.iter_partitions())
    later = c.now + 10 * SESSION_MS
    assert c.logic.tick(other, later) == c.logic.tick(c.image, later) != []


def test_same_records_give_equal_images() -> None:
    c = busy_cluster()
    assert c.rebuilt() == c.image
    assert c.rebuilt() == c.rebuilt()


def test_snapshot_rebuilds_the_image_and_is_canonical() -> None:
    c = busy_cluster()
    snapshot = c.image.snapshot()
    rebuilt = MetadataImage.from_records(decode_batch(encode_batch(snapshot)))
    assert rebuilt == c.image
    assert encode_batch(rebuilt.snapshot()) == encode_batch(snapshot)
    # Following the log after the snapshot keeps them equal.
    c.create("after", 3)
    rebuilt.apply_batch(decode_batch(c.log[-1]))
    assert rebuilt == c.image


def test_equality_sees_every_difference() -> None:
    a, b = base(), base()
    assert a == b and a != "image"
    b.apply(PartitionChange(T1, 0, isr=(1, 2)))  # same ISR, but the partition epoch moved
    assert a != b
    b = base()
    b.apply(RegisterBroker(9, INC, 2, "h", 1))  # only the epoch counter ... and a broker
    b.apply(UnregisterBroker(9, 2))
    assert a == b  # epoch counter max(6, 2) == 6
    b.apply(RegisterBroker(9, INC, 20, "h", 1))
    b.apply(UnregisterBroker(9, 20))
    assert a != b and b.last_broker_epoch == 20
