"""Contract of GroupStore (committed group offsets): every backend passes it unchanged.

Runs once per backend (SQLite, PostgreSQL); tests talk only through the GroupStore
interface, except the checks of what one backend promises on top (SQLite shares the
coordinator's file, PostgreSQL answers each call in one round trip).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from uuid import UUID

import pytest

from storage.coordinator.sqlite import SqliteCoordinator
from storage.groups import (
    CommittedOffset,
    GroupSnapshot,
    GroupStore,
    MemberSnapshot,
    OffsetKey,
)
from storage.groups.postgres import PostgresGroupStore
from storage.groups.sqlite import SqliteGroupStore
from storage.partition_key import PartitionKey

from .conftest import Backend, postgresql, sqlite

GROUP_STORE_BACKENDS: dict[str, Backend] = {
    "sqlite": sqlite(SqliteGroupStore),
    "postgresql": postgresql(PostgresGroupStore),
}

T1 = UUID("00000000-0000-0000-0000-000000000001")
T2 = UUID("00000000-0000-0000-0000-000000000002")
NOW = 1_700_000_000_000


class Stores:
    """Opens (and at teardown closes) stores over one backend's database."""

    def __init__(self, make: Callable[[], GroupStore]) -> None:
        self._make = make
        self._opened: list[GroupStore] = []

    async def open(self) -> GroupStore:
        store = self._make()
        await store.start()
        self._opened.append(store)
        return store

    async def close_all(self) -> None:
        for store in self._opened:
            await store.close()


@pytest.fixture(params=sorted(GROUP_STORE_BACKENDS))
def group_store_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AbstractAsyncContextManager[Callable[[], GroupStore]]:
    return GROUP_STORE_BACKENDS[request.param](request, tmp_path)


@pytest.fixture
async def stores(
    group_store_backend: AbstractAsyncContextManager[Callable[[], GroupStore]],
) -> AsyncIterator[Stores]:
    async with group_store_backend as make:
        opened = Stores(make)
        try:
            yield opened
        finally:
            await opened.close_all()


@pytest.fixture
async def store(stores: Stores) -> GroupStore:
    return await stores.open()


def offset(
    topic: UUID = T1,
    partition: int = 0,
    value: int = 10,
    epoch: int = -1,
    metadata: str = "",
    ts: int = NOW,
) -> CommittedOffset:
    return CommittedOffset(topic, partition, value, epoch, metadata, ts)


async def fetch_all(store: GroupStore, group_id: str) -> list[CommittedOffset]:
    return (await store.fetch_offsets({group_id: None})).get(group_id, [])


# --------------------------------------------------------------------------- commit/fetch


async def test_commit_then_fetch_everything_a_commit_carries(store: GroupStore) -> None:
    committed = [
        offset(T1, 0, 42, 3, "meta data ✓"),
        offset(T1, 1, 0, -1, ""),
        offset(T2, 0, 2**62, 7, "x" * 4096),
    ]
    await store.commit_offsets("g", committed)
    got = await fetch_all(store, "g")
    assert sorted(got, key=lambda o: (o.topic_id, o.partition)) == committed


async def test_a_later_commit_replaces_and_other_partitions_stay(store: GroupStore) -> None:
    await store.commit_offsets("g", [offset(T1, 0, 5), offset(T1, 1, 6)])
    await store.commit_offsets("g", [offset(T1, 0, 9, 2, "again", NOW + 1)])
    got = {o.key: o for o in await fetch_all(store, "g")}
    assert got[OffsetKey(T1, 0)] == offset(T1, 0, 9, 2, "again", NOW + 1)
    assert got[OffsetKey(T1, 1)] == offset(T1, 1, 6)


async def test_the_last_of_a_key_given_twice_wins(store: GroupStore) -> None:
    await store.commit_offsets("g", [offset(T1, 0, 1), offset(T1, 0, 2)])
    assert [o.offset for o in await fetch_all(store, "g")] == [2]


async def test_groups_are_separate(store: GroupStore) -> None:
    await store.commit_offsets("a", [offset(T1, 0, 1)])
    await store.commit_offsets("b", [offset(T1, 0, 2)])
    assert [o.offset for o in await fetch_all(store, "a")] == [1]
    assert [o.offset for o in await fetch_all(store, "b")] == [2]


async def test_fetch_specific_partitions_of_several_groups_at_once(store: GroupStore) -> None:
    await store.commit_offsets("a", [offset(T1, 0, 1), offset(T1, 1, 2), offset(T2, 0, 3)])
    await store.commit_offsets("b", [offset(T1, 0, 4)])
    got = await store.fetch_offsets(
        {
            "a": [OffsetKey(T1, 1), OffsetKey(T1, 5), OffsetKey(T2, 0)],
            "b": None,
            "nobody": [OffsetKey(T1, 0)],
            "nobody-at-all": None,
        }
    )
    assert {o.key: o.offset for o in got["a"]} == {OffsetKey(T1, 1): 2, OffsetKey(T2, 0): 3}
    assert [o.offset for o in got["b"]] == [4]
    assert "nobody" not in got and "nobody-at-all" not in got


