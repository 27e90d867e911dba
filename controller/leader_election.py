"""ElectLeaders (``kafka-leader-election.sh``) and the automatic preferred-leader rebalance
(``auto.leader.rebalance.enable``): the leader-moving half of ``controller.logic``.

Leadership otherwise moves only when it must (``controller.election``): a leader that died
is replaced and, for classic partitions, a restarted broker comes back as a follower. Left
alone, a rolling restart piles every leadership onto the broker restarted first. Kafka's
answer, kept here: an operator can elect the preferred (first) replica, and the controller
does it by itself for brokers whose share of lost preferred leaderships passes
``leader.imbalance.per.broker.percentage``.

- Preferred election: the first replica of the assignment must be alive and in the ISR
  (a classic replica out of the ISR may lack acknowledged records); it is already the
  leader: ELECTION_NOT_NEEDED; otherwise PREFERRED_LEADER_NOT_AVAILABLE.
- Unclean election: only for a partition without a leader. An alive ISR member is taken
  first (a clean choice); otherwise the first alive replica, with an ISR of itself, which
  may lose acknowledged records: that is what the operator asked for. Nobody alive:
  ELIGIBLE_LEADERS_NOT_AVAILABLE.
- Asked for every partition (``partitions`` None), the answer leaves out the partitions
  that needed nothing, as Kafka does.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import replace

from kio.schema.errors import ErrorCode

from .classic_election import classic_desired_state
from .election import change_to
from .image import MetadataImage, PartitionState, TopicImage
from .records import NO_LEADER, PartitionChange
from .requests import ElectionResult, LeaderElection, Outcome

PREFERRED, UNCLEAN = 0, 1
OK = ErrorCode.none
NOT_NEEDED = ErrorCode.election_not_needed


def _preferred(p: PartitionState, alive: set[int]) -> tuple[PartitionState | None, ErrorCode]:
    preferred = p.target_replicas[0] if p.target_replicas else NO_LEADER
    if p.leader == preferred:
        return None, NOT_NEEDED
    if preferred not in alive or preferred not in p.isr:
        return None, ErrorCode.preferred_leader_not_available
    return replace(p, leader=preferred), OK


def _unclean(p: PartitionState, alive: set[int]) -> tuple[PartitionState | None, ErrorCode]:
    if p.leader != NO_LEADER:
        return None, NOT_NEEDED
    clean = [r for r in p.replicas if r in p.isr and r in alive]
    if clean:
        return replace(p, leader=clean[0]), OK
    candidates = [r for r in p.target_replicas if r in alive]
    if not candidates:
        return None, ErrorCode.eligible_leaders_not_available
    return replace(p, leader=candidates[0], isr=(candidates[0],)), OK


_MESSAGES = {
    NOT_NEEDED: "Leader election not needed for {tp}.",
    ErrorCode.preferred_leader_not_available: (
        "Failed to elect the preferred leader of {tp}: it is not alive or not in the ISR."
    ),
    ErrorCode.eligible_leaders_not_available: (
        "Failed to elect a leader for {tp}: no replica is alive."
    ),
}


def unclean_leaders(topic: TopicImage, alive: set[int]) -> list[PartitionChange]:
    """Leaders for ``topic``'s leaderless classic partitions once it allows unclean
    election: the broker events that elect leaders may all have passed before
    ``unclean.leader.election.enable`` was turned on (Kafka's controller elects then too)."""
    if topic.diskless:
        return []
    out = []
    for index, p in topic.partitions.items():
        if p.leader == NO_LEADER:
            change = change_to(topic.topic_id, index, p, classic_desired_state(p, alive, True))
            if change is not None:
                out.append(change)
    return out


class LeaderElectionAdmin:
    """Mixed into ``ControllerLogic``."""

    def elect_leaders(
        self, image: MetadataImage, request: LeaderElection
    ) -> Outcome[list[ElectionResult]]:
        if request.election_type not in (PREFERRED, UNCLEAN):
            results = [
                ElectionResult(
                    t,
                    i,
                    ErrorCode.invalid_request,
                    f"Unknown election type {request.election_type}",
                )
                for t, i in request.partitions or ()
            ]
            return Outcome([], results)
        elect = _preferred if request.election_type == PREFERRED else _unclean
        alive = image.alive_brokers()
        wanted: Iterable[tuple[str, int]]
        every = request.partitions is None
        if request.partitions is None:
            wanted = [(t.name, i) for t, i, _ in image.iter_partitions()]
        else:
            wanted = list(dict.fromkeys(request.partitions))  # a repeat is answered once
        records: list[PartitionChange] = []
        results: list[ElectionResult] = []
        for name, index in wanted:
            topic = image.topic(name)
            p = topic.partitions.get(index) if topic is not None else None
            if topic is None or p is None:
                message = f"Partition {name}-{index} does not exist."
                results.append(
                    ElectionResult(name, index, ErrorCode.unknown_topic_or_partition, message)
                )
                continue
            if p.reassigning:
                # The target's first replica is not the preferred one until it completes.
                message = f"{name}-{index} is being reassigned."
                results.append(ElectionResult(name, index, ErrorCode.invalid_request, message))
                continue
            new, code = elect(p, alive)
            if new is not None and (change := change_to(topic.topic_id, index, p, new)):
                records.append(change)
            if every and code == NOT_NEEDED:
                continue
            message = _MESSAGES[code].format(tp=f"{name}-{index}") if code != OK else None
            results.append(ElectionResult(name, index, code, message))
        return Outcome(list(records), results)

    def rebalance_leaders(self, image: MetadataImage, percentage: int) -> list[PartitionChange]:
        """Kafka's auto leader rebalance: for every broker whose partitions (as preferred
        replica) are led elsewhere in more than ``percentage`` % of cases, those partitions
        get their preferred leader back where it is alive and in the ISR."""
        alive = image.alive_brokers()
        preferred_of: Counter[int] = Counter()
        misplaced: dict[int, list[tuple[TopicImage, int, PartitionState]]] = {}
        for topic, index, p in image.iter_partitions():
            if p.reassigning or not p.replicas:
                continue
            preferred = p.replicas[0]
            preferred_of[preferred] += 1
            if p.leader != preferred:
                misplaced.setdefault(preferred, []).append((topic, index, p))
        out: list[PartitionChange] = []
        for broker, partitions in sorted(misplaced.items()):
            if broker not in alive or len(partitions) * 100 <= percentage * preferred_of[broker]:
                continue
            for topic, index, p in partitions:
                new, code = _preferred(p, alive)
                if new is not None and code == OK:
                    change = change_to(topic.topic_id, index, p, new)
                    if change is not None:
                        out.append(change)
        return out
