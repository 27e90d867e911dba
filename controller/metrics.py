"""Controller metrics derived from the metadata image (pure functions; the controller
process exports them to Prometheus, ``controller.service``).

Seed 000's metrics, diskless topics only, with the seed's meanings:

- ``effective_rf`` (``kafka_controller_diskless_effective_rf{topic}``): the RF assigned at
  the topic's creation (``records.Topic.replication_factor``). Placement is static, so it
  does not follow the racks registered since, nor a reassignment of some partitions.
- ``rack_aware`` (``kafka_controller_diskless_rack_aware{topic,partition}``): 1 iff the
  partition has one replica per rack, i.e. no two replicas share a rack (a replica on an
  unregistered broker has no known rack: 0). Racks added after creation do not make a
  partition with one replica in each of its racks "not rack-aware".
- ``rf1_topics`` (``kafka_controller_diskless_rf1_topics_total``): legacy topics (created
  under the old binary's RF=1 rule, recorded at creation) not modernized yet
  (``placement.needs_expansion``: a single-replica partition while there are several racks).

Kafka's (``kafka_controller_kafkacontroller_offlinepartitionscount`` and the cluster-wide
under-replicated count; each broker reports its own led partitions, ``broker.server``):

- under-replicated: classic, the ISR is smaller than the replica set (its target during a
  reassignment), as Kafka's ``Partition.isUnderReplicated``, also with every broker alive
  (a lagging follower left the ISR); diskless, a replica is offline (fenced or
  unregistered): informational, as the seed says (the ISR stays the replica set and the
  transformer routes around it).
- offline: classic, no alive leader; diskless, no broker alive at all (the transformer
  serves a diskless partition from any alive broker).
"""

from __future__ import annotations

from dataclasses import dataclass

from .image import MetadataImage, PartitionState, TopicImage
from .placement import needs_expansion
from .records import NO_LEADER


def effective_rf(image: MetadataImage) -> dict[str, int]:
    return {
        t.name: t.replication_factor
        for t in image.topics.values()
        if t.diskless and t.replication_factor is not None
    }


def rack_aware(image: MetadataImage) -> dict[tuple[str, int], bool]:
    out = {}
    for topic, index, p in image.iter_partitions():
        if not topic.diskless:
            continue
        replicas = p.original_replicas
        racks = [image.brokers[r].rack for r in replicas if r in image.brokers]
        out[(topic.name, index)] = len(racks) == len(replicas) == len(set(racks))
    return out


def rf1_topics(image: MetadataImage) -> list[str]:
    return sorted(t.name for t in image.topics.values() if needs_expansion(image, t.topic_id))


def is_under_replicated(image: MetadataImage, topic: TopicImage, p: PartitionState) -> bool:
    if topic.diskless:
        return bool(image.offline_replicas(p))
    return len(p.isr) < len(p.target_replicas)


def under_replicated_led_by(image: MetadataImage, node_id: int) -> int:
    """The under-replicated partitions broker ``node_id`` leads (what it reports)."""
    return sum(
        1
        for t, _i, p in image.iter_partitions()
        if p.leader == node_id and is_under_replicated(image, t, p)
    )


def replica_counts(image: MetadataImage, node_id: int) -> tuple[int, int]:
    """(partitions with a replica on ``node_id``, partitions it leads): Kafka's
    ReplicaManager PartitionCount and LeaderCount of that broker."""
    hosted = led = 0
    for topic in image.topics.values():
        for p in topic.partitions.values():
            hosted += node_id in p.replicas
            led += p.leader == node_id
    return hosted, led


def under_replicated(image: MetadataImage) -> list[tuple[str, int]]:
    return [(t.name, i) for t, i, p in image.iter_partitions() if is_under_replicated(image, t, p)]


def offline(image: MetadataImage) -> list[tuple[str, int]]:
    """Partitions nobody serves: a classic one without an alive leader; a diskless one
    only when no broker is alive (the transformer sends its clients to any alive broker,
    also while its recorded leader is down)."""
    alive = image.alive_brokers()
    return [
        (t.name, i)
        for t, i, p in image.iter_partitions()
        if (not alive if t.diskless else p.leader == NO_LEADER or p.leader not in alive)
    ]


@dataclass(frozen=True)
class ControllerMetrics:
    effective_rf: dict[str, int]
    rack_aware: dict[tuple[str, int], bool]
    rf1_topics_total: int
    under_replicated_partitions: int
    offline_partitions: int
    brokers_registered: int
    brokers_fenced: int
    topics: int
    partitions: int


def collect(image: MetadataImage) -> ControllerMetrics:
    return ControllerMetrics(
        effective_rf=effective_rf(image),
        rack_aware=rack_aware(image),
        rf1_topics_total=len(rf1_topics(image)),
        under_replicated_partitions=len(under_replicated(image)),
        offline_partitions=len(offline(image)),
        brokers_registered=len(image.brokers),
        brokers_fenced=sum(1 for b in image.brokers.values() if b.fenced),
        topics=len(image.topics),
        partitions=sum(len(t.partitions) for t in image.topics.values()),
    )