async def test_empty_calls_are_harmless(store: GroupStore) -> None:
    await store.commit_offsets("g", [])
    assert await store.fetch_offsets({}) == {}
    assert await store.delete_groups([]) == []
    await store.delete_offsets("g", [])
    await store.delete_topics([])
    assert await store.expire_offsets([], NOW) == 0
    assert await store.groups_with_offsets() == []


async def test_offsets_survive_a_reopen(stores: Stores) -> None:
    first = await stores.open()
    await first.commit_offsets("g", [offset(T1, 3, 77, 1, "kept")])
    await first.close()
    second = await stores.open()
    assert await fetch_all(second, "g") == [offset(T1, 3, 77, 1, "kept")]


async def test_two_stores_on_one_database_see_each_other(stores: Stores) -> None:
    # Two brokers: the new coordinator of a group reads what the old one committed.
    a, b = await stores.open(), await stores.open()
    await a.commit_offsets("g", [offset(T1, 0, 11)])
    assert [o.offset for o in await fetch_all(b, "g")] == [11]


async def test_concurrent_commits_of_two_stores_never_deadlock(stores: Stores) -> None:
    # A zombie member on a broker that lost the group and its successor on the new
    # coordinator may commit the same partitions at once, in any order.
    a, b = await stores.open(), await stores.open()
    forward = [offset(T1, p, 1) for p in range(20)]
    backward = [offset(T1, p, 2) for p in reversed(range(20))]
    for _ in range(10):
        await asyncio.gather(a.commit_offsets("g", forward), b.commit_offsets("g", backward))
    got = await fetch_all(a, "g")
    assert len(got) == 20 and {o.offset for o in got} <= {1, 2}


# --------------------------------------------------------------------------- groups


async def test_groups_with_offsets_lists_and_filters(store: GroupStore) -> None:
    await store.commit_offsets("b", [offset()])
    await store.commit_offsets("a", [offset(), offset(T2)])
    assert await store.groups_with_offsets() == ["a", "b"]
    assert await store.groups_with_offsets(["b", "c"]) == ["b"]
    assert await store.groups_with_offsets([]) == []


async def test_delete_groups_says_which_had_offsets(store: GroupStore) -> None:
    await store.commit_offsets("a", [offset(), offset(T2)])
    await store.commit_offsets("b", [offset()])
    assert await store.delete_groups(["a", "missing", "a"]) == ["a"]
    assert await fetch_all(store, "a") == []
    assert await store.groups_with_offsets() == ["b"]


async def test_delete_offsets_of_one_group(store: GroupStore) -> None:
    await store.commit_offsets("g", [offset(T1, 0), offset(T1, 1), offset(T2, 0)])
    await store.commit_offsets("other", [offset(T1, 0)])
    await store.delete_offsets("g", [OffsetKey(T1, 0), OffsetKey(T2, 0), OffsetKey(T2, 9)])
    assert [o.key for o in await fetch_all(store, "g")] == [OffsetKey(T1, 1)]
    assert len(await fetch_all(store, "other")) == 1


async def test_delete_topics_removes_their_offsets_from_every_group(store: GroupStore) -> None:
    await store.commit_offsets("a", [offset(T1, 0), offset(T2, 0)])
    await store.commit_offsets("b", [offset(T1, 1)])
    await store.delete_topics([T1])
    assert [o.key for o in await fetch_all(store, "a")] == [OffsetKey(T2, 0)]
    assert await store.groups_with_offsets() == ["a"]


# --------------------------------------------------------------------------- expiry


async def test_expiry_candidates_and_expiry(store: GroupStore) -> None:
    await store.commit_offsets("old", [offset(T1, 0, ts=100), offset(T1, 1, ts=5000)])
    await store.commit_offsets("new", [offset(T1, 0, ts=5000)])
    assert await store.groups_committed_before(1000) == ["old"]
    assert await store.groups_committed_before(100) == []
    # Only what was committed before the cutoff goes; the group keeps newer offsets.
    assert await store.expire_offsets(["old", "new"], 1000) == 1
    assert [o.partition for o in await fetch_all(store, "old")] == [1]
    assert len(await fetch_all(store, "new")) == 1
    # Groups not named are never touched.
    assert await store.expire_offsets(["old"], 10_000) == 1
    assert len(await fetch_all(store, "new")) == 1


# --------------------------------------------------------------------------- snapshots


def member(n: int, instance: str | None = None) -> MemberSnapshot:
    return MemberSnapshot(
        f"m{n}", instance, f"client-{n}", f"/10.0.0.{n}", 60_000 + n, 10_000 + n,
        b"\x00sub" + bytes([n]), b"\x00\xffassign" + bytes([n]) * n,
    )  # fmt: skip


