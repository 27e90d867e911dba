"""Leader and ISR of classic partitions, whose replicas hold their own copies of the data.

Unlike a diskless partition (``controller.election``), a classic replica can fall behind, so
membership of the ISR is earned: only the partition leader adds a replica (AlterPartition,
``controller.alter_partition``) once it has caught up. The controller only ever *removes*:

- a replica that is no longer alive (fenced, shut down, unregistered) leaves the ISR, except
  that the ISR never becomes empty: its last member stays, without leadership, so that when
  it returns it is the one replica known to hold every acknowledged record (KRaft does the
  same);
- the leader stays while it is alive and in the ISR; otherwise the first alive ISR member in
  replica order (the preferred replica first) takes over, which bumps the leader epoch;
- no alive ISR member: no leader (-1), unless ``unclean.leader.election.enable`` is true for
  the topic, in which case the first alive replica leads with an ISR of itself and may lose
  acknowledged records (that is what the setting means);
- a returning broker does not rejoin any ISR here: it must first catch up with the leader.
  If it was the last ISR member of a leaderless partition it becomes the leader again.

A reassignment completes once every target replica is in the ISR (has caught up); the
replicas being removed then leave the ISR, and if the leader was one of them the first
target replica in the ISR takes over.
"""

from __future__ import annotations

from collections.abc import Set

from .image import PartitionState
from .records import NO_LEADER


def classic_desired_state(
    p: PartitionState, alive: Set[int], unclean: bool = False
) -> PartitionState:
    """The state ``p`` should have with brokers ``alive``. Epochs are left as they are (the
    image bumps them when the change is applied)."""
    replicas, adding, removing = p.replicas, p.adding_replicas, p.removing_replicas
    isr = p.isr
    if (adding or removing) and all(r in isr for r in p.target_replicas):
        replicas = p.target_replicas
        adding = removing = ()
    # Also after a cancelled reassignment: the added replicas go, with their ISR places.
    isr = tuple(r for r in isr if r in replicas)
    alive_isr = tuple(r for r in isr if r in alive)
    leader = p.leader if p.leader in alive_isr else NO_LEADER
    if leader == NO_LEADER:
        ordered = [r for r in replicas if r in alive_isr]
        if ordered:
            leader = ordered[0]
        elif unclean:
            candidates = [r for r in replicas if r in alive]
            if candidates:
                leader = candidates[0]
                alive_isr = (leader,)
    if alive_isr:
        isr = alive_isr
    elif isr:
        # Keep the last member: it alone is known to hold everything acknowledged.
        isr = (next(r for r in replicas if r in isr),) if len(isr) > 1 else isr
    return PartitionState(
        replicas, isr, leader, p.leader_epoch, p.partition_epoch, adding, removing
    )
