"""AlterPartition: a classic partition's leader asks to change its ISR (a follower caught
up, or fell behind for ``replica.lag.time.max.ms``). The ISR half of ``controller.logic``.

The checks and codes are KRaft's, in its order: the broker's epoch (STALE_BROKER_EPOCH for
the whole request), the topic and partition (UNKNOWN_TOPIC_ID / UNKNOWN_TOPIC_OR_PARTITION),
the sender leads the partition (INVALID_REQUEST), its leader epoch (FENCED_LEADER_EPOCH if
older, NOT_LEADER_OR_FOLLOWER if newer than the controller's), the partition epoch it saw
(INVALID_UPDATE_VERSION: it decided on stale state and must look again), the new ISR names
only replicas and keeps the leader (INVALID_REQUEST) and every member is alive
(INELIGIBLE_REPLICA). Each accepted change bumps the partition epoch; one that completes a
reassignment (``controller.classic_election``) may also move the leadership.

Diskless partitions are refused: their ISR follows broker liveness, nothing to report;
except those of a topic migrated to diskless whose sealed classic log still has records, or
is being copied to added replicas (``election.keeps_classic_isr``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from kio.schema.errors import ErrorCode

from .classic_election import classic_desired_state
from .election import change_to, keeps_classic_isr, unclean_allowed
from .image import MetadataImage
from .records import Record
from .requests import AlterPartitionResult, IsrChange, IsrChangeResult, Outcome

OK = ErrorCode.none


class IsrAdmin:
    """Mixed into ``ControllerLogic``."""

    def alter_partition(
        self, image: MetadataImage, broker_id: int, broker_epoch: int, changes: Sequence[IsrChange]
    ) -> Outcome[AlterPartitionResult]:
        broker = image.brokers.get(broker_id)
        if broker is None or broker.broker_epoch != broker_epoch:
            return Outcome([], AlterPartitionResult(ErrorCode.stale_broker_epoch))
        alive = image.alive_brokers()
        records: list[Record] = []
        results: list[IsrChangeResult] = []
        for c in changes:

            def fail(code: ErrorCode, message: str, c: IsrChange = c) -> None:
                results.append(IsrChangeResult(c.topic_id, c.partition, code, message))

            topic = image.topic_by_id(c.topic_id)
            if topic is None:
                fail(ErrorCode.unknown_topic_id, f"Topic {c.topic_id} does not exist.")
                continue
            p = topic.partitions.get(c.partition)
            if p is None:
                fail(
                    ErrorCode.unknown_topic_or_partition,
                    f"Partition {topic.name}-{c.partition} does not exist.",
                )
                continue
            if topic.diskless and not keeps_classic_isr(topic, c.partition, p):
                fail(
                    ErrorCode.invalid_request,
                    f"{topic.name} is diskless: its ISR follows broker liveness.",
                )
                continue
            if p.leader != broker_id:
                fail(
                    ErrorCode.invalid_request,
                    f"Broker {broker_id} is not the leader of {topic.name}-{c.partition} "
                    f"(leader {p.leader}).",
                )
                continue
            if c.leader_epoch < p.leader_epoch:
                fail(
                    ErrorCode.fenced_leader_epoch,
                    f"Leader epoch {c.leader_epoch} is older than {p.leader_epoch}.",
                )
                continue
            if c.leader_epoch > p.leader_epoch:
                fail(
                    ErrorCode.not_leader_or_follower,
                    f"Leader epoch {c.leader_epoch} is newer than the controller's "
                    f"{p.leader_epoch}.",
                )
                continue
            if c.partition_epoch != p.partition_epoch:
                fail(
                    ErrorCode.invalid_update_version,
                    f"Partition epoch {c.partition_epoch} is not the current {p.partition_epoch}.",
                )
                continue
            new_isr = tuple(c.new_isr)
            if (
                not new_isr
                or len(set(new_isr)) != len(new_isr)
                or not set(new_isr) <= set(p.replicas)
                or broker_id not in new_isr
            ):
                fail(
                    ErrorCode.invalid_request,
                    f"ISR {list(new_isr)} must be distinct replicas of {list(p.replicas)} "
                    "including the leader.",
                )
                continue
            ineligible = [r for r in new_isr if r not in alive]
            if ineligible:
                fail(
                    ErrorCode.ineligible_replica,
                    f"Replicas {ineligible} are fenced or shutting down and cannot join the ISR.",
                )
                continue
            # Replica order, so equal sets give equal records.
            ordered = tuple(r for r in p.replicas if r in new_isr)
            unclean = unclean_allowed(topic.configs)
            target = classic_desired_state(replace(p, isr=ordered), alive, unclean)
            change = change_to(c.topic_id, c.partition, p, target)
            partition_epoch, leader_epoch = p.partition_epoch, p.leader_epoch
            if change is not None:
                records.append(change)
                partition_epoch += 1
                if change.leader is not None:
                    leader_epoch += 1
            results.append(
                IsrChangeResult(
                    c.topic_id,
                    c.partition,
                    OK,
                    None,
                    target.leader,
                    leader_epoch,
                    target.isr,
                    partition_epoch,
                )
            )
        return Outcome(records, AlterPartitionResult(OK, results))
