"""The transaction coordinator: Kafka's TransactionCoordinator over the shared database.

Each request is one or two database calls (read the state, then change it); ending a
transaction also uploads one object of markers. Nothing is kept in memory, so any broker
may answer for any transactional id, and a broker that dies mid-way leaves a state that
the next request (or the timeout sweep) simply continues from.

The broker chosen by FindCoordinator (the group placement over live brokers) is the one
clients talk to and the one that aborts the id's timed-out transactions; requests that
reach another broker are served all the same, since the database arbitrates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from kio.schema.errors import ErrorCode

from broker.groups.placement import HasNodeId, coordinator_for
from common.background import cancel_and_wait
from storage.coordinator import BatchCoordinator
from storage.groups import CommittedOffset
from storage.outage import OutageLog
from storage.partition_key import PartitionKey
from storage.transactions import (
    COMPLETE_ABORT,
    COMPLETE_COMMIT,
    CONCURRENT_TRANSACTIONS,
    EMPTY,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_TXN_STATE,
    NONE,
    ONGOING,
    PRODUCER_FENCED,
    TransactionState,
)

log = logging.getLogger(__name__)

INVALID_TRANSACTION_TIMEOUT = int(ErrorCode.invalid_transaction_timeout)
INVALID_REQUEST = int(ErrorCode.invalid_request)
COORDINATOR_NOT_AVAILABLE = int(ErrorCode.coordinator_not_available)
# Rounds of "read the state, act" before answering CONCURRENT_TRANSACTIONS (retriable):
# each round lost a race with another request for the same id.
_ATTEMPTS = 5
_EXPIRED_PER_SWEEP = 100
_PENDING_PER_SWEEP = 100
# Pending markers are looked for at least this often (seconds): a takeover after the
# coordinator died should not wait for a long abort sweep interval.
_MARKERS_INTERVAL_MAX_S = 1.0


def now_ms() -> int:
    return int(time.time() * 1000)


class Markers(Protocol):
    """What ending a transaction needs: its markers written (the diskless ones with the
    outcome, the classic ones sent to their leaders), as ``txn_marker_writer.MarkerWriter``
    does."""

    async def end(
        self, state: TransactionState, commit: bool, bump_epoch: bool, timed_out: bool = False
    ) -> int: ...

    async def end_tv2(self, state: TransactionState, commit: bool) -> tuple[int, int, int]: ...

    def resend(self, state: TransactionState) -> None: ...

    async def stop(self) -> None: ...


class TransactionCoordinator:
    def __init__(
        self,
        coordinator: BatchCoordinator,
        markers: Markers,
        node_id: int,
        live_brokers: Callable[[], Sequence[HasNodeId]],
        max_timeout_ms: int,
        sweep_interval_ms: int,
        id_expiration_ms: int = 604_800_000,
    ) -> None:
        self._db = coordinator
        self._markers = markers
        self._node_id = node_id
        self._live = live_brokers
        self._max_timeout_ms = max_timeout_ms
        self._sweep_interval = sweep_interval_ms / 1000
        self._markers_interval = min(self._sweep_interval, _MARKERS_INTERVAL_MAX_S)
        self._id_expiration_ms = id_expiration_ms
        self._task: asyncio.Task[None] | None = None
        self._markers_task: asyncio.Task[None] | None = None
        # Set when a request met pending markers: resend them now, not at the next sweep.
        self._resend_now = asyncio.Event()

    async def start(self) -> None:
        self._task = asyncio.create_task(self._sweep_loop())
        self._markers_task = asyncio.create_task(self._markers_loop())

    async def stop(self) -> None:
        await cancel_and_wait([self._task, self._markers_task])
        self._task = self._markers_task = None
        await self._markers.stop()

    def owns(self, transactional_id: str) -> bool:
        chosen = coordinator_for(transactional_id, self._live())
        return chosen is None or chosen.node_id == self._node_id

    # ---------------------------------------------------------------- client requests

    async def init_producer_id(
        self, transactional_id: str, timeout_ms: int, producer_id: int, producer_epoch: int
    ) -> tuple[int, int, int]:
        """(error, producer id, epoch). An ongoing transaction of the id is aborted first,
        fencing its producer, as Kafka does for a restarted transactional producer."""
        if not 0 < timeout_ms <= self._max_timeout_ms:
            return INVALID_TRANSACTION_TIMEOUT, -1, -1
        for _ in range(_ATTEMPTS):
            result = await self._db.txn_init(
                transactional_id, timeout_ms, producer_id, producer_epoch, now_ms()
            )
            if result.error == CONCURRENT_TRANSACTIONS and result.pending is not None:
                error = await self._markers.end(result.pending, commit=False, bump_epoch=True)
                if error not in (NONE, CONCURRENT_TRANSACTIONS, PRODUCER_FENCED):
                    return error, -1, -1
                continue
            self._kick(result.error)
            return result.error, result.producer_id, result.producer_epoch
        return CONCURRENT_TRANSACTIONS, -1, -1

    async def add(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        partitions: Sequence[PartitionKey] = (),
        groups: Sequence[str] = (),
    ) -> int:
        if not transactional_id:
            return INVALID_REQUEST  # Kafka: an empty id is no transaction's (as InitProducerId)
        error = await self._db.txn_add(
            transactional_id, producer_id, producer_epoch, partitions, groups, now_ms()
        )
        self._kick(error)
        return error

    async def verify(
        self, transactional_id: str, producer_id: int, producer_epoch: int
    ) -> tuple[int, set[PartitionKey]]:
        """For AddPartitionsToTxn's verify_only (KIP-890): the error for the producer, and
        the partitions its ongoing transaction holds."""
        if not transactional_id:
            return INVALID_REQUEST, set()
        [state] = await self._db.txn_get([transactional_id])
        if state is None or state.producer_id != producer_id:
            return INVALID_PRODUCER_ID_MAPPING, set()
        if state.producer_epoch != producer_epoch:
            return PRODUCER_FENCED, set()
        return NONE, set(state.partitions) if state.state == ONGOING else set()

    async def commit_offsets(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        group_id: str,
        offsets: Sequence[CommittedOffset],
    ) -> int:
        return await self._db.txn_commit_offsets(
            transactional_id, producer_id, producer_epoch, group_id, offsets, now_ms()
        )

    async def end(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> int:
        """EndTxn: write the markers and record the outcome (one object, one commit)."""
        if not transactional_id:
            return INVALID_REQUEST
        for _ in range(_ATTEMPTS):
            [state] = await self._db.txn_get([transactional_id])
            if state is None or state.producer_id != producer_id:
                return INVALID_PRODUCER_ID_MAPPING
            if state.producer_epoch != producer_epoch:
                return PRODUCER_FENCED
            if state.state != ONGOING:
                outcome = COMPLETE_COMMIT if commit else COMPLETE_ABORT
                if state.markers_pending and state.state != outcome:
                    # Kafka's PrepareCommit/PrepareAbort: the other outcome is refused at
                    # once (the same one is retried until the markers are written).
                    return INVALID_TXN_STATE
                # The store answers retries (NONE) and wrong states without markers.
                state.partitions = []
            error = await self._markers.end(state, commit, bump_epoch=False)
            if error != CONCURRENT_TRANSACTIONS:
                return error
            if state.state != ONGOING:
                # Not a partition added meanwhile: the previous end's classic markers are
                # still pending; the client retries once they are written.
                self._kick(error)
                return error
        return CONCURRENT_TRANSACTIONS

    async def end_tv2(
        self, transactional_id: str, producer_id: int, producer_epoch: int, commit: bool
    ) -> tuple[int, int, int]:
        """EndTxn v5+ (KIP-890 part 2, transaction version 2): every end bumps the producer
        epoch (the markers carry the bumped one, so a late batch of the ended transaction
        is fenced everywhere), and the answer names the producer id and epoch to go on
        with; (error, -1, -1) on error.

        Kafka's rules for the epoch asked with (TransactionCoordinator.endTransaction,
        transaction version 2): Ongoing and Empty take only the stored epoch; a completed
        transaction takes the stored epoch (an abort then ends an empty transaction: the
        producer may have begun one the coordinator never saw, e.g. when its first batch
        was refused) or the one before (a retry: the same outcome is answered NONE with the
        stored epoch, the other INVALID_TXN_STATE); while its classic markers are pending
        (Kafka's Prepare*) only the retry is taken (the same outcome is
        CONCURRENT_TRANSACTIONS until they are written). Any other epoch is PRODUCER_FENCED.
        """
        if not transactional_id:
            return INVALID_REQUEST, -1, -1
        outcome = COMPLETE_COMMIT if commit else COMPLETE_ABORT
        for _ in range(_ATTEMPTS):
            [state] = await self._db.txn_get([transactional_id])
            if state is None or state.producer_id != producer_id:
                return INVALID_PRODUCER_ID_MAPPING, -1, -1
            retry = state.producer_epoch == producer_epoch + 1
            current = state.producer_epoch == producer_epoch
            if state.state in (ONGOING, EMPTY):
                valid = current
            elif state.markers_pending:
                valid = retry
            else:
                valid = retry or current
            if not valid:
                return PRODUCER_FENCED, -1, -1
            if state.markers_pending:
                if state.state != outcome:
                    return INVALID_TXN_STATE, -1, -1
                self._kick(CONCURRENT_TRANSACTIONS)
                return CONCURRENT_TRANSACTIONS, -1, -1
            if state.state != ONGOING:
                if retry:
                    if state.state == outcome:
                        return NONE, state.producer_id, state.producer_epoch
                    return INVALID_TXN_STATE, -1, -1
                if commit:
                    return INVALID_TXN_STATE, -1, -1
                state.partitions = []  # an empty transaction's abort: no markers
            # The store asks the same of the epoch (the state may have moved meanwhile).
            error, pid, epoch = await self._markers.end_tv2(state, commit)
            if error != CONCURRENT_TRANSACTIONS:
                return (error, pid, epoch) if error == NONE else (error, -1, -1)
            if state.state != ONGOING:
                self._kick(error)
                return error, -1, -1
        return CONCURRENT_TRANSACTIONS, -1, -1

    async def get(self, transactional_ids: Sequence[str]) -> list[TransactionState | None]:
        return await self._db.txn_get(transactional_ids)

    async def list(
        self, states: Sequence[str], producer_ids: Sequence[int], min_duration_ms: int
    ) -> list[TransactionState]:
        return await self._db.txn_list(states, producer_ids, min_duration_ms, now_ms())

    # ---------------------------------------------------------------- timeouts

    async def abort_expired(self) -> int:
        """Abort (and fence) the timed-out transactions this broker coordinates."""
        aborted = 0
        for state in await self._db.txn_expired(now_ms(), _EXPIRED_PER_SWEEP):
            if not self.owns(state.transactional_id):
                continue
            error = await self._markers.end(state, commit=False, bump_epoch=True, timed_out=True)
            if error == NONE:
                aborted += 1
                log.info(
                    "aborted transaction of %r (producer %d, epoch %d): no end after %d ms",
                    state.transactional_id,
                    state.producer_id,
                    state.producer_epoch,
                    state.timeout_ms,
                )
        return aborted

    def _kick(self, error: int) -> None:
        # CONCURRENT_TRANSACTIONS from the store may mean pending classic markers (or a race
        # with another request): a resend round is cheap when nothing is pending.
        if error == CONCURRENT_TRANSACTIONS:
            self._resend_now.set()

    async def resend_pending_markers(self) -> int:
        """Send the pending classic markers of the ids this broker coordinates: left by a
        coordinator that died, or not acknowledged yet. Returns how many ids were started."""
        started = 0
        for state in await self._db.txn_pending_markers(_PENDING_PER_SWEEP):
            if self.owns(state.transactional_id):
                self._markers.resend(state)
                started += 1
        return started

    async def _markers_loop(self) -> None:
        # At once on start (this broker may have taken ids over while it was down), then
        # at each sweep interval or when a request met pending markers. Ownership moves
        # with the live brokers, so a takeover is seen by the next round.
        outage = OutageLog("resending pending transaction markers", log)
        while True:
            with outage:
                await self.resend_pending_markers()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(
                    self._resend_now.wait(),
                    self._markers_interval * random.uniform(0.5, 1.5),
                )
            self._resend_now.clear()

    async def forget_idle_ids(self) -> int:
        """``transactional.id.expiration.ms``: ids without a transaction for that long go
        (any broker may do it: deleting is idempotent)."""
        gone = await self._db.txn_forget_idle(now_ms() - self._id_expiration_ms, 1000)
        if gone:
            log.info("forgot %d idle transactional ids, e.g. %r", len(gone), gone[0])
        return len(gone)

    async def _sweep_loop(self) -> None:
        outage = OutageLog("aborting timed-out transactions", log)
        while True:
            # Jitter spreads the sweeps of brokers sharing one database.
            await asyncio.sleep(self._sweep_interval * random.uniform(0.5, 1.5))
            with outage:
                await self.abort_expired()
                await self.forget_idle_ids()
