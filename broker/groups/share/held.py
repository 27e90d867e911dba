"""The share groups this broker coordinates, held in memory (:class:`ShareGroups`) with their
membership in the share store (:mod:`broker.groups.share.persistence`), as consumer groups
are kept (``broker.groups.consumer_coordinator``):

- loaded by the first request for a group this broker coordinates and does not hold; each
  member's session starts then (a member silent for the session timeout still leaves);
- stored after every heartbeat that changed the group (a join, a leave, a new epoch or
  assignment, a subscription) and after members time out, and answered only once stored,
  as Kafka answers once its records are written: a member never holds an epoch or an
  assignment the next coordinator would not know. Plain heartbeats write nothing;
- let go of when the group moves to another broker (the live brokers changed), before
  this broker's sweep could time its members out: the next coordinator loads them.

An empty group keeps its row (its epoch goes on from there), as Kafka keeps an empty share
group until DeleteGroups; the group id stays a share group's.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from broker.groups.share.membership import ShareGroups
from broker.groups.share.persistence import group_from, membership_of
from broker.groups.store_errors import store_error
from storage.share_groups import ShareStateStore

log = logging.getLogger(__name__)


class HeldShareGroups:
    def __init__(
        self, groups: ShareGroups, store: ShareStateStore, owns: Callable[[str], bool]
    ) -> None:
        self.groups = groups
        self._store = store
        self._owns = owns
        # What the store holds of each group held here (None: known to have no row).
        self._stored: dict[str, str | None] = {}
        self._loading: dict[str, asyncio.Future[int | None]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    def owns(self, group_id: str) -> bool:
        return self._owns(group_id)

    async def load(self, group_id: str, now_ms: int, session_timeout_ms: int) -> int | None:
        """Before a request on a group this broker coordinates: bring its stored membership
        back when it is not held here. None when done (or nothing to do), else the error
        to answer with (the store could not be read)."""
        if group_id in self.groups.groups or group_id in self._stored:
            return None
        loading = self._loading.get(group_id)
        if loading is None:
            loading = asyncio.ensure_future(self._load(group_id, now_ms, session_timeout_ms))
            self._loading[group_id] = loading
            loading.add_done_callback(lambda _: self._loading.pop(group_id, None))
        # Shielded: a request that goes away does not stop the load others wait on.
        return await asyncio.shield(loading)

    async def _load(self, group_id: str, now_ms: int, session_timeout_ms: int) -> int | None:
        try:
            text = await self._store.load_membership(group_id)
        except Exception as exc:
            return int(store_error(exc, f"loading share group {group_id}"))
        if group_id in self.groups.groups or not self._owns(group_id):
            return None
        self._stored[group_id] = text
        if text is not None:
            group = group_from(group_id, text, now_ms + session_timeout_ms)
            self.groups.groups[group_id] = group
            log.info(
                "share group %s loaded: epoch %d, %d members",
                group_id,
                group.epoch,
                len(group.members),
            )
        return None

    async def store(self, group_id: str) -> int | None:
        """Store the group's membership if it changed since last stored; None when stored
        (or unchanged), else the error to answer with."""
        lock = self._locks.setdefault(group_id, asyncio.Lock())
        async with lock:
            # Written under the lock from the group as it is now: a later write always
            # carries the later membership.
            group = self.groups.groups.get(group_id)
            if group is None:
                return None
            text = membership_of(group)
            if self._stored.get(group_id) == text:
                return None
            try:
                await self._store.store_membership(group_id, text)
            except Exception as exc:
                return int(store_error(exc, f"storing share group {group_id}"))
            if group_id in self.groups.groups:
                self._stored[group_id] = text
            return None

    def drop(self, group_id: str) -> None:
        """The group is no longer coordinated here: its next coordinator loads it."""
        self.groups.drop(group_id)
        self._stored.pop(group_id, None)
        lock = self._locks.get(group_id)
        if lock is not None and not lock.locked():
            del self._locks[group_id]

    async def delete(self, group_id: str) -> None:
        """DeleteGroups: the membership goes from the store and from here."""
        await self._store.delete_membership(group_id)
        self.drop(group_id)

    def drop_moved(self) -> None:
        """Let go of the groups another broker coordinates now."""
        for group_id in sorted(set(self.groups.groups) | set(self._stored)):
            if not self._owns(group_id):
                log.info("share group %s moved to another coordinator", group_id)
                self.drop(group_id)

    async def expire(self, now_ms: int) -> list[tuple[str, str]]:
        """Members whose session timed out leave (groups that moved are let go of first,
        so this broker never removes members another coordinator serves); returns
        (group, member) of each. The groups changed are stored (a failure is logged and
        retried at the group's next change)."""
        self.drop_moved()
        gone = self.groups.expire(now_ms)
        for group_id in sorted({g for g, _ in gone}):
            error = await self.store(group_id)
            if error:
                log.warning("share group %s: storing after a session timeout failed", group_id)
        return gone
