"""Ending a transaction: one coordinator call, and no upload.

The markers (one control batch per diskless partition of the transaction, the same bytes
in each) are a *marker object* (storage/objects/marker_objects.py): a file whose key
describes the batch, which readers make from the key, so nothing is uploaded (a PUT per
transaction end was ~10 PUTs a second per exactly-once Kafka Streams producer).
``txn_complete`` appends them, closes the partitions' open transactions, moves committed
offsets into place and records the outcome, all in one database transaction: a crash
leaves either nothing or everything, and no object to clean up.

``upload`` (``diskless.txn.marker.objects=true``) uploads the markers as one real object
first, as brokers before marker objects did (for a rolling upgrade from such a version:
they cannot read marker objects). If the call then refuses (the state moved on) or fails,
that object is deleted again; if its outcome is unknown, it stays and the orphan sweep
decides.

Classic partitions' markers go to their leaders after that call, which records them as
pending (Kafka's PrepareCommit/PrepareAbort); they stop being pending once the leaders
acknowledge. Pending markers left by a broker that died are resent by the id's coordinator
(``resend``, from TransactionCoordinator's sweep).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.logs.classic.producer_state import marker_number
from broker.logs.diskless.diskless_append import CommitListener
from common.background import cancel_and_wait
from protocol.control_batch import marker_batch
from storage.coordinator import BatchCoordinator, CoordinatorUnavailable
from storage.objects import ObjectStore, ObjectStoreError, new_data_key
from storage.objects.block_cache import BlockCache
from storage.objects.marker_objects import marker_key
from storage.outage import is_outage
from storage.partition_key import PartitionKey
from storage.transactions import COMPLETE_COMMIT, CompleteRequest, Marker, TransactionState

if TYPE_CHECKING:
    from broker.logs.classic.classic_markers import ClassicMarkerSender

log = logging.getLogger(__name__)

COORDINATOR_NOT_AVAILABLE = int(ErrorCode.coordinator_not_available)


class MarkerWriter:
    def __init__(
        self,
        store: ObjectStore,
        coordinator: BatchCoordinator,
        cache: BlockCache,
        node_id: int,
        on_commit: CommitListener,
        upload: bool = False,
    ) -> None:
        self._store = store
        # True: the markers go to the store as a real object (one PUT) before the call.
        self._upload = upload
        self._coordinator = coordinator
        self._cache = cache
        self._node_id = node_id
        self._on_commit = on_commit
        # Classic partitions' markers go to their leaders (WriteTxnMarkers) once the outcome
        # is decided; None: a broker without classic topics.
        self.classic: ClassicMarkerSender | None = None
        # Ids whose classic markers this broker is sending now, and the resends' tasks.
        self._sending: set[str] = set()
        self._tasks: set[asyncio.Task[None]] = set()

    async def end(
        self, state: TransactionState, commit: bool, bump_epoch: bool, timed_out: bool = False
    ) -> int:
        """End ``state``'s ongoing transaction; returns the Kafka error code. ``timed_out``:
        the timeout sweep's abort, of that transaction only (the one started at
        ``state.started_ms``), not of one the producer began since."""
        error, _, _ = await self._end(state, commit, bump_epoch, timed_out, tv2=False)
        return error

    async def end_tv2(self, state: TransactionState, commit: bool) -> tuple[int, int, int]:
        """The producer's own end under KIP-890 part 2 (EndTxn v5+): the epoch is bumped
        (see CompleteRequest.tv2). (error, producer id, epoch to go on with; -1 on error)."""
        return await self._end(state, commit, bump_epoch=True, timed_out=False, tv2=True)

    async def _end(
        self, state: TransactionState, commit: bool, bump_epoch: bool, timed_out: bool, tv2: bool
    ) -> tuple[int, int, int]:
        now_ms = int(time.time() * 1000)
        # A coordinator abort fences the producer, and a TV2 end starts the producer's next
        # epoch: either way its markers carry the bumped epoch.
        epoch = state.producer_epoch + 1 if bump_epoch else state.producer_epoch
        # Classic partitions' markers are sent to their leaders after the outcome is
        # recorded; recording them as pending in the same call lets another coordinator
        # finish if this broker dies. Only the diskless ones get a marker here: a classic
        # partition's log is its leader's, and a marker in its diskless log would be a
        # log of markers only, or land past the boundary of a partition migrated to
        # classic (the batch coordinator refuses that: a sealed log takes nothing more).
        classic: list[PartitionKey] = []
        chunks: list[bytes] = []
        markers: list[Marker] = []
        position = 0
        batch = marker_batch(state.producer_id, epoch, commit, now_ms)
        for key in state.partitions:
            if self.classic is not None and self.classic.goes_to_leader(key):
                classic.append(key)
                continue
            chunks.append(batch)
            markers.append(Marker(key.topic_id, key.partition, position, len(batch), now_ms))
            position += len(batch)
        uploaded = bool(markers) and self._upload
        if not markers:
            object_key = ""
        elif not uploaded:
            # Every marker is the same batch: readers make them from the key.
            object_key = marker_key(state.producer_id, epoch, commit, now_ms, len(markers))
        else:
            object_key = new_data_key()
            try:
                await self._store.put(object_key, chunks)
            except ObjectStoreError as exc:
                log.warning("uploading markers of %s failed: %s", state.transactional_id, exc)
                return COORDINATOR_NOT_AVAILABLE, -1, -1
        try:
            result = await self._coordinator.txn_complete(
                CompleteRequest(
                    transactional_id=state.transactional_id,
                    producer_id=state.producer_id,
                    producer_epoch=state.producer_epoch,
                    commit=commit,
                    bump_epoch=bump_epoch,
                    object_key=object_key,
                    object_size=position,
                    uploader_broker_id=self._node_id,
                    markers=markers,
                    now_ms=now_ms,
                    pending=classic,
                    started_ms=state.started_ms if timed_out else -1,
                    tv2=tv2,
                )
            )
        except CoordinatorUnavailable as exc:
            log.warning("ending transaction %s failed: %s", state.transactional_id, exc)
            if uploaded and not exc.outcome_unknown:
                await self._discard(object_key)
            return COORDINATOR_NOT_AVAILABLE, -1, -1
        if result.error == 0 and classic:
            # The outcome is decided (and the diskless partitions marked): the classic
            # partitions' leaders append theirs. EndTxn answers once they are replicated
            # (or after a deadline, the rest following in the background).
            await self.send_classic(
                state.transactional_id,
                classic,
                state.producer_id,
                epoch,
                commit,
                marker_number(result.completions),
            )
        answer = (result.error, result.producer_id, result.producer_epoch)
        if not result.registered:
            if uploaded:
                await self._discard(object_key)
            return answer
        if uploaded:
            self._cache.put_object(object_key, chunks)
        self._notify(markers, result.offsets)
        return answer

    async def send_classic(
        self,
        transactional_id: str,
        partitions: Sequence[PartitionKey],
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        number: int,
        deadline_s: float | None = None,
        listed: TransactionState | None = None,
    ) -> None:
        """Send pending classic markers to their leaders; once all are acknowledged they
        stop being pending in the database. An id already being sent by this broker is
        left to that sender (a sweep must not duplicate it).

        A marker sent after its transaction's markers stopped being pending is not a
        harmless repeat: the producer may have begun its next transaction (same epoch)
        in that partition, and a late COMMIT would commit those records, a late ABORT
        abort them. So the id stays "being sent" until the database has recorded the
        markers written, and a resend (``listed``: the pending state a sweep read) first
        checks, while holding the id, that those markers are still pending."""
        if self.classic is None or transactional_id in self._sending:
            return
        self._sending.add(transactional_id)
        if listed is not None:
            try:
                [current] = await self._coordinator.txn_get([transactional_id])
            except BaseException:
                self._sending.discard(transactional_id)
                raise
            if not _still_pending(current, listed):
                self._sending.discard(transactional_id)
                return

        async def written() -> None:
            try:
                await self._coordinator.txn_markers_written(
                    transactional_id, producer_id, producer_epoch, partitions
                )
            except CoordinatorUnavailable as exc:
                # Still pending in the database: the coordinator's sweep sends them again
                # (before the producer can begin another transaction: it is refused
                # CONCURRENT_TRANSACTIONS while they are pending).
                log.warning("recording the markers of %s failed: %s", transactional_id, exc)
            finally:
                self._sending.discard(transactional_id)

        try:
            await self.classic.write(
                partitions,
                producer_id,
                producer_epoch,
                commit,
                number,
                deadline_s,
                on_written=written,
            )
        except BaseException:
            self._sending.discard(transactional_id)
            raise

    def resend(self, state: TransactionState) -> None:
        """In the background: the pending classic markers of ``state`` (as
        ``txn_pending_markers`` gives it), e.g. left by a coordinator that died."""
        if self.classic is None or state.transactional_id in self._sending:
            return
        log.info(
            "sending the %s markers of %r (producer %d, epoch %d) to %d classic partitions",
            "commit" if state.state == COMPLETE_COMMIT else "abort",
            state.transactional_id,
            state.producer_id,
            state.producer_epoch,
            len(state.partitions),
        )
        task = asyncio.create_task(
            self.send_classic(
                state.transactional_id,
                state.partitions,
                state.producer_id,
                state.producer_epoch,
                state.state == COMPLETE_COMMIT,
                marker_number(state.completions),
                deadline_s=0,
                listed=state,
            )
        )
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        task.add_done_callback(_resent)

    async def stop(self) -> None:
        await cancel_and_wait(list(self._tasks))

    def _notify(self, markers: Sequence[Marker], offsets: Sequence[int]) -> None:
        advanced: list[tuple[UUID, int, int]] = [
            (m.topic_id, m.partition, offset + 1)  # type: ignore[misc]
            for m, offset in zip(markers, offsets, strict=True)
            if offset >= 0
        ]
        if advanced:
            self._on_commit(advanced)

    async def _discard(self, object_key: str) -> None:
        try:
            await self._store.delete_many([object_key])
        except ObjectStoreError:
            log.warning("could not delete unused marker object %s; orphaned", object_key)


def _still_pending(current: TransactionState | None, listed: TransactionState) -> bool:
    """Whether the markers a sweep listed are still the id's pending ones."""
    return (
        current is not None
        and current.markers_pending
        and current.producer_id == listed.producer_id
        and current.producer_epoch == listed.producer_epoch
        and current.state == listed.state
    )


def _resent(task: asyncio.Task[None]) -> None:
    """A background resend's end. Its markers stay pending in the database when it failed,
    and the coordinator's sweep sends them again: an unreachable database (a restart) is
    one line, a bug its traceback; never an unretrieved task exception."""
    if task.cancelled() or (exc := task.exception()) is None:
        return
    if is_outage(exc):
        log.info("resending transaction markers: %s; the sweep sends them again", exc)
    else:
        log.error("resending transaction markers failed", exc_info=exc)
