"""Which broker coordinates a group.

Every broker computes the same answer from the same list of live brokers: sorted by
node id, the one at ``murmur3(group id) mod n``. When the list changes, some groups
move; their new coordinator loads their membership snapshot and committed offsets from
the shared database, and the members go on without rejoining.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol, TypeVar

import mmh3


class HasNodeId(Protocol):
    @property
    def node_id(self) -> int: ...


B = TypeVar("B", bound=HasNodeId)


def group_hash(group_id: str) -> int:
    """Stable across processes and versions (unlike Python's salted ``hash``)."""
    return mmh3.hash(group_id.encode("utf-8"), 0, signed=False)


def coordinator_for(group_id: str, brokers: Sequence[B]) -> B | None:
    """The broker coordinating ``group_id``, or None when no broker is live."""
    if not brokers:
        return None
    ordered = sorted(brokers, key=lambda b: b.node_id)
    return ordered[group_hash(group_id) % len(ordered)]
