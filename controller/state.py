"""The controller's replicated state machine: committed metadata entries → MetadataImage.

Raft calls ``apply`` for every committed entry in order (controller/raft/node.py). Besides the
image, the recent entries are kept as they were committed so that brokers can follow the
metadata log by index (``GET /v1/metadata?after=…``); a broker that falls further behind than
what is kept gets a snapshot of the image instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque

from controller.image import ImageError, MetadataImage
from controller.raft.messages import Entry, EntryKind, Snapshot
from controller.records import DecodeError, decode_batch, encode_batch

log = logging.getLogger(__name__)

RETAINED_ENTRIES = 10_000


class MetadataStateMachine:
    def __init__(self, retained: int = RETAINED_ENTRIES) -> None:
        self.image = MetadataImage()
        self.applied = 0
        # (index, entry bytes) of the recent DATA entries; NOOPs only advance ``applied``.
        self.entries: deque[tuple[int, bytes]] = deque(maxlen=retained)
        # Brokers asking for anything at or before this index need a snapshot.
        self.horizon = 0
        self._changed = asyncio.Event()
        self.closing = False

    # ---------------------------------------------------------------- raft StateMachine

    def apply(self, entry: Entry) -> None:
        if entry.kind == EntryKind.DATA:
            try:
                self.image.apply_batch(decode_batch(entry.data))
            except (DecodeError, ImageError) as exc:
                # Every replica skips the same entry (apply is deterministic), so the images
                # stay equal; the proposer's check against the image makes this a bug, not
                # a race, hence the loud log.
                log.error("metadata entry %d skipped: %s", entry.index, exc)
            else:
                if len(self.entries) == self.entries.maxlen:
                    self.horizon = self.entries[0][0]
                self.entries.append((entry.index, entry.data))
        self.applied = entry.index
        self.wake()

    def snapshot(self) -> bytes:
        return encode_batch(self.image.snapshot())

    def restore(self, snapshot: Snapshot) -> None:
        image = MetadataImage()
        if snapshot.data:
            image.apply_batch(decode_batch(snapshot.data))
        self.image = image
        self.applied = snapshot.index
        self.entries.clear()
        self.horizon = snapshot.index
        self.wake()

    # ---------------------------------------------------------------- followers

    def read(self, after: int, limit: int = 1000) -> tuple[bytes | None, list[tuple[int, bytes]]]:
        """What a follower at ``after`` needs: (snapshot or None, entries after it)."""
        if after < self.horizon:
            return self.snapshot(), []
        out = []
        for index, data in self.entries:
            if index > after:
                out.append((index, data))
                if len(out) >= limit:
                    break
        return None, out

    async def wait_past(self, index: int, timeout: float) -> None:
        """Return once something after ``index`` was applied, or after ``timeout``."""
        if self.applied > index or self.closing:
            return
        event = self._changed
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)

    def wake(self) -> None:
        # A fresh event per change: waiters of the old one wake, new waiters wait anew.
        self._changed.set()
        self._changed = asyncio.Event()
