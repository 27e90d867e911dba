"""Produce to a classic partition: the checks Kafka makes before and after the append."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

from protocol.records import BatchHeader
from storage.catalog import Topic

from ..append import PartitionResult
from ..metrics import METRICS

if TYPE_CHECKING:
    from ..topics import TopicRegistry
    from .replica_manager import ReplicaManager


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
    if not batches:
        return PartitionResult(0, p.log.log_end_offset, -1, p.log.log_start_offset)
    if any(b.is_transactional for b in batches):
        # Transaction markers and the LSO are not kept in classic logs yet: refused rather
        # than served to read_committed consumers as if committed.
        return PartitionResult(int(ErrorCode.invalid_request))
    min_isr = topics.int_config(topic, "min.insync.replicas")
    try:
        result = p.append(records, batches, log_append_time, acks, min_isr, timeout_ms)
    except OSError:
        # The disk refused (full, I/O error): retriable for the client, as Kafka answers.
        return PartitionResult(int(ErrorCode.kafka_storage_error))
    if not isinstance(result, PartitionResult) or result.error == 0:
        METRICS.produced_bytes.inc(len(records))
    # Followers long-polling this partition have new data; so do consumers if the HW moved.
    manager.broker.watch.notify([(p.topic_id, p.index, p.log.log_end_offset)])
    return result
