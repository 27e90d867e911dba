"""Controller metrics (effective RF, rack awareness, under-replication), derived from
the metadata image (pure functions; the process exports them, e.g. to Prometheus as
``sluice_controller_diskless_effective_rf{topic}``).

- effective RF of a topic: the replica count of its partition 0 outside a reassignment (as
  ``kafka-topics --describe`` shows it). Partitions added after the rack count changed may
  have another RF; ``rack_aware`` tells about each partition.
- rack-aware: a partition's replicas span min(RF, racks) distinct racks, racks counted over
  the registered brokers now. A replica on an unregistered broker has no known rack.
- RF=1 topics: legacy diskless topics not yet expanded (``placement.needs_expansion``): a
  single-replica partition while there are several racks. In a one-rack cluster RF=1 is the
  managed value, not a legacy one, and is not counted.
- under-replicated: a partition with a replica not alive (fenced or unregistered), i.e. the
  ISR is smaller than the replicas. Informational for diskless topics.
- offline: no leader (no replica alive).
"""

from __future__ import annotations

from dataclasses import dataclass

from .image import MetadataImage, PartitionState
from .placement import managed_replication_factor, needs_expansion
from .records import NO_LEADER


def _rf(p: PartitionState) -> int:
    return len(p.original_replicas)


def effective_rf(image: MetadataImage) -> dict[str, int]:
    return {
        t.name: _rf(t.partitions[min(t.partitions)]) for t in image.topics.values() if t.partitions
    }


def rack_aware(image: MetadataImage) -> dict[tuple[str, int], bool]:
    racks = managed_replication_factor(image)
    out = {}
    for topic, index, p in image.iter_partitions():
        replicas = p.original_replicas
        spanned = {image.brokers[r].rack for r in replicas if r in image.brokers}
        # Replicas on unregistered brokers span no known rack; two in one rack count once.
        known = sum(1 for r in replicas if r in image.brokers)
        out[(topic.name, index)] = known == len(replicas) and len(spanned) == min(
            len(replicas), racks
        )
    return out


def rf1_topics(image: MetadataImage) -> list[str]:
    return sorted(t.name for t in image.topics.values() if needs_expansion(image, t.topic_id))


def under_replicated(image: MetadataImage) -> list[tuple[str, int]]:
    return [(t.name, i) for t, i, p in image.iter_partitions() if image.offline_replicas(p)]


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


def collect(image: MetadataImage) -> ControllerMetrics:
    return ControllerMetrics(
        effective_rf=effective_rf(image),
        rack_aware=rack_aware(image),
        rf1_topics_total=len(rf1_topics(image)),
        under_replicated_partitions=len(under_replicated(image)),
        offline_partitions=len(offline(image)),
        brokers_registered=len(image.brokers),
        brokers_fenced=sum(1 for b in image.brokers.values() if b.fenced),
    )
