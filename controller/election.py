"""Leader and ISR of diskless partitions, from which brokers are alive (classic partitions:
``controller.classic_election``; ``desired_for`` picks the rule of a partition's topic).

A diskless partition has no local data to fall behind on. Seed 000: "for diskless topics,
all replicas are always in the ISR", and availability on a broker failure is the
transformer's job (it routes around offline replicas at once), not the controller's:

- the ISR is the replica set, always: losing a broker shrinks no ISR (``kafka-topics
  --describe`` may show an offline broker in it, which the seed accepts; the
  under-replicated count, ``controller.metrics``, says which replicas are offline);
- the leader stays where it is when its broker is lost: no leader epoch bump, no
  metadata change for clients to chase; the transformer sends clients to an alive broker
  meanwhile. The only exception is a topic migrating to classic (SEALING), whose leaders
  must act (seal the diskless log): there a lost leader is replaced by the first alive
  replica, as Kafka's election from the ISR would;
- a partition without a leader (its replicas were all fenced when it was created, or a
  reassignment removed its leader) gets the first alive replica in replica order;
- a broker that comes back (``returning``) takes back the leadership of the partitions
  whose preferred (first) replica it is, if another broker leads them.

A reassignment (see ``controller.logic``) completes as soon as every added replica is alive:
there is no data to copy, so "caught up" means "up".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Set
from uuid import UUID

from .classic_election import classic_desired_state
from .image import (
    MIGRATION_SEALING,
    TO_CLASSIC,
    TO_DISKLESS,
    MetadataImage,
    PartitionState,
    TopicImage,
)
from .records import NO_LEADER, PartitionChange

UNCLEAN_LEADER_ELECTION = "unclean.leader.election.enable"


def unclean_allowed(configs: Mapping[str, str | None]) -> bool:
    """Whether a topic with these overrides may elect a leader outside its ISR. No override
    (absent, or None: an alteration removing it) is Kafka's default, false."""
    return (configs.get(UNCLEAN_LEADER_ELECTION) or "false").lower() == "true"


def desired_state(
    p: PartitionState,
    alive: Set[int],
    returning: Set[int] = frozenset(),
    move_dead_leader: bool = False,
    departed: Set[int] = frozenset(),
) -> PartitionState:
    """The state ``p`` should have with brokers ``alive``. Epochs are left as they are (the
    image bumps them when the change is applied). ``move_dead_leader``: replace a leader
    that is not alive (a migration's leaders must act); ``departed``: brokers being
    unregistered, which never come back, so they lose their leaderships."""
    replicas, adding, removing = p.replicas, p.adding_replicas, p.removing_replicas
    if (adding or removing) and all(r in alive for r in adding):
        replicas = p.target_replicas
        adding = removing = ()
    alive_replicas = [r for r in replicas if r in alive]
    leader = p.leader if p.leader in replicas else NO_LEADER
    if leader in departed:
        leader = alive_replicas[0] if alive_replicas else NO_LEADER
    elif alive_replicas and (leader == NO_LEADER or (move_dead_leader and leader not in alive)):
        leader = alive_replicas[0]
    preferred = replicas[0]
    if preferred in returning and preferred in alive:
        leader = preferred
    return PartitionState(
        replicas, replicas, leader, p.leader_epoch, p.partition_epoch, adding, removing
    )


def desired_for(
    topic: TopicImage,
    index: int,
    p: PartitionState,
    alive: Set[int],
    returning: Set[int] = frozenset(),
    departed: Set[int] = frozenset(),
) -> PartitionState:
    """The state ``p`` of ``topic`` should have: diskless and classic partitions differ in
    who may be in the ISR."""
    if topic.diskless and not keeps_classic_isr(topic, index, p):
        return desired_state(p, alive, returning, leaders_must_act(topic), departed)
    return classic_desired_state(p, alive, unclean_allowed(topic.configs))


def leaders_must_act(topic: TopicImage) -> bool:
    """A diskless topic migrating to classic: its partitions' leaders seal the diskless
    logs, so a lost leader is replaced (``desired_state``'s one exception)."""
    m = topic.migration
    return m is not None and m.direction == TO_CLASSIC and m.state == MIGRATION_SEALING


def stages_classic(topic: TopicImage, p: PartitionState) -> bool:
    """A partition of a topic migrated to diskless being reassigned: its replicas hold the
    sealed classic log below the boundary (every replica serves it), so the move is a
    classic one. An added replica joins the ISR only once it has fetched that log from the
    leader (AlterPartition), the reassignment completes once every target replica is in the
    ISR, and only then do the removed replicas leave (and delete their copy): never fewer
    copies than before. Once it completes, the diskless rule applies again."""
    m = topic.migration
    return topic.diskless and m is not None and m.direction == TO_DISKLESS and p.reassigning


def holds_sealed_classic(topic: TopicImage, index: int) -> bool:
    """A partition of a topic migrated to diskless (or migrating back) whose sealed classic
    log below the diskless part still has records. Its replicas really can lack part of
    that log (a replica down when it was sealed has only what it had then), so its ISR stays
    classic: the replicas that hold the whole sealed log, which alone may lead it (followers
    copy the leader's log and truncate to it). A replica that comes back rejoins once it
    has fetched the log (AlterPartition from the leader). Without this, a returning replica
    short of the boundary, in a diskless ISR that is always the replica set, could lead the
    sealed log and make the others truncate acknowledged records. Once retention removed
    the sealed log's records (its size reported as 0), the diskless rule applies again."""
    m = topic.migration
    return m is not None and m.classic_seal_with_records(index) is not None


def keeps_classic_isr(topic: TopicImage, index: int, p: PartitionState) -> bool:
    """A diskless topic's partition whose ISR follows the classic rules (leaders add and
    remove replicas by AlterPartition, the controller elects from the ISR): a staged
    reassignment of a sealed classic log, or a sealed classic log with records."""
    return topic.diskless and (stages_classic(topic, p) or holds_sealed_classic(topic, index))


def change_to(
    topic_id: UUID, partition: int, old: PartitionState, new: PartitionState
) -> PartitionChange | None:
    """The record turning ``old`` into ``new`` (None if they are equal); fields that do not
    change are left out, ``leader`` in particular, so the leader epoch moves only with the
    leader."""
    changed = PartitionChange(
        topic_id,
        partition,
        leader=None if new.leader == old.leader else new.leader,
        isr=None if new.isr == old.isr else new.isr,
        replicas=None if new.replicas == old.replicas else new.replicas,
        adding_replicas=None if new.adding_replicas == old.adding_replicas else new.adding_replicas,
        removing_replicas=None
        if new.removing_replicas == old.removing_replicas
        else new.removing_replicas,
    )
    if changed == PartitionChange(topic_id, partition):
        return None
    return changed


def reelect(
    image: MetadataImage,
    alive: Set[int],
    returning: Set[int] = frozenset(),
    departed: Set[int] = frozenset(),
) -> list[PartitionChange]:
    """PartitionChange records bringing every partition of ``image`` in line with ``alive``
    (the brokers that will be alive once the caller's other records apply)."""
    out: list[PartitionChange] = []
    for topic, index, state in image.iter_partitions():
        change = change_to(
            topic.topic_id,
            index,
            state,
            desired_for(topic, index, state, alive, returning, departed),
        )
        if change is not None:
            out.append(change)
    return out


def alive_after(
    image: MetadataImage, fenced: Iterable[int] = (), unfenced: Iterable[int] = ()
) -> set[int]:
    return (image.alive_brokers() - set(fenced)) | set(unfenced)
