"""Produce to a classic partition: the checks Kafka makes before and after the append."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.logs.partition_log import PartitionResult
from broker.server.metrics import METRICS
from protocol.records import BatchHeader
from storage.catalog import Topic
from storage.partition_key import PartitionKey

if TYPE_CHECKING:
    from broker.logs.classic.replica_manager import ReplicaManager
    from broker.metadata.topics import TopicRegistry


def needs_verification(
    manager: ReplicaManager, topic: Topic, partition: int, batches: list[BatchHeader]
) -> bool:
    """KIP-890 part 1: the first transactional batch of a producer's transaction in this
    partition is checked against the transaction coordinator before it is appended (later
    ones extend a transaction the partition already has open). Headers only."""
    if not batches or not batches[0].is_transactional:
        return False
    p, _error = manager.leader_partition(topic.topic_id, partition)
    return p is not None and batches[0].producer_id not in p.txns.ongoing


@dataclass(frozen=True, slots=True)
class Verification:
    """What the transaction coordinator said of a producer's ongoing transaction: an
    error for every partition, or the partitions it includes."""

    error: int
    partitions: frozenset[PartitionKey] = frozenset()

    def refusal(self, topic_id: UUID, partition: int) -> int:
        """0 when the producer's batch may be appended to this partition, else the code
        the diskless path answers: INVALID_TXN_STATE (the partition is not in the
        transaction, or the transaction ended: a late batch cannot open a hanging one),
        INVALID_PRODUCER_EPOCH (fenced), REQUEST_TIMED_OUT (coordinator unreachable)."""
        if self.error:
            return self.error
        if PartitionKey(topic_id, partition) not in self.partitions:
            return int(ErrorCode.invalid_txn_state)
        return 0


class TransactionVerifier(Protocol):
    """The transaction coordinator (broker/transactions), as KIP-890 verification asks it."""

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[int, set[PartitionKey]]: ...


async def verify_transaction(
    transactions: TransactionVerifier, transactional_id: str | None, first: BatchHeader
) -> Verification:
    """Ask the coordinator (one round trip) which partitions the producer's ongoing
    transaction, at this epoch, includes.

    The produce handler awaits this *before* it returns, so the connection's next request
    waits: a producer's batches are appended in the order its requests arrived, as on
    Kafka. (Verifying in the background let a later request of the same producer be
    appended first, and the client died on OUT_OF_ORDER_SEQUENCE_NUMBER.)"""
    if transactional_id is None:
        return Verification(int(ErrorCode.invalid_txn_state))
    try:
        error, partitions = await transactions.verify(
            transactional_id, first.producer_id, first.producer_epoch
        )
    except Exception:
        # The coordinator database is unreachable: retriable, nothing was written.
        return Verification(int(ErrorCode.request_timed_out))
    if error == int(ErrorCode.producer_fenced):
        return Verification(int(ErrorCode.invalid_producer_epoch))
    if error:
        return Verification(int(ErrorCode.invalid_txn_state))
    return Verification(0, frozenset(partitions))


def classic_append(
    manager: ReplicaManager,
    topics: TopicRegistry,
    topic: Topic,
    partition: int,
    records: memoryview,
    batches: list[BatchHeader],
    log_append_time: bool,
    acks: int,
    timeout_ms: int,
) -> PartitionResult | asyncio.Future[PartitionResult]:
    """The result now (acks 0/1, errors, acks=all already replicated) or a future the
    high watermark completes. Only the leader appends (NOT_LEADER_OR_FOLLOWER elsewhere)."""
    p, error = manager.leader_partition(topic.topic_id, partition)
    if p is None:
        return PartitionResult(error)
    if p.sealed:
        # Being migrated to diskless (broker/logs/migration): retriable, nothing written; the
        # producer's retry goes to the diskless log once the seal is recorded.
        return PartitionResult(int(ErrorCode.not_leader_or_follower))
    if not batches:
        return PartitionResult(0, p.log.log_end_offset, -1, p.log_start_offset)
    min_isr = topics.int_config(topic, "min.insync.replicas")
    try:
        result = p.append(records, batches, log_append_time, acks, min_isr, timeout_ms)
    except OSError:
        # The disk refused (full, I/O error): retriable for the client, as Kafka answers.
        return PartitionResult(int(ErrorCode.kafka_storage_error))
    if not isinstance(result, PartitionResult) or result.error == 0:
        METRICS.produced_bytes.inc(len(records))
        METRICS.topics.produced(topic.topic_id, sum(b.record_count for b in batches), len(records))
    # Followers long-polling this partition have new data; so do consumers if the HW moved.
    manager.broker.watch.notify([(p.topic_id, p.index, p.log.log_end_offset)])
    return result
