"""The tiering state of a classic topic in the metadata image (KIP-950 disablement:
records.TopicTiering / TieringPartitionDisabled, applied by controller.image; decisions in
controller.tiering)."""

from __future__ import annotations

from dataclasses import dataclass

TIERING_ENABLED = "ENABLED"
TIERING_DISABLING = "DISABLING"
TIERING_DISABLED = "DISABLED"
TIERING_STATES = (TIERING_ENABLED, TIERING_DISABLING, TIERING_DISABLED)
TIERING_POLICIES = ("retain", "delete")
# The moves a tiering state may make; a snapshot sets any state on a topic without one.
TIERING_MOVES = {
    TIERING_ENABLED: (TIERING_DISABLING,),
    TIERING_DISABLING: (TIERING_DISABLED,),
    TIERING_DISABLED: (TIERING_ENABLED,),
}


@dataclass(frozen=True, slots=True)
class TieringState:
    state: str
    generation: int
    policy: str = "retain"
    done: frozenset[int] = frozenset()  # partitions done disabling (while DISABLING)
