"""Rack-aware placement of diskless partitions (the managed replication factor).

The replication factor of a diskless topic is managed: RF = the number of distinct racks among
the registered brokers, one replica per rack. Data lives in object storage, so replicas are
metadata-only; what they buy is a leader and a preferred replica in every rack (AZ-local
routing) and real replica/leader metadata for tooling.

Choices:

- Racks are counted over *registered* brokers, fenced ones included: a rack whose only broker
  is restarting when a topic is created still gets its replica (placement is static, so
  counting only unfenced brokers would leave that topic without a replica there for good).
  Within a rack, unfenced brokers are preferred.
- Brokers without a rack form one rack, ``None``. A cluster with no racks at all therefore
  gets RF=1 (there is no failure domain to spread over; the object store replicates the data),
  and in a mixed cluster the rack-less brokers count as one more rack. The other option, each
  rack-less broker its own rack, would make RF grow with the broker count.
- Within a rack the least-loaded broker is chosen: fewest replicas, then fewest preferred
  leaderships, then fewest partitions shared with the replicas already chosen for this
  partition, then lowest node id (deterministic). Load counts every partition in the image,
  so successive topics fill the brokers evenly. The sharing tie-break varies the replica
  sets ((1,3,5), (2,4,6), (1,4,5), ... rather than only two sets in a 2+2+2 cluster), so the
  load of a broker that goes away spreads over several brokers, not all to one.
- The leader (first replica) of each new partition is chosen first, over all brokers: the one
  with the fewest preferred leaderships (then fewest replicas, then lowest id); the other racks
  then get their least-loaded broker. The others follow ordered by how often each is
  already the second replica behind this leader (then rack order after the leader's rack):
  the second replica leads when the first must be replaced (its broker unregistered, a
  migration's lost leader, a classic partition's dead leader), so those leaderships go to
  several brokers. Load counts *preferred* leaders (first replicas), which placement
  controls, not current leaders, which move transiently.
- Placement is static after creation: nothing here runs on broker failure (seed: "no
  auto-reassignment"), and a topic's RF does not follow the racks registered later. New
  partitions of an existing topic keep its RF (its partition 0's, as Kafka's
  CreatePartitions does), one replica per rack over that many racks: with more racks than
  the RF, the racks whose least-loaded broker is least loaded; with fewer (racks went
  away), every rack once and the rest on the least-loaded brokers left.
- Legacy topics (created under the old binary's RF=1 rule, recorded at creation:
  ``records.Topic.legacy``) are the only ones the background expansion touches.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from uuid import UUID

from .election import change_to, desired_state
from .image import BrokerRegistration, MetadataImage
from .records import PartitionChange

Rack = str | None


class PlacementError(ValueError):
    pass


def rack_sort_key(rack: Rack) -> tuple[bool, str]:
    return (rack is not None, rack or "")


@dataclass
class Load:
    """What placement balances: replicas and preferred leaderships per broker, partitions
    shared by two brokers, and who is second behind each leader."""

    replicas: Counter[int] = field(default_factory=Counter)
    leaders: Counter[int] = field(default_factory=Counter)
    # (a, b) with a < b -> partitions having both as replicas.
    shared: Counter[tuple[int, int]] = field(default_factory=Counter)
    # (first, second) -> partitions: who takes over the leadership when ``first`` is down.
    failover: Counter[tuple[int, int]] = field(default_factory=Counter)

    @classmethod
    def of(cls, image: MetadataImage) -> Load:
        load = cls()
        for _topic, _index, p in image.iter_partitions():
            load.add(p.replicas)
        return load

    def add(self, replicas: Sequence[int], counted: int = 0) -> None:
        """Counts a partition's replicas, except its first ``counted`` ones, counted before
        (with the leadership, if ``counted`` > 0)."""
        self.replicas.update(replicas[counted:])
        if counted == 0:
            self.leaders[replicas[0]] += 1
        if counted <= 1 and len(replicas) > 1:
            self.failover[(replicas[0], replicas[1])] += 1
        for i, a in enumerate(replicas):
            for b in replicas[max(i + 1, counted) :]:
                self.shared[(min(a, b), max(a, b))] += 1

    def sharing(self, node_id: int, others: Iterable[int]) -> int:
        return sum(self.shared[(min(node_id, o), max(node_id, o))] for o in others)

    def copy(self) -> Load:
        return Load(
            Counter(self.replicas),
            Counter(self.leaders),
            Counter(self.shared),
            Counter(self.failover),
        )


def racks_of(brokers: Iterable[BrokerRegistration]) -> dict[Rack, list[BrokerRegistration]]:
    """Brokers grouped by rack, racks in a fixed order (None first, then by name)."""
    groups: dict[Rack, list[BrokerRegistration]] = {}
    for b in brokers:
        groups.setdefault(b.rack, []).append(b)
    return {rack: groups[rack] for rack in sorted(groups, key=rack_sort_key)}


def managed_replication_factor(image: MetadataImage) -> int:
    """RF of a new diskless partition: the number of distinct racks of registered brokers."""
    return len(image.racks())


def least_loaded(
    brokers: Iterable[BrokerRegistration], load: Load, chosen: Sequence[int]
) -> BrokerRegistration:
    """The broker a new replica goes to: unfenced first, then the fewest replicas, the
    fewest leaders, the fewest partitions shared with ``chosen``, the lowest id."""
    return min(
        brokers,
        key=lambda b: (
            b.fenced,
            load.replicas[b.node_id],
            load.leaders[b.node_id],
            load.sharing(b.node_id, chosen),
            b.node_id,
        ),
    )


def order_after(racks: Sequence[Rack], first: Rack) -> list[Rack]:
    """Racks in rotation starting with ``first``."""
    i = racks.index(first)
    return [*racks[i:], *racks[:i]]


def place_partitions(
    brokers: Mapping[int, BrokerRegistration], load: Load, count: int, rf: int | None = None
) -> list[tuple[int, ...]]:
    """Replica lists (preferred leader first) for ``count`` new partitions, one replica per
    rack; ``rf``: that many replicas (an existing topic's RF) instead of one per rack now.
    ``load`` is updated with the new replicas, so a caller placing several topics in one
    request passes the same Load to each call."""
    groups = racks_of(brokers.values())
    if not groups:
        raise PlacementError("no broker is registered")
    if all(b.fenced for b in brokers.values()):
        raise PlacementError("no broker is unfenced")
    racks = list(groups)
    rf = len(racks) if rf is None else rf
    if not 0 < rf <= len(brokers):
        raise PlacementError(
            f"the topic's replication factor {rf} cannot be reached with "
            f"{len(brokers)} registered broker(s)"
        )
    out: list[tuple[int, ...]] = []
    for _ in range(count):
        # The leader first, over all brokers: choosing replicas first (fewest replicas) and
        # the leader among them can starve a broker of leaderships for good.
        leader = min(
            brokers.values(),
            key=lambda b: (b.fenced, load.leaders[b.node_id], load.replicas[b.node_id], b.node_id),
        )
        chosen: dict[Rack, BrokerRegistration] = {leader.rack: leader}
        other_racks = order_after(racks, leader.rack)[1:]
        if rf < len(racks):
            # Racks registered since the topic was created: its RF stays, so only rf - 1
            # of the other racks get a replica, those with the least-loaded candidates.
            candidate = {r: least_loaded(groups[r], load, [leader.node_id]) for r in other_racks}
            kept = set(
                sorted(
                    other_racks,
                    key=lambda r: (
                        candidate[r].fenced,
                        load.replicas[candidate[r].node_id],
                        load.leaders[candidate[r].node_id],
                        candidate[r].node_id,
                    ),
                )[: rf - 1]
            )
            other_racks = [rack for rack in other_racks if rack in kept]
        for rack in other_racks:
            picked = [b.node_id for b in chosen.values()]
            chosen[rack] = least_loaded(groups[rack], load, picked)
        followers = [chosen[rack].node_id for rack in other_racks]
        while len(followers) + 1 < rf:
            # Fewer racks than the topic's RF (racks went away): the least-loaded others.
            taken = {leader.node_id, *followers}
            spare = [b for b in brokers.values() if b.node_id not in taken]
            followers.append(least_loaded(spare, load, [leader.node_id, *followers]).node_id)
        # A stable sort: rack order among equals.
        followers.sort(key=lambda node_id: load.failover[(leader.node_id, node_id)])
        replicas = (leader.node_id, *followers)
        load.add(replicas)
        out.append(replicas)
    return out


def needs_expansion(image: MetadataImage, topic_id: UUID) -> bool:
    """A legacy diskless topic (created under the old binary's RF=1 rule, as recorded at
    its creation) with a single-replica partition while there are several racks. A topic
    created with RF=1 in a one-rack cluster is not legacy: placement is static."""
    topic = image.topics.get(topic_id)
    if (
        topic is None
        or not topic.diskless
        or not topic.legacy
        or managed_replication_factor(image) <= 1
    ):
        return False
    return any(len(p.replicas) == 1 for p in topic.partitions.values())


def plan_rf_expansion(
    image: MetadataImage, topic_id: UUID, load: Load | None = None
) -> list[PartitionChange]:
    """Records expanding the single-replica partitions of a legacy diskless topic to one
    replica per rack. The existing replica stays first (its broker keeps the leadership, no
    client sees a leader change) if its broker is registered; a replica naming an unknown
    broker (the old binary did not care) is replaced by a fresh placement. Partitions in a
    reassignment are left alone. Pass ``load`` when planning several topics in one batch."""
    if not needs_expansion(image, topic_id):
        return []
    topic = image.topics[topic_id]
    load = Load.of(image) if load is None else load
    groups = racks_of(image.brokers.values())
    racks = list(groups)
    alive = image.alive_brokers()
    out: list[PartitionChange] = []
    for index in sorted(topic.partitions):
        p = topic.partitions[index]
        if len(p.replicas) != 1 or p.reassigning:
            continue
        kept = image.brokers.get(p.replicas[0])
        if kept is None:
            try:
                (target,) = place_partitions(image.brokers, load, 1)
            except PlacementError:
                continue  # every broker fenced: a later run will do it
        else:
            target = (kept.node_id,)
            for rack in order_after(racks, kept.rack)[1:]:
                target += (least_loaded(groups[rack], load, target).node_id,)
            load.add(target, counted=1)
        change = change_to(topic_id, index, p, desired_state(replace(p, replicas=target), alive))
        if change is not None:
            out.append(change)
    return out
