"""Fetch from classic partitions: consumers up to the high watermark, followers up to the
log end (their fetch offset is their progress), KIP-392 preferred read replicas.

Used by ``broker.logs.classic.classic_log``: a classic partition's slot carries its replica
here, and the long poll reads it again each time a watch wakes (an append, a high watermark move).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.logs.classic.partition import FOLLOWER, LEADER, ClassicPartition
from broker.logs.fetch_slots import DENIED_REPLICA, FetchBudget, FetchSlot
from storage.catalog import Topic

if TYPE_CHECKING:
    from broker.logs.classic.replica_manager import ClassicHost, ReplicaManager


class ClassicSlot(FetchSlot):
    """A fetched partition the classic engine opened: the replica on this broker it reads
    (None when refused or redirected), the one the fetch started with even if the
    partition's replica is replaced while the fetch waits."""

    __slots__ = ("classic",)

    def __init__(self, topic_key: Any, partition: int) -> None:
        super().__init__(topic_key, partition, 0, -1)
        self.classic: ClassicPartition | None = None


# Consumers may fetch from a follower from Fetch v11 on (KIP-392), as Kafka allows.
FOLLOWER_FETCH_VERSION = 11


def classic_slot(
    manager: ReplicaManager,
    key: Any,
    topic: Topic,
    part: Any,
    replica_id: int,
    version: int,
    rack: str | None,
) -> ClassicSlot:
    slot = ClassicSlot(key, part.partition)
    p = manager.get(topic.topic_id, part.partition)
    if replica_id == DENIED_REPLICA:
        slot.error = int(ErrorCode.cluster_authorization_failed)
        return slot
    if p is None or manager.stopping:
        slot.error = int(ErrorCode.not_leader_or_follower)
        return slot
    if replica_id >= 0:
        if p.role != LEADER:
            slot.error = int(ErrorCode.not_leader_or_follower)
            return slot
    elif p.role == LEADER:
        if rack and version >= FOLLOWER_FETCH_VERSION:
            slot.preferred = preferred_read_replica(manager.broker, p, rack)
    elif not (p.role == FOLLOWER and version >= FOLLOWER_FETCH_VERSION):
        slot.error = int(ErrorCode.not_leader_or_follower)
        return slot
    elif p.leader >= 0 and _not_copied_yet(manager, p, int(part.fetch_offset)):
        # A replica added to a migrated partition, still fetching the sealed classic log:
        # the consumer reads it from the leader (KIP-392's redirect) rather than getting
        # OFFSET_OUT_OF_RANGE for an offset this copy does not have yet.
        slot.preferred = p.leader
        return slot
    slot.classic = p
    slot.offset = int(part.fetch_offset)
    slot.max_bytes = int(part.partition_max_bytes)
    slot.replica = replica_id
    return slot


def _not_copied_yet(manager: ReplicaManager, p: ClassicPartition, offset: int) -> bool:
    if offset < p.log.log_end_offset:
        return False
    boundary = manager.broker.router.sealed_boundary(p.topic_id, p.index)
    return boundary is not None and offset < boundary


def preferred_read_replica(broker: ClassicHost, p: ClassicPartition, rack: str) -> int:
    """KIP-392: an in-sync replica in the consumer's rack, when the leader is not in it
    (-1: stay on the leader). Spread over the candidates by partition."""
    racks = {b.node_id: b.rack for b in broker.endpoints()}
    if racks.get(p.me) == rack:
        return -1
    candidates = [r for r in p.isr if r != p.me and racks.get(r) == rack]
    if not candidates:
        return -1
    return candidates[p.index % len(candidates)]


def read_classic(
    broker: ClassicHost, slot: ClassicSlot, budget: FetchBudget, read_committed: bool = False
) -> int:
    """Read a classic slot (again) within what the answer has left; returns the bytes
    found. A follower's fetch offset is recorded even when nothing fits any more (Kafka
    updates every fetched partition's follower state)."""
    p = slot.classic
    assert p is not None
    if slot.replica < 0 and p.is_remote(slot.offset):
        return 0  # read from the remote segment (broker.logs.tiered.tiered_read)
    hw_before = p.high_watermark
    manager = broker.classic
    throttle = (
        slot.replica >= 0
        and manager is not None
        and p.role == LEADER
        and manager.throttles(p, slot.replica, as_leader=True)
    )
    if throttle and manager is not None and manager.leader_quota.exceeded():
        # Over leader.replication.throttled.rate: no records for this catching-up follower
        # now, though its position still counts (Kafka's leader throttle).
        error, data = p.read(slot.offset, 0, slot.replica, False, False)
        data = b""
    else:
        error, data = p.read(
            slot.offset,
            budget.room(slot.max_bytes),
            slot.replica,
            read_committed and slot.replica < 0,
            budget.min_one,
        )
        if throttle and manager is not None:
            manager.leader_quota.record(len(data))
    slot.error, slot.data = error, data
    budget.take(len(data))
    if slot.replica >= 0 and p.role == LEADER:
        if manager is not None:
            manager.check_isr(p)
        if p.high_watermark > hw_before:
            # Consumers and acks=all produces waiting on the high watermark.
            broker.watch.notify([(p.topic_id, p.index, p.high_watermark)])
    return len(data)


def classic_entry(slot: ClassicSlot, read_committed: bool = False) -> dict[str, Any]:
    p = slot.classic
    assert p is not None
    lso = p.last_stable_offset
    entry: dict[str, Any] = {
        "error_code": slot.error,
        "high_watermark": p.high_watermark,
        "last_stable_offset": lso,
        "log_start_offset": p.log_start_offset,
        "records": slot.data if slot.preferred < 0 else b"",
    }
    if read_committed and slot.replica < 0 and slot.data and not slot.error:
        # The aborted transactions overlapping what is returned (at most up to the LSO):
        # the consumer drops their records (Kafka's collectAbortedTransactions).
        entry["aborted_transactions"] = [
            {"producer_id": a.producer_id, "first_offset": a.first_offset}
            for a in p.txns.aborted_between(slot.offset, lso)
        ]
    return entry
