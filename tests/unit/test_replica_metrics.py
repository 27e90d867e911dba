"""Kafka's ReplicaManager metrics of a broker (controller mode): each leader reports the
under-replicated partitions it leads and its ISR shrinks/expands, from its metadata log."""

from __future__ import annotations

from prometheus_client import generate_latest

from broker.metadata.controller_client import MetadataChunk
from broker.metadata.metadata_follower import MetadataFollower
from broker.server.metrics import METRICS
from controller.logic_config import ControllerConfig
from controller.metrics import under_replicated_led_by
from controller.requests import IsrChange

from .controller.harness import SESSION_MS, Cluster, uuids

CLASSIC = {"diskless.enable": "false"}


def chunk(c: Cluster, after: int) -> MetadataChunk:
    entries = list(enumerate(c.log, start=1))[after:]
    return MetadataChunk(len(c.log), None, None, 0, entries)


def alter_isr(c: Cluster, isr: tuple[int, ...]) -> None:
    topic = c.image.topic("c")
    assert topic is not None
    p = topic.partitions[0]
    change = IsrChange(topic.topic_id, 0, p.leader_epoch, p.partition_epoch, isr)
    c.commit(c.logic.alter_partition(c.image, p.leader, c.epochs[p.leader], [change]))


async def test_each_leader_reports_its_under_replicated_partitions_and_isr_changes() -> None:
    c = Cluster(ControllerConfig(new_uuid=uuids(), classic_topics=True))
    c.start({1: "a", 2: "b", 3: "c"})
    c.create("c", 1, replication_factor=3, configs=CLASSIC)
    c.create("d", 3)  # diskless
    p = c.partitions("c")[0]
    leader, followers = p.leader, [r for r in p.replicas if r != p.leader]
    follower = MetadataFollower(client=None)  # type: ignore[arg-type]
    await follower.apply_chunk(chunk(c, 0))  # the first answer: history, not counted
    seen = len(c.log)

    # A follower falls behind on live brokers: its leader shrinks the ISR.
    alter_isr(c, (leader, followers[0]))
    await follower.apply_chunk(chunk(c, seen))
    seen = len(c.log)
    changes = follower.isr_changes
    assert (changes.shrinks[leader], changes.expands[leader]) == (1, 0)
    assert under_replicated_led_by(follower.image, leader) == 1
    assert all(under_replicated_led_by(follower.image, f) == 0 for f in followers)

    alter_isr(c, p.replicas)  # caught up again
    await follower.apply_chunk(chunk(c, seen))
    seen = len(c.log)
    assert (changes.shrinks[leader], changes.expands[leader]) == (1, 1)
    assert under_replicated_led_by(follower.image, leader) == 0

    # A lost broker: its diskless replicas are offline, reported by their (alive) leaders;
    # an election is not an ISR change by a leader.
    lost = followers[1]
    c.advance(SESSION_MS + 1, heartbeating=[b for b in (1, 2, 3) if b != lost])
    await follower.apply_chunk(chunk(c, seen))
    d = c.partitions("d")
    reported = sum(under_replicated_led_by(follower.image, b) for b in (1, 2, 3) if b != lost)
    expected = sum(1 for q in d.values() if q.leader != lost) + 1  # + the classic one
    assert reported == expected

    led = under_replicated_led_by(follower.image, leader)
    assert led >= 1
    METRICS.watch_replicas(
        lambda: led, lambda: changes.shrinks[leader], lambda: changes.expands[leader]
    )
    try:
        text = generate_latest(METRICS.registry).decode()
    finally:
        METRICS.watch_replicas(lambda: 0, lambda: 0, lambda: 0)
    assert f"kafka_server_replicamanager_underreplicatedpartitions {led}.0" in text
    assert f"kafka_server_replicamanager_isrshrinks_total {changes.shrinks[leader]}.0" in text
    assert "kafka_server_replicamanager_isrexpands_total 1.0" in text
