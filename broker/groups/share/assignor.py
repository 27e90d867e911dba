"""Kafka's simple share-group assignor, in its essentials: every member gets partitions
of the topics it subscribes to, and every partition goes to at least one member. With
more members than partitions a partition is shared by several members (the records are
still delivered once each: the share-partition hands them out); with fewer, the
partitions are spread round robin. Deterministic: every coordinator computes the same
assignment from the same members and topics.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from uuid import UUID

Assignment = dict[UUID, list[int]]


def assign(
    subscriptions: Mapping[str, Sequence[str]],
    topics: Mapping[str, tuple[UUID, int]],
) -> dict[str, Assignment]:
    """``subscriptions``: member id -> subscribed topic names; ``topics``: name -> (topic
    id, partition count) of the topics that exist. Returns member id -> topic id ->
    sorted partitions (every member present, possibly with nothing)."""
    out: dict[str, Assignment] = {m: {} for m in subscriptions}
    for name in sorted({t for names in subscriptions.values() for t in names}):
        if name not in topics:
            continue
        topic_id, count = topics[name]
        members = sorted(m for m, names in subscriptions.items() if name in names)
        if not members or count <= 0:
            continue
        pairs: list[tuple[str, int]]
        if len(members) <= count:
            pairs = [(members[p % len(members)], p) for p in range(count)]
        else:
            # More members than partitions: each member one partition, shared.
            pairs = [(m, i % count) for i, m in enumerate(members)]
        for member, partition in pairs:
            out[member].setdefault(topic_id, []).append(partition)
    for assignment in out.values():
        for partitions in assignment.values():
            partitions.sort()
    return out
