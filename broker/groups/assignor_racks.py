"""Racks for the server-side assignors: which member is in a rack that holds a replica of
a partition (rack-aware assignment of KIP-848 groups, as Kafka 3.7's server-side uniform
assignor had it, see :mod:`broker.groups.assignors`).

A member's rack is its ``rack_id`` (the client's ``client.rack``). A partition's racks
are the racks of its replicas' brokers (classic topics), or ``None`` for a partition
served in every rack: a diskless partition, which any broker of any AZ serves (see
broker/metadata/transformer.py), so no member is far from it.

Racks are used only when they can make a difference (Kafka's rule): some member has a
rack, some partition has a replica in one of the members' racks, and the partitions are
not all in the same racks (with every partition in every rack, as with diskless topics
only, no member is closer to one partition than to another).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from uuid import UUID

# The racks of one partition's replicas; None: the partition is served in every rack.
PartitionRacks = frozenset[str] | None
# Per topic id, the racks of each partition by index (missing: served in every rack).
TopicRacks = Mapping[UUID, Sequence[PartitionRacks]]


class RackMatcher:
    """Whether a member is in one of a partition's racks, for the partitions given."""

    def __init__(
        self,
        member_racks: Mapping[str, str | None],
        partition_racks: TopicRacks,
        partitions: Iterable[tuple[UUID, int]],
    ) -> None:
        self._members = {m: r for m, r in member_racks.items() if r}
        self._racks: dict[tuple[UUID, int], frozenset[str]] = {}
        if not self._members:
            self.enabled = False
            return
        for topic_id, p in partitions:
            racks = partition_racks.get(topic_id)
            found = racks[p] if racks is not None and p < len(racks) else None
            if found is not None:
                self._racks[(topic_id, p)] = found
        every = frozenset().union(*self._racks.values()) if self._racks else frozenset()
        member_side = set(self._members.values())
        # A partition served in every rack is in `every` rack as far as this rule goes.
        self.enabled = bool(member_side & every) and any(
            racks != every for racks in self._racks.values()
        )

    def local(self, member: str, tp: tuple[UUID, int]) -> bool:
        """True unless racks are used, the member has a rack, and none of the partition's
        replicas is in it (a member without a rack is never far: it has no preference)."""
        if not self.enabled:
            return True
        rack = self._members.get(member)
        if rack is None:
            return True
        racks = self._racks.get(tp)
        return racks is None or rack in racks

    def in_rack(self, member: str, tp: tuple[UUID, int]) -> bool:
        """Racks are used, the member has a rack, and the partition has a replica there
        (not merely "served in every rack")."""
        if not self.enabled:
            return False
        rack = self._members.get(member)
        racks = self._racks.get(tp)
        return rack is not None and racks is not None and rack in racks
