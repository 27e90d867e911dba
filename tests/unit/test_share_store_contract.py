"""Contract of ShareStateStore (share-partition state): every backend passes it
unchanged. The compare-and-set write is what keeps two brokers from acquiring the same
record: a write from a stale version changes nothing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from uuid import UUID

import pytest

from storage.share_groups import ShareKey, ShareStateStore, StateWrite, StoredState
from storage.share_groups.postgres import PostgresShareStateStore
from storage.share_groups.sqlite import SqliteShareStateStore

from .conftest import Backend, postgresql, sqlite

BACKENDS: dict[str, Backend] = {
    "sqlite": sqlite(SqliteShareStateStore),
    "postgresql": postgresql(PostgresShareStateStore),
}
T1 = UUID("00000000-0000-0000-0000-000000000001")
T2 = UUID("00000000-0000-0000-0000-000000000002")
K1 = ShareKey(T1, 0)
K2 = ShareKey(T1, 1)
K3 = ShareKey(T2, 0)


@pytest.fixture(params=sorted(BACKENDS))
def backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AbstractAsyncContextManager[Callable[[], ShareStateStore]]:
    return BACKENDS[request.param](request, tmp_path)


@pytest.fixture
async def two(
    backend: AbstractAsyncContextManager[Callable[[], ShareStateStore]],
) -> AsyncIterator[tuple[ShareStateStore, ShareStateStore]]:
    """Two stores on one database: two brokers."""
    async with backend as make:
        a, b = make(), make()
        await a.start()
        await b.start()
        try:
            yield a, b
        finally:
            await a.close()
            await b.close()


async def test_write_creates_then_compares_and_sets(
    two: tuple[ShareStateStore, ShareStateStore],
) -> None:
    a, b = two
    assert await a.load("g", [K1]) == {}
    created = await a.write("g", [StateWrite(K1, 0, "s1"), StateWrite(K2, 0, "t1")])
    assert set(created) == {K1, K2}
    v1 = created[K1]
    # Another broker creating the same row, or writing from a version it did not read, loses.
    assert await b.write("g", [StateWrite(K1, 0, "x")]) == {}
    assert await b.write("g", [StateWrite(K1, v1 + 1, "x")]) == {}
    assert await b.load("g", [K1, K2, K3]) == {
        K1: StoredState(v1, "s1"),
        K2: StoredState(created[K2], "t1"),
    }
    # From the version read, one write of many partitions; the stale one is left out.
    done = await b.write("g", [StateWrite(K1, v1, "s2"), StateWrite(K2, 0, "y")])
    assert done == {K1: v1 + 1}
    assert await a.load("g", [K1]) == {K1: StoredState(v1 + 1, "s2")}
    assert await a.load("other", [K1]) == {}


async def test_a_row_made_again_does_not_take_a_write_for_the_old_one(
    two: tuple[ShareStateStore, ShareStateStore],
) -> None:
    a, b = two
    old = (await a.write("g", [StateWrite(K1, 0, "old")]))[K1]
    await a.delete("g", [K1])
    assert set(await a.write("g", [StateWrite(K1, 0, "new")])) == {K1}
    # b read the old row: its write must not land on the new one.
    assert await b.write("g", [StateWrite(K1, old, "stale")]) == {}
    [stored] = (await a.load("g", [K1])).values()
    assert stored.state == "new"


async def test_concurrent_writers_from_one_version_one_wins(
    two: tuple[ShareStateStore, ShareStateStore],
) -> None:
    a, b = two
    v1 = (await a.write("g", [StateWrite(K1, 0, "v1")]))[K1]
    results = await asyncio.gather(
        *[s.write("g", [StateWrite(K1, v1, f"by-{i}")]) for i, s in enumerate([a, b] * 4)]
    )
    assert sum(1 for r in results if r) == 1
    [stored] = (await a.load("g", [K1])).values()
    assert stored.version == v1 + 1 and stored.state.startswith("by-")


async def test_groups_group_states_and_deletes(
    two: tuple[ShareStateStore, ShareStateStore],
) -> None:
    a, _ = two
    await a.write("g1", [StateWrite(K1, 0, "a"), StateWrite(K3, 0, "b")])
    await a.write("g2", [StateWrite(K1, 0, "c")])
    assert await a.groups() == ["g1", "g2"]
    states = await a.group_states("g1")
    assert {k: s.state for k, s in states.items()} == {K1: "a", K3: "b"}
    assert await a.delete("g1", [K3]) == 1
    assert set(await a.group_states("g1")) == {K1}
    await a.delete_topics([T1])
    assert await a.groups() == []
    await a.write("g3", [StateWrite(K1, 0, "a"), StateWrite(K2, 0, "b")])
    assert await a.delete("g3", None) == 2
    assert await a.group_states("g3") == {}


async def test_group_configs(two: tuple[ShareStateStore, ShareStateStore]) -> None:
    a, b = two
    assert await a.group_configs("g") == {}
    await a.alter_group_configs("g", {"share.auto.offset.reset": "earliest", "x": "1"})
    await b.alter_group_configs("g", {"x": None, "share.isolation.level": "read_committed"})
    assert await a.group_configs("g") == {
        "share.auto.offset.reset": "earliest",
        "share.isolation.level": "read_committed",
    }
    assert await a.group_configs("other") == {}


async def test_membership_is_stored_for_the_next_coordinator(
    two: tuple[ShareStateStore, ShareStateStore],
) -> None:
    a, b = two
    assert await b.load_membership("g") is None
    assert not await b.has_group("g")
    await a.store_membership("g", '{"epoch": 1}')
    await a.store_membership("g", '{"epoch": 2}')  # replaced whole
    # Another broker (the next coordinator) reads what the first wrote.
    assert await b.load_membership("g") == '{"epoch": 2}'
    assert await b.has_group("g") and await b.groups() == ["g"]
    assert await b.load_membership("other") is None
    # A group with share-partition state only is a share group too.
    await a.write("h", [StateWrite(K1, 0, "s")])
    assert await b.has_group("h") and await b.groups() == ["g", "h"]
    # Forgetting the share-partitions leaves the membership, and the other way round.
    await a.delete("g", None)
    assert await b.load_membership("g") == '{"epoch": 2}'
    await b.delete_membership("g")
    assert await a.load_membership("g") is None and not await a.has_group("g")
    assert await a.groups() == ["h"]
