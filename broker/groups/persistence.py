"""Group membership snapshots: what a new coordinator of a group starts from.

Kafka writes a group's metadata (generation, protocol, leader, members with their
subscriptions and assignments) to ``__consumer_offsets`` whenever a generation's
assignment is set, and a broker that becomes coordinator of the partition loads it: the
members keep heartbeating with their member id and generation, and nothing rebalances.
Sluice does the same with a :class:`GroupSnapshot` in the group store:

- stored (one round trip) when the leader's SyncGroup sets an assignment, and when a
  static member takes its place back under a new member id without a rebalance;
- deleted when the group becomes empty, is deleted or expires, so a stale snapshot
  never brings back members that left;
- loaded by the first request for a group this broker coordinates and does not hold:
  the group is Stable with those members, each with a fresh session timer.

Heartbeats write nothing. Writes of one group are applied in the order they were
issued (each waits for the previous), and a load waits for the writes in flight.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from broker.groups.group import Group, GroupState, Member
from storage.groups import GroupSnapshot, GroupStore, MemberSnapshot

log = logging.getLogger(__name__)


def snapshot_of(group: Group, assignments: dict[str, bytes], now_ms: int) -> GroupSnapshot:
    """The group's membership with these assignments (by member id; missing: none)."""
    protocol = group.protocol_name or ""
    return GroupSnapshot(
        group.group_id,
        group.generation_id,
        group.protocol_type or "",
        protocol,
        group.leader_id or "",
        now_ms,
        now_ms,
        tuple(
            MemberSnapshot(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                m.session_timeout_ms,
                m.metadata(protocol),
                assignments.get(m.member_id, b""),
            )
            for m in group.members.values()
        ),
    )


def group_from(snapshot: GroupSnapshot) -> Group:
    """A Stable group with the snapshot's members (no timers: the caller starts them).

    Only the chosen protocol's metadata is kept, as Kafka keeps it: a member that
    rejoins with other protocols changes its metadata and so rebalances the group."""
    group = Group(snapshot.group_id, snapshot.state_since_ms)
    for m in snapshot.members:
        member = Member(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            snapshot.protocol_type,
            [(snapshot.protocol_name, m.subscription)],
            assignment=m.assignment,
        )
        group.add(member, None)
    group.protocol_type = snapshot.protocol_type
    group.protocol_name = snapshot.protocol_name
    group.generation_id = snapshot.generation_id
    if snapshot.leader_id in group.members:
        group.leader_id = snapshot.leader_id
    group.subscribed_topics = group.compute_subscribed_topics()
    group.pending_sync = set()
    # Loaded, not transitioned: Stable is where a group with an assignment is.
    group.state = GroupState.STABLE
    group.state_since_ms = snapshot.state_since_ms
    return group


class GroupPersistence:
    def __init__(self, store: GroupStore) -> None:
        self.store = store
        self._writes: dict[str, asyncio.Future[None]] = {}

    def write(
        self, group_id: str, what: str, op: Callable[[], Awaitable[None]]
    ) -> asyncio.Future[None]:
        """Run ``op`` after the group's earlier writes; the future fails as ``op`` does
        (and the failure is logged: most writes have nobody waiting on them)."""
        previous = self._writes.get(group_id)

        async def run() -> None:
            if previous is not None:
                # Its failure was reported to whoever issued it.
                await asyncio.wait([previous])
            await op()

        task = asyncio.ensure_future(run())
        self._writes[group_id] = task

        def forget(done: asyncio.Future[None]) -> None:
            if self._writes.get(group_id) is done:
                del self._writes[group_id]
            if not done.cancelled() and done.exception() is not None:
                log.warning("%s of group %s failed: %s", what, group_id, done.exception())

        task.add_done_callback(forget)
        return task

    def store_group(self, snapshot: GroupSnapshot) -> asyncio.Future[None]:
        return self.write(
            snapshot.group_id, "storing the membership", lambda: self.store.store_group(snapshot)
        )

    def forget_group(self, group_id: str) -> asyncio.Future[None]:
        return self.write(
            group_id,
            "deleting the membership",
            lambda: self.store.delete_group_snapshots([group_id]),
        )

    async def settled(self) -> None:
        """Wait for every write issued so far (shutdown: before the store closes)."""
        while self._writes:
            await asyncio.wait(list(self._writes.values()))

    async def load(self, group_id: str) -> GroupSnapshot | None:
        pending = self._writes.get(group_id)
        if pending is not None:
            await asyncio.wait([pending])
        return await self.store.load_group(group_id)