def snapshot(group_id: str = "g", generation: int = 3, *members: MemberSnapshot) -> GroupSnapshot:
    return GroupSnapshot(
        group_id, generation, "consumer", "range", members[0].member_id if members else "",
        NOW, NOW + 1, members,
    )  # fmt: skip


async def test_a_stored_snapshot_loads_back_whole(store: GroupStore) -> None:
    stored = snapshot("g", 7, member(2, "instance-2"), member(1), member(3))
    await store.store_group(stored)
    # Members come back in the order given (join order: the next leader is the first).
    assert await store.load_group("g") == stored
    assert await store.load_group("other") is None
    assert await store.groups_with_snapshots() == ["g"]


async def test_a_later_snapshot_replaces_the_whole_group(store: GroupStore) -> None:
    await store.store_group(snapshot("g", 1, member(1), member(2), member(3)))
    fewer = snapshot("g", 2, member(4))
    await store.store_group(fewer)
    assert await store.load_group("g") == fewer
    more = snapshot("g", 3, member(5), member(6), member(7), member(8))
    await store.store_group(more)
    assert await store.load_group("g") == more
    nobody = snapshot("g", 4)
    await store.store_group(nobody)
    assert await store.load_group("g") == nobody


async def test_deleting_snapshots_keeps_offsets(store: GroupStore) -> None:
    await store.store_group(snapshot("a", 1, member(1)))
    await store.store_group(snapshot("b", 1, member(1)))
    await store.commit_offsets("a", [offset()])
    await store.delete_group_snapshots(["a", "missing"])
    await store.delete_group_snapshots([])
    assert await store.load_group("a") is None
    assert await store.load_group("b") is not None
    assert await fetch_all(store, "a") == [offset()]


async def test_delete_groups_removes_snapshots_too(store: GroupStore) -> None:
    await store.store_group(snapshot("only-members", 1, member(1)))
    await store.store_group(snapshot("both", 1, member(1)))
    await store.commit_offsets("both", [offset()])
    await store.commit_offsets("only-offsets", [offset()])
    deleted = await store.delete_groups(["only-members", "both", "only-offsets", "none"])
    assert deleted == ["both", "only-members", "only-offsets"]
    assert await store.groups_with_snapshots() == []
    assert await store.load_group("both") is None


async def test_another_broker_loads_the_snapshot(stores: Stores) -> None:
    # The coordinator moved: the new one reads what the old one stored.
    a, b = await stores.open(), await stores.open()
    stored = snapshot("g", 5, member(1), member(2))
    await a.store_group(stored)
    assert await b.load_group("g") == stored
    await a.close()
    c = await stores.open()
    assert await c.load_group("g") == stored


# --------------------------------------------------------------------------- backend extras


async def test_sqlite_store_shares_the_coordinator_file(tmp_path: Path) -> None:
    path = str(tmp_path / "coordinator.db")
    coordinator = SqliteCoordinator(path)
    groups = SqliteGroupStore(path)
    await coordinator.start()
    await groups.start()
    try:
        await coordinator.create_logs([PartitionKey(T1, 0)])
        await groups.commit_offsets("g", [offset()])
        assert len(await coordinator.log_info([PartitionKey(T1, 0)])) == 1
        assert await fetch_all(groups, "g") == [offset()]
    finally:
        await groups.close()
        await coordinator.close()
    reopened = SqliteGroupStore(path)
    await reopened.start()
    try:
        assert await fetch_all(reopened, "g") == [offset()]
    finally:
        await reopened.close()


async def test_postgresql_one_round_trip_per_commit_and_fetch(postgres_dsn: str) -> None:
    store = PostgresGroupStore(postgres_dsn)
    await store.start()
    try:
        sent: list[str] = []
        store.pool.on_query = sent.append
        many = [offset(T1, p, p) for p in range(200)] + [offset(T2, p, p) for p in range(200)]
        await store.commit_offsets("g", many)
        assert len(sent) == 1
        sent.clear()
        got = await store.fetch_offsets(
            {"g": [OffsetKey(T1, p) for p in range(0, 200, 2)], "h": None, "g2": None}
        )
        assert len(sent) == 1
        assert len(got["g"]) == 100
    finally:
        await store.close()


async def test_postgresql_one_round_trip_per_snapshot(postgres_dsn: str) -> None:
    store = PostgresGroupStore(postgres_dsn)
    await store.start()
    try:
        sent: list[str] = []
        store.pool.on_query = sent.append
        await store.store_group(snapshot("g", 1, *(member(n) for n in range(50))))
        assert len(sent) == 1
        sent.clear()
        loaded = await store.load_group("g")
        assert len(sent) == 1
        assert loaded is not None and len(loaded.members) == 50
    finally:
        await store.close()
