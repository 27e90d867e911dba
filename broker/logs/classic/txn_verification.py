"""KIP-890 part 1 for classic partitions: the first transactional batch of a producer's
transaction in a partition is checked against the transaction coordinator before it is
appended (``ClassicLog.begin_verification`` says when; the produce handler asks here)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol
from uuid import UUID

from kio.schema.errors import ErrorCode

from protocol.records import BatchHeader
from storage.partition_key import PartitionKey


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
