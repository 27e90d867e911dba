"""Share-partition states as this broker changes them: read from the database once,
kept, and written back with compare and set (``storage.share_groups``).

Another broker may change a share-partition meanwhile (any broker serves a diskless
partition): its write moves the row's version, ours is refused, and the change is
applied again to the state read afresh. A change is a pure function of the state
(``partition_state``), so applying it again is safe. On this broker the changes of one
group take turns (one lock per group), so the kept states stay what was written.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Callable, Sequence
from typing import TypeVar

from broker.groups.share.partition_state import SharePartitionState
from storage.share_groups import ShareKey, ShareStateStore, StateWrite

R = TypeVar("R")
# A change: the state (None when the share-partition has none yet) -> the state to write
# (None: nothing changed) and the answer for the caller.
Change = Callable[[ShareKey, SharePartitionState | None], tuple[SharePartitionState | None, R]]
ATTEMPTS = 12
MAX_KEPT = 50_000  # share-partition states kept in memory
# Between attempts after a conflict: a random pause, doubling (brokers that collided
# once should not collide again in lock step).
BACKOFF_S = 0.002
BACKOFF_MAX_S = 0.1


class ShareConflict(Exception):
    """Other brokers kept changing the share-partition: the caller answers a retriable
    error."""


class SharePartitions:
    def __init__(self, store: ShareStateStore) -> None:
        self.store = store
        self._kept: dict[tuple[str, ShareKey], tuple[int, SharePartitionState | None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def _lock(self, group_id: str) -> asyncio.Lock:
        lock = self._locks.get(group_id)
        if lock is None:
            lock = self._locks[group_id] = asyncio.Lock()
        return lock

    async def _fill(self, group_id: str, keys: Sequence[ShareKey]) -> None:
        if len(self._kept) > MAX_KEPT:
            # What is kept is only a head start (every write compares versions): past the
            # bound, start over rather than grow with every group ever served.
            self._kept.clear()
        missing = [k for k in keys if (group_id, k) not in self._kept]
        if not missing:
            return
        loaded = await self.store.load(group_id, missing)
        for key in missing:
            found = loaded.get(key)
            self._kept[(group_id, key)] = (
                (found.version, SharePartitionState.from_json(found.state))
                if found is not None
                else (0, None)
            )

    async def peek(
        self, group_id: str, keys: Sequence[ShareKey]
    ) -> dict[ShareKey, SharePartitionState | None]:
        """The states as last seen here (read when never seen): to decide where to read
        the log. Not to be changed: changes go through ``update``."""
        async with self._lock(group_id):
            await self._fill(group_id, keys)
            return {k: self._kept[(group_id, k)][1] for k in keys}

    async def update(
        self, group_id: str, keys: Sequence[ShareKey], change: Change[R]
    ) -> dict[ShareKey, R]:
        """Apply ``change`` to each share-partition and write the changed ones in one
        statement; those another broker changed meanwhile are read again and changed
        again. Raises ShareConflict after ATTEMPTS rounds of conflicts."""
        results: dict[ShareKey, R] = {}
        async with self._lock(group_id):
            pending = list(dict.fromkeys(keys))
            for attempt in range(ATTEMPTS):
                if attempt:
                    pause = min(BACKOFF_MAX_S, BACKOFF_S * 2**attempt)
                    await asyncio.sleep(random.uniform(0, pause))
                await self._fill(group_id, pending)
                writes: list[StateWrite] = []
                changed: dict[ShareKey, tuple[int, SharePartitionState]] = {}
                for key in pending:
                    version, state = self._kept[(group_id, key)]
                    new, results[key] = change(key, state)
                    if new is not None:
                        writes.append(StateWrite(key, version, new.to_json()))
                        changed[key] = (version, new)
                        # Changed in place, perhaps: what is kept is settled below.
                        del self._kept[(group_id, key)]
                written = await self.store.write(group_id, writes) if writes else {}
                for key, (_, new) in changed.items():
                    if key in written:
                        self._kept[(group_id, key)] = (written[key], new)
                pending = [k for k in changed if k not in written]
                if not pending:
                    return results
        raise ShareConflict(f"share-partitions of {group_id} kept changing: {pending}")

    def forget(self, group_id: str, keys: Sequence[ShareKey] | None = None) -> None:
        """Drop what is kept (after an admin change to the stored rows)."""
        for kept in list(self._kept):
            if kept[0] == group_id and (keys is None or kept[1] in keys):
                del self._kept[kept]
