"""Follows the controllers' committed metadata log into a local MetadataImage.

A long poll (``GET /v1/metadata?after=<applied>&wait_ms=…``, any controller) returns the
entries committed after the last one applied here, or a snapshot when this broker is further
behind than the controller keeps entries. Entries are applied in order, each all or nothing
(``MetadataImage.apply_batch``), exactly as the controllers apply them, so this image equals
theirs at the same index.

After each answer, the changes that need storage work are handed to a ``FollowerListener``:
partitions that appeared need logs in the batch coordinator (idempotent: it also covers a
broker that crashed between creating a topic's logs and asking the controller for it), topics
that disappeared need their logs and committed group offsets deleted. Every broker does this
work for every change; all of it is idempotent, so the duplicates cost a little and a crash
of any one broker loses nothing. Work that failed (coordinator down) is retried with the
next answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import Counter
from collections.abc import Callable
from typing import Protocol
from uuid import UUID

from broker.metadata.controller_client import ControllerClient, ControllerRefused, MetadataChunk
from common.background import cancel_and_wait
from controller.image import ImageError, MetadataImage
from controller.records import DecodeError, PartitionChange, Record, decode_batch
from storage.outage import OutageLog, is_outage
from storage.partition_key import PartitionKey

log = logging.getLogger(__name__)


class FollowerListener(Protocol):
    async def logs_needed(self, keys: list[PartitionKey]) -> None: ...

    async def topics_removed(self, topic_ids: list[UUID]) -> None: ...

    async def image_changed(self) -> None: ...


def _shape(image: MetadataImage) -> dict[UUID, int]:
    """topic id -> number of partitions: what decides storage work."""
    return {tid: len(t.partitions) for tid, t in image.topics.items()}


class IsrChanges:
    """ISR shrinks and expands seen in the metadata log, by the partition's leader: each
    broker reports its own (Kafka's ``ReplicaManager`` IsrShrinks/IsrExpands, which count
    the ISR changes of the partitions it leads). A change moving the leadership is not
    counted (an election, not an ISR change by a leader)."""

    def __init__(self) -> None:
        self.shrinks: Counter[int] = Counter()
        self.expands: Counter[int] = Counter()

    @staticmethod
    def before(
        image: MetadataImage, records: list[Record]
    ) -> dict[tuple[UUID, int], tuple[int, int]]:
        """(leader, ISR size) of the partitions whose ISR the records set."""
        out = {}
        for r in records:
            if isinstance(r, PartitionChange) and r.isr is not None:
                p = image.partition(r.topic_id, r.partition)
                if p is not None:
                    out.setdefault((r.topic_id, r.partition), (p.leader, len(p.isr)))
        return out

    def after(self, image: MetadataImage, before: dict[tuple[UUID, int], tuple[int, int]]) -> None:
        for (topic_id, partition), (leader, size) in before.items():
            p = image.partition(topic_id, partition)
            if p is None or p.leader != leader or leader < 0:
                continue
            if len(p.isr) < size:
                self.shrinks[leader] += 1
            elif len(p.isr) > size:
                self.expands[leader] += 1


class MetadataFollower:
    def __init__(self, client: ControllerClient, wait_ms: int = 5000) -> None:
        self._client = client
        self._wait_ms = wait_ms
        self.image = MetadataImage()
        self.applied = 0
        # Bumped on every change of the image: cheap cache keys for derived views; and
        # called then, for views that keep what they derived until it changes.
        self.version = 0
        self.on_change: list[Callable[[], None]] = []
        self.last_error: str | None = None
        self.synced = False  # True after the first answer was applied
        self._listener: FollowerListener | None = None
        self._pending_logs: set[PartitionKey] = set()
        self._pending_removals: set[UUID] = set()
        self._task: asyncio.Task[None] | None = None
        self._changed = asyncio.Event()
        self.isr_changes = IsrChanges()
        # Storage work the image asks for, retried while the coordinator is unreachable.
        self._logs_outage = OutageLog("creating the logs of new partitions", log)
        self._removals_outage = OutageLog("deleting the data of removed topics", log)

    async def start(self, listener: FollowerListener | None = None) -> None:
        """Catches up with the controllers' metadata log (retrying until a controller
        answers), then follows in the background. All of it before returning, not one
        chunk: an answer holds at most 1000 entries, and a broker that started serving from
        the first ones would act on a past state of the cluster (lead partitions at an old
        epoch, rewriting their epoch history), as a Kafka broker waits to catch up with
        the metadata log before it starts its partitions."""
        self._listener = listener
        backoff = 0.1
        while True:
            try:
                before = self.applied
                await self.poll_once(wait_ms=0)
                if self.applied == before:
                    break  # nothing more: caught up
                backoff = 0.1
            except ControllerRefused as exc:
                log.warning("waiting for the controllers' metadata: %s", exc.message)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
        self._task = asyncio.create_task(self._loop())

    async def catch_up(self) -> None:
        """Poll the active controller until the image holds everything it has (no following
        after): for one-shot readers such as the PySpark jobs, which must see a topic
        created just before they were started."""
        while True:
            before = self.applied
            await self.apply_chunk(await self._client.metadata(self.applied, 0, from_leader=True))
            if self.applied == before:
                return

    async def stop(self) -> None:
        await cancel_and_wait([self._task])
        self._task = None

    async def wait_for(self, index: int, timeout: float) -> bool:
        """Waits until the image includes ``index`` (read-your-writes); False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.applied < index:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            event = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(event.wait(), remaining)
        return True

    async def _loop(self) -> None:
        backoff = 0.1
        outage = OutageLog("following the metadata log", log)
        while True:
            failed = True
            with outage:
                try:
                    # Pending storage work is retried soon, not after a full long poll.
                    pending = self._pending_logs or self._pending_removals
                    await self.poll_once(wait_ms=1000 if pending else self._wait_ms)
                    failed = False
                except ControllerRefused as exc:
                    self.last_error = exc.message
                    if is_outage(exc):
                        raise  # said once by the outage log
                    log.warning("following the metadata log: %s", exc.message)
                except Exception as exc:
                    self.last_error = repr(exc)
                    raise
            if failed:
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 2.0)
            else:
                backoff = 0.1

    async def poll_once(self, wait_ms: int) -> None:
        chunk = await self._client.metadata(self.applied, wait_ms)
        await self.apply_chunk(chunk)

    async def apply_chunk(self, chunk: MetadataChunk) -> None:
        before = _shape(self.image)
        changed = False
        if chunk.snapshot is not None and chunk.snapshot_index > self.applied:
            image = MetadataImage()
            image.apply_batch(decode_batch(chunk.snapshot))  # DecodeError: retried, loudly
            self.image = image
            self.applied = chunk.snapshot_index
            changed = True
        for index, data in chunk.entries:
            if index <= self.applied:
                continue  # a duplicate from another controller, or older than the snapshot
            try:
                records = decode_batch(data)
                # Counted from the first answer on only: replaying the log at start would
                # count the cluster's history as new changes.
                isr_before = self.isr_changes.before(self.image, records) if self.synced else {}
                self.image.apply_batch(records)
                self.isr_changes.after(self.image, isr_before)
            except ImageError as exc:
                # The controllers skip such an entry too (controller/state.py): same image.
                log.error("metadata entry %d skipped: %s", index, exc)
            except DecodeError:
                # A record this broker does not understand (a newer controller): skipping
                # it would make this image differ; stop here until upgraded.
                self.last_error = f"metadata entry {index} cannot be decoded"
                raise
            self.applied = index
            changed = True
        # With entries, ``applied`` stays the last one's: the answer may hold only a prefix.
        if not chunk.entries and chunk.snapshot is None and chunk.applied > self.applied:
            # Nothing after ours up to the controller's applied index (NOOPs only).
            self.applied = chunk.applied
        self.last_error = None
        self.synced = True
        if changed:
            self.version += 1
            for derived in self.on_change:
                derived()
            self._diff(before, _shape(self.image))
        await self._do_storage_work(changed)
        # Waiters wake once the storage work for what they wait on was attempted.
        self._changed.set()
        self._changed = asyncio.Event()

    def _diff(self, before: dict[UUID, int], after: dict[UUID, int]) -> None:
        for topic_id, count in after.items():
            old = before.get(topic_id, 0)
            self._pending_logs.update(PartitionKey(topic_id, p) for p in range(old, count))
        removed = set(before) - set(after)
        if removed:
            self._pending_removals |= removed
            self._pending_logs = {k for k in self._pending_logs if k.topic_id not in removed}

    async def _do_storage_work(self, changed: bool) -> None:
        listener = self._listener
        if listener is None:
            self._pending_logs.clear()
            self._pending_removals.clear()
            return
        if self._pending_logs:
            keys = sorted(self._pending_logs, key=lambda k: (str(k.topic_id), k.partition))
            with self._logs_outage:
                await listener.logs_needed(keys)
                self._pending_logs.difference_update(keys)
        if self._pending_removals:
            ids = sorted(self._pending_removals, key=str)
            with self._removals_outage:
                await listener.topics_removed(ids)
                self._pending_removals.difference_update(ids)
        if changed:
            try:
                await listener.image_changed()
            except Exception:
                log.exception("reacting to a metadata change failed")
