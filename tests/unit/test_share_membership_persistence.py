"""Share-group membership stored for the next coordinator (broker/groups/share/held.py):
two brokers on one database, the group moving from one to the other. The members keep
their ids, epochs and assignments; a member silent for the session timeout still leaves."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from uuid import UUID

import pytest
from kio.schema.errors import ErrorCode

from broker.groups.share.held import HeldShareGroups
from broker.groups.share.membership import ShareGroups
from storage.share_groups import ShareStateStore
from storage.share_groups.postgres import PostgresShareStateStore
from storage.share_groups.sqlite import SqliteShareStateStore

from .conftest import Backend, postgresql, sqlite

BACKENDS: dict[str, Backend] = {
    "sqlite": sqlite(SqliteShareStateStore),
    "postgresql": postgresql(PostgresShareStateStore),
}
A = UUID(int=1)
TOPICS = {"a": (A, 3)}
TIMEOUT = 45_000


class Writes:
    """A store that counts its membership writes."""

    def __init__(self, store: ShareStateStore) -> None:
        self.count = 0
        original = store.store_membership

        async def counted(group_id: str, membership: str) -> None:
            self.count += 1
            await original(group_id, membership)

        store.store_membership = counted  # type: ignore[method-assign]


@pytest.fixture(params=sorted(BACKENDS))
def backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AbstractAsyncContextManager[Callable[[], ShareStateStore]]:
    return BACKENDS[request.param](request, tmp_path)


class Cluster:
    """Two brokers' share-group membership; ``coordinator`` names the one owning groups."""

    def __init__(self, stores: list[ShareStateStore]) -> None:
        self.coordinator = 0
        self.brokers = [
            HeldShareGroups(
                ShareGroups(TIMEOUT, lambda names: {n: TOPICS[n] for n in names if n in TOPICS}),
                store,
                lambda _group, i=i: self.coordinator == i,
            )
            for i, store in enumerate(stores)
        ]
        self.writes = [Writes(s) for s in stores]

    async def heartbeat(
        self, member: str, epoch: int, now: int, topics: list[str] | None = None
    ) -> tuple[int, int, dict[UUID, list[int]] | None]:
        """A ShareGroupHeartbeat as the handler serves it on the coordinator: load, beat,
        store; (error, member epoch, assignment)."""
        held = self.brokers[self.coordinator]
        assert await held.load("g", now, TIMEOUT) is None
        result = held.groups.heartbeat("g", member, epoch, None, topics, "c", "/h", now)
        if not result.error:
            assert await held.store("g") is None
        return result.error, result.member_epoch, result.assignment


@pytest.fixture
async def cluster(
    backend: AbstractAsyncContextManager[Callable[[], ShareStateStore]],
) -> AsyncIterator[Cluster]:
    async with backend as make:
        stores = [make(), make()]
        for s in stores:
            await s.start()
        try:
            yield Cluster(stores)
        finally:
            for s in stores:
                await s.close()


async def test_the_next_coordinator_keeps_members_epochs_and_assignments(
    cluster: Cluster,
) -> None:
    _, e1, a1 = await cluster.heartbeat("m1", 0, 0, ["a"])
    _, e2, a2 = await cluster.heartbeat("m2", 0, 10, ["a"])
    _, e1, a1 = await cluster.heartbeat("m1", e1, 20)
    assert a1 == {A: [0, 2]} and a2 == {A: [1]} and e1 == e2
    # A plain heartbeat (nothing changed) writes nothing.
    before = cluster.writes[0].count
    assert await cluster.heartbeat("m2", e2, 30) == (0, e2, None)
    assert cluster.writes[0].count == before

    cluster.coordinator = 1  # broker 0 stopped, or the live brokers changed
    cluster.brokers[0].drop_moved()
    assert cluster.brokers[0].groups.groups == {}
    # Same members, same epochs; nothing new to tell them (their assignments were sent).
    assert await cluster.heartbeat("m1", e1, 1_000) == (0, e1, None)
    assert await cluster.heartbeat("m2", e2, 1_000) == (0, e2, None)
    assert cluster.writes[1].count == 0
    group = cluster.brokers[1].groups.groups["g"]
    assert group.epoch == e1 and group.assignment_epoch == e1
    assert {m: g.assignment for m, g in group.members.items()} == {
        "m1": {A: [0, 2]},
        "m2": {A: [1]},
    }
    # A stale epoch is still fenced, an unknown member still told so.
    assert (await cluster.heartbeat("m1", e1 - 1, 1_100))[0] == ErrorCode.fenced_member_epoch
    assert (await cluster.heartbeat("zz", e1, 1_100))[0] == ErrorCode.unknown_member_id
    # A third member joins on the new coordinator: epochs go on from the stored one.
    _, e3, a3 = await cluster.heartbeat("m3", 0, 1_200, ["a"])
    assert e3 > e1 and a3 == {A: [2]}


async def test_a_silent_member_still_leaves_after_a_move(cluster: Cluster) -> None:
    _, e1, _ = await cluster.heartbeat("m1", 0, 0, ["a"])
    _, e2, _ = await cluster.heartbeat("m2", 0, 0, ["a"])
    cluster.coordinator = 1
    # Loaded at 5 000: every member's session starts then.
    assert (await cluster.heartbeat("m1", e1, 5_000))[:2] == (0, e2)
    b = cluster.brokers[1]
    assert await b.expire(5_000 + TIMEOUT - 1) == []
    # m1 heartbeats on; m2 stays silent and leaves; m1 gets its partitions.
    assert (await cluster.heartbeat("m1", e2, 40_000))[0] == 0
    assert await b.expire(5_000 + TIMEOUT) == [("g", "m2")]
    error, e1, a1 = await cluster.heartbeat("m1", e2, 50_001)
    assert error == 0 and a1 == {A: [0, 1, 2]}
    # Broker 0 still holds its copy of before the move: its sweep lets go of the group
    # instead of timing out members broker 1 serves.
    assert set(cluster.brokers[0].groups.groups) == {"g"}
    assert await cluster.brokers[0].expire(10**9) == []
    assert cluster.brokers[0].groups.groups == {}
    # Back on broker 0: it loads what broker 1 stored (m2 gone).
    cluster.coordinator = 0
    assert await cluster.heartbeat("m1", e1, 60_000) == (0, e1, None)
    assert set(cluster.brokers[0].groups.groups["g"].members) == {"m1"}


async def test_a_group_left_by_everyone_keeps_its_epoch(cluster: Cluster) -> None:
    _, e1, _ = await cluster.heartbeat("m1", 0, 0, ["a"])
    assert (await cluster.heartbeat("m1", -1, 10))[0] == 0
    cluster.coordinator = 1
    _, again, _ = await cluster.heartbeat("m1", 0, 20, ["a"])
    assert again > e1  # the empty group was stored, its epoch goes on
    await cluster.brokers[1].delete("g")
    assert cluster.brokers[1].groups.groups == {}
    cluster.coordinator = 0
    cluster.brokers[0].drop_moved()
    cluster.coordinator = 1
    _, fresh, _ = await cluster.heartbeat("m1", 0, 30, ["a"])
    assert fresh < again  # deleted: a new group starts over
