"""Replica placement of classic partitions: Kafka's rack-aware assignment, and the checks of a
manual assignment.

A classic topic chooses its replication factor (any RF up to the number of unfenced brokers),
unlike a diskless one (``controller.placement``: RF = racks). The assignment is the one Kafka
has used since KIP-36: brokers are listed alternating racks (a1, b1, c1, a2, b2, ...); the
leader of partition ``p`` is the broker at ``(start + p) % n`` in that list, and each further
replica is taken walking the list from the leader with a shift that grows every ``n``
partitions, skipping brokers whose rack already holds a replica until every rack holds one.
So every partition spans min(RF, racks) racks, leaders are spread evenly, and followers of
one leader vary. Kafka picks ``start`` and the shift at random; here ``start`` is the broker
with the fewest preferred leaderships (then the list order), which spreads successive topics
just as well and keeps the controller's decisions deterministic. Brokers without a rack form
one rack (Kafka refuses a mix unless told to ignore racks; one rack is the useful reading).

Only unfenced brokers get new replicas, as in KRaft: a fenced broker may be gone for good.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from kio.schema.errors import ErrorCode

from .image import BrokerRegistration
from .placement import Load, Rack, rack_sort_key


class ClassicPlacementError(ValueError):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code


def rack_alternated(brokers: Sequence[BrokerRegistration]) -> list[BrokerRegistration]:
    """Brokers interleaved by rack: the first of each rack (racks in name order), then the
    second of each, ... Within a rack by node id."""
    by_rack: dict[Rack, list[BrokerRegistration]] = {}
    for b in sorted(brokers, key=lambda b: b.node_id):
        by_rack.setdefault(b.rack, []).append(b)
    racks = [by_rack[r] for r in sorted(by_rack, key=rack_sort_key)]
    out: list[BrokerRegistration] = []
    for i in range(max((len(r) for r in racks), default=0)):
        out.extend(r[i] for r in racks if i < len(r))
    return out


def place_classic(
    brokers: Mapping[int, BrokerRegistration],
    load: Load,
    count: int,
    replication_factor: int,
    first_partition: int = 0,
) -> list[tuple[int, ...]]:
    """Replica lists (preferred leader first) for ``count`` new partitions numbered from
    ``first_partition``. ``load`` is updated, so several topics in one request spread."""
    if replication_factor <= 0:
        raise ClassicPlacementError(
            ErrorCode.invalid_replication_factor,
            "Replication factor must be larger than 0, or -1 to use the default value.",
        )
    arranged = rack_alternated([b for b in brokers.values() if not b.fenced])
    n = len(arranged)
    if replication_factor > n:
        raise ClassicPlacementError(
            ErrorCode.invalid_replication_factor,
            f"Unable to replicate the partition {replication_factor} time(s): The target "
            f"replication factor of {replication_factor} cannot be reached because only "
            f"{n} broker(s) are registered and unfenced.",
        )
    racks = len({b.rack for b in arranged})
    start = min(range(n), key=lambda i: (load.leaders[arranged[i].node_id], i))
    shift = start
    out: list[tuple[int, ...]] = []
    for partition in range(first_partition, first_partition + count):
        if partition > 0 and partition % n == 0:
            shift += 1
        first = (partition + start) % n
        leader = arranged[first]
        chosen = [leader.node_id]
        used_racks = {leader.rack}
        k = 0
        while len(chosen) < replication_factor:
            # Walk the list from the leader; n - 1 steps visit every other broker once.
            b = arranged[(first + 1 + (shift * racks + k) % (n - 1)) % n]
            k += 1
            if b.node_id in chosen:
                continue
            if b.rack in used_racks and len(used_racks) < racks:
                continue
            chosen.append(b.node_id)
            used_racks.add(b.rack)
        replicas = tuple(chosen)
        load.add(replicas)
        out.append(replicas)
    return out


def manual_assignment_error(
    brokers: Mapping[int, BrokerRegistration], assignment: Sequence[Sequence[int]]
) -> str | None:
    """Why a CreateTopics/CreatePartitions manual assignment (replica lists in partition
    order) is refused with INVALID_REPLICA_ASSIGNMENT, or None."""
    sizes = {len(replicas) for replicas in assignment}
    for index, replicas in enumerate(assignment):
        if not replicas:
            return f"The replica assignment of partition {index} is empty."
        if len(set(replicas)) != len(replicas):
            return (
                f"Duplicate brokers not allowed in replica assignment: {list(replicas)} "
                f"for partition {index}."
            )
        unknown = [r for r in replicas if r not in brokers]
        if unknown:
            return (
                f"The manual partition assignment includes broker(s) {unknown} that are "
                "not registered."
            )
    if len(sizes) > 1:
        return "All partitions should have the same number of replicas."
    return None
