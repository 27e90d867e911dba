"""KIP-890 part 2: a Produce v12+ request of a transactional producer adds its partitions to
the producer's transaction itself (the client sends no AddPartitionsToTxn for them), as
Kafka's partition leaders do through AddPartitionsToTxnManager (``addPartition``).

One coordinator call per request adds every partition that needs it:

- a diskless partition unless this broker already added it to the same transaction: under
  transaction version 2 every transaction has its own producer epoch (EndTxn v5 bumps it),
  so (transactional id, producer id, epoch) names one transaction and a partition added
  to it stays in it until it ends. Skipping is only a saving: the batch coordinator still
  checks the batch against the transaction when it commits it;
- a classic partition whose leader sees no open transaction of the producer (KIP-890 part
  1's verification: ``begin_verification``); the add's answer is that verification.

Each engine says which (``PartitionLog.needs_transaction_add``); this module keeps which
partitions this broker added to which transaction.

A refusal of the add is the partition's answer, as Kafka maps the coordinator's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from broker.logs.classic.txn_verification import Verification
from broker.logs.router import Purpose, RoutedView
from broker.security import access
from common.acl import AclOperation
from protocol.records import InvalidRecords, parse_batches
from storage.partition_key import PartitionKey

if TYPE_CHECKING:
    from broker.transactions.txn_coordinator import TransactionCoordinator


class ImplicitAddView(RoutedView, Protocol):
    """What the implicit add asks of the broker (the Produce handler's view extends it)."""

    @property
    def transactions(self) -> TransactionCoordinator: ...


TV2_PRODUCE_VERSION = 12

# (transactional id, producer id, epoch) -> the diskless partitions added by this broker.
_ADDED: dict[tuple[str, int, int], set[PartitionKey]] = {}
_ADDED_MAX = 10_000

_NONE = int(ErrorCode.none)
_PRODUCER_FENCED = int(ErrorCode.producer_fenced)
_INVALID_PRODUCER_EPOCH = int(ErrorCode.invalid_producer_epoch)
_INVALID_PRODUCER_ID_MAPPING = int(ErrorCode.invalid_producer_id_mapping)
_INVALID_TXN_STATE = int(ErrorCode.invalid_txn_state)
# What the producer retries: the coordinator is busy (the previous transaction's classic
# markers are still being written) or unreachable. Kafka answers these NOT_ENOUGH_REPLICAS
# on the produce path.
_RETRIABLE = {
    int(ErrorCode.concurrent_transactions),
    int(ErrorCode.coordinator_not_available),
    int(ErrorCode.not_coordinator),
    int(ErrorCode.coordinator_load_in_progress),
    int(ErrorCode.request_timed_out),
}


def produce_error(add_error: int) -> int:
    """The Produce answer for a partition whose implicit add the coordinator refused."""
    if add_error == _PRODUCER_FENCED:
        return _INVALID_PRODUCER_EPOCH
    if add_error in _RETRIABLE:
        return int(ErrorCode.not_enough_replicas)
    if add_error == _INVALID_PRODUCER_ID_MAPPING:
        return add_error
    return _INVALID_TXN_STATE  # not in the transaction: abortable for v11+ clients


async def add_partitions(
    broker: ImplicitAddView, ctx: Any, request: Any
) -> tuple[dict[PartitionKey, int], tuple[tuple[int, int], Verification] | None]:
    """Add the request's transactional partitions to the producer's transaction. Returns
    the produce error of each partition whose add was refused, and the verification the
    appends of partitions that verify (a classic leader's) use (None when nothing was added)."""
    transactional_id: str = request.transactional_id
    topics = broker.topics
    wanted: list[PartitionKey] = []
    producer: tuple[int, int] | None = None
    for topic_data in request.topic_data:
        topic = topics.get(topic_data.name)
        if topic is None or not access.topic(broker, ctx, AclOperation.WRITE, topic.name):
            continue  # refused by the produce loop
        max_bytes = topics.int_config(topic, "max.message.bytes")
        for part in topic_data.partition_data:
            if not 0 <= part.index < topic.partitions or not part.records:
                continue
            raw = part.records
            try:
                batches = parse_batches(
                    memoryview(raw if isinstance(raw, bytes) else bytes(raw)), max_bytes
                )
            except InvalidRecords:
                continue  # refused by the produce loop
            if not batches or not batches[0].is_transactional:
                continue
            first = batches[0]
            if producer is None:
                producer = (first.producer_id, first.producer_epoch)
            elif producer != (first.producer_id, first.producer_epoch):
                continue  # not this request's producer: its batch is checked on its own
            key = PartitionKey(topic.topic_id, part.index)
            log = broker.router.route(topic.topic_id, part.index, Purpose.APPEND)
            added = key in _ADDED.get((transactional_id, *producer), ())
            if log.needs_transaction_add(topic, part.index, batches, added):
                wanted.append(key)
    if producer is None or not wanted:
        return {}, None
    try:
        error = await broker.transactions.add(transactional_id, *producer, partitions=wanted)
    except Exception:
        error = int(ErrorCode.request_timed_out)  # the coordinator database is unreachable
    if error == _NONE:
        if len(_ADDED) >= _ADDED_MAX:
            _ADDED.clear()
        _ADDED.setdefault((transactional_id, *producer), set()).update(wanted)
        return {}, (producer, Verification(0, frozenset(wanted)))
    refused = produce_error(error)
    return {k: refused for k in wanted}, (producer, Verification(refused))
