"""Ending a transaction: its markers as one object, then one coordinator call.

The markers (one control batch per partition of the transaction) are uploaded as one
object, like a produce flush; ``txn_complete`` then appends them, closes the partitions'
open transactions, moves committed offsets into place and records the outcome, all in one
database transaction. If that call refuses (the state moved on) or fails, the object is
deleted again; if its outcome is unknown, the object stays and the orphan sweep decides.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING
from uuid import UUID

from kio.schema.errors import ErrorCode

from protocol.control_batch import marker_batch
from storage.block_cache import BlockCache
from storage.coordinator import BatchCoordinator, CoordinatorUnavailable
from storage.object_store import ObjectStore, ObjectStoreError, new_data_key
from storage.transactions import Marker, TransactionState

from ..append import CommitListener

if TYPE_CHECKING:
    from ..classic.txn_markers import ClassicMarkerSender

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
    ) -> None:
        self._store = store
        self._coordinator = coordinator
        self._cache = cache
        self._node_id = node_id
        self._on_commit = on_commit
        # Classic partitions' markers go to their leaders (WriteTxnMarkers) once the outcome
        # is decided; None: a broker without classic topics.
        self.classic: ClassicMarkerSender | None = None

    async def end(self, state: TransactionState, commit: bool, bump_epoch: bool) -> int:
        """End ``state``'s ongoing transaction; returns the Kafka error code."""
        now_ms = int(time.time() * 1000)
        # A coordinator abort fences the producer: its markers carry the bumped epoch.
        epoch = state.producer_epoch + 1 if bump_epoch else state.producer_epoch
        chunks: list[bytes] = []
        markers: list[Marker] = []
        position = 0
        for key in state.partitions:
            batch = marker_batch(state.producer_id, epoch, commit, now_ms)
            chunks.append(batch)
            markers.append(Marker(key.topic_id, key.partition, position, len(batch), now_ms))
            position += len(batch)
        object_key = new_data_key() if markers else ""
        if markers:
            try:
                await self._store.put(object_key, chunks)
            except ObjectStoreError as exc:
                log.warning("uploading markers of %s failed: %s", state.transactional_id, exc)
                return COORDINATOR_NOT_AVAILABLE
        try:
            result = await self._coordinator.txn_complete(
                state.transactional_id,
                state.producer_id,
                state.producer_epoch,
                commit,
                bump_epoch,
                object_key,
                position,
                self._node_id,
                markers,
                now_ms,
            )
        except CoordinatorUnavailable as exc:
            log.warning("ending transaction %s failed: %s", state.transactional_id, exc)
            if markers and not exc.outcome_unknown:
                await self._discard(object_key)
            return COORDINATOR_NOT_AVAILABLE
        classic = [k for k in state.partitions if self.classic and self.classic.is_classic(k)]
        if result.error == 0 and classic and self.classic is not None:
            # The outcome is decided (and the diskless partitions marked): the classic
            # partitions' leaders append theirs. EndTxn answers once they are replicated
            # (or after a deadline, the rest following in the background).
            await self.classic.write(classic, state.producer_id, epoch, commit)
        if not result.registered:
            if markers:
                await self._discard(object_key)
            return result.error
        self._cache.put_object(object_key, chunks)
        self._notify(markers, result.offsets)
        return result.error

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
