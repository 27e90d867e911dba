"""Contract of RemoteLogMetadataStore (tiered segments' metadata): every backend passes it.

Runs once per backend (SQLite, PostgreSQL started by the fixture); tests talk only through
the interface, except the backend extras at the end (SQLite shares the coordinator's file,
PostgreSQL answers each call in one round trip).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from uuid import UUID

import pytest

from storage.coordinator.sqlite import SqliteCoordinator
from storage.partition_key import PartitionKey
from storage.tiered.metadata import RemoteLogMetadataStore, RemoteSegment, SegmentExists
from storage.tiered.metadata import SegmentState as S
from storage.tiered.metadata.postgres import PostgresRemoteLogMetadata
from storage.tiered.metadata.sqlite import SqliteRemoteLogMetadata

from .conftest import Backend, postgresql, sqlite

BACKENDS: dict[str, Backend] = {
    "sqlite": sqlite(SqliteRemoteLogMetadata),
    "postgresql": postgresql(PostgresRemoteLogMetadata),
}

T1 = UUID("00000000-0000-0000-0000-000000000001")
T2 = UUID("00000000-0000-0000-0000-000000000002")
NOW = 1_700_000_000_000


@pytest.fixture(params=sorted(BACKENDS))
def backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AbstractAsyncContextManager[Callable[[], RemoteLogMetadataStore]]:
    return BACKENDS[request.param](request, tmp_path)


@pytest.fixture
async def make(
    backend: AbstractAsyncContextManager[Callable[[], RemoteLogMetadataStore]],
) -> AsyncIterator[Callable[[], RemoteLogMetadataStore]]:
    async with backend as factory:
        yield factory


@pytest.fixture
async def store(
    make: Callable[[], RemoteLogMetadataStore],
) -> AsyncIterator[RemoteLogMetadataStore]:
    s = make()
    await s.start()
    try:
        yield s
    finally:
        await s.close()


def seg(
    start: int,
    end: int,
    epochs: tuple[tuple[int, int], ...] | None = None,
    topic: UUID = T1,
    partition: int = 0,
    leader_epoch: int = 3,
) -> RemoteSegment:
    return RemoteSegment(
        topic,
        partition,
        uuid.uuid4(),
        start,
        end,
        NOW + end,
        leader_epoch,
        epochs or ((leader_epoch, start),),
        (end - start + 1) * 100,
        1,
        S.COPY_SEGMENT_STARTED,
        NOW,
    )


async def test_add_then_list_returns_everything_a_segment_carries(
    store: RemoteLogMetadataStore,
) -> None:
    a = seg(0, 99, ((0, 0), (2, 40), (5, 90)), leader_epoch=6)
    b = seg(100, 199)
    await store.add_segment(b)
    await store.add_segment(a)
    assert await store.list_segments(T1, 0) == [a, b]
    assert await store.list_segments(T1, 1) == []
    assert await store.list_segments(T2, 0) == []


async def test_a_segment_id_is_added_once(store: RemoteLogMetadataStore) -> None:
    a = seg(0, 9)
    await store.add_segment(a)
    with pytest.raises(SegmentExists):
        await store.add_segment(a)
    assert await store.list_segments(T1, 0) == [a]


async def test_a_segment_is_added_as_started_only(store: RemoteLogMetadataStore) -> None:
    with pytest.raises(ValueError):
        await store.add_segment(seg(0, 9).with_state(S.COPY_SEGMENT_FINISHED, NOW))


async def test_state_moves_through_the_lifecycle(store: RemoteLogMetadataStore) -> None:
    a = seg(0, 9)
    await store.add_segment(a)
    for state in (
        S.COPY_SEGMENT_FINISHED,
        S.DELETE_SEGMENT_STARTED,
        S.DELETE_SEGMENT_FINISHED,
    ):
        got = await store.update_state(a.segment_id, state, NOW + 5)
        assert got == a.with_state(state, NOW + 5)
    assert await store.list_segments(T1, 0) == [a.with_state(S.DELETE_SEGMENT_FINISHED, NOW + 5)]


async def test_transitions_not_allowed_change_nothing(store: RemoteLogMetadataStore) -> None:
    a = seg(0, 9)
    await store.add_segment(a)
    # Not from STARTED: deletion cannot finish before it started; nothing returns to STARTED.
    assert await store.update_state(a.segment_id, S.DELETE_SEGMENT_FINISHED, NOW) is None
    assert await store.update_state(a.segment_id, S.COPY_SEGMENT_STARTED, NOW) is None
    assert await store.update_state(uuid.uuid4(), S.COPY_SEGMENT_FINISHED, NOW) is None
    await store.update_state(a.segment_id, S.COPY_SEGMENT_FINISHED, NOW)
    # Finishing twice is refused (a second copier must not take the first one's segment).
    assert await store.update_state(a.segment_id, S.COPY_SEGMENT_FINISHED, NOW + 1) is None
    assert (await store.list_segments(T1, 0))[0].event_ms == NOW


async def test_an_unfinished_copy_may_go_straight_to_deletion(
    store: RemoteLogMetadataStore,
) -> None:
    a = seg(0, 9)
    await store.add_segment(a)
    got = await store.update_state(a.segment_id, S.DELETE_SEGMENT_STARTED, NOW)
    assert got is not None and got.state is S.DELETE_SEGMENT_STARTED


async def test_list_filters_by_offset_and_state(store: RemoteLogMetadataStore) -> None:
    a, b, c = seg(0, 99), seg(100, 199), seg(150, 249)
    for s in (a, b, c):
        await store.add_segment(s)
    await store.update_state(b.segment_id, S.COPY_SEGMENT_FINISHED, NOW)
    assert await store.list_segments(T1, 0, from_offset=100) == [
        b.with_state(S.COPY_SEGMENT_FINISHED, NOW),
        c,
    ]
    assert await store.list_segments(T1, 0, from_offset=200) == [c]
    assert await store.list_segments(T1, 0, from_offset=250) == []
    assert await store.list_segments(T1, 0, states=[S.COPY_SEGMENT_STARTED]) == [a, c]
    assert await store.list_segments(T1, 0, from_offset=50, states=[S.COPY_SEGMENT_FINISHED]) == [
        b.with_state(S.COPY_SEGMENT_FINISHED, NOW)
    ]


async def test_delete_segments_and_topics(store: RemoteLogMetadataStore) -> None:
    a, b = seg(0, 9), seg(10, 19)
    c, d = seg(0, 9, topic=T2), seg(0, 9, topic=T2, partition=1)
    for s in (a, b, c, d):
        await store.add_segment(s)
    assert await store.delete_segments([a.segment_id, a.segment_id, uuid.uuid4()]) == 1
    assert await store.delete_segments([]) == 0
    assert await store.list_segments(T1, 0) == [b]
    assert await store.topic_partitions() == {T1: {0}, T2: {0, 1}}
    assert await store.delete_topics([T2]) == 2
    assert await store.list_segments(T2, 0) == [] and await store.list_segments(T2, 1) == []
    assert await store.list_segments(T1, 0) == [b]
    assert await store.topic_partitions() == {T1: {0}}


async def test_the_log_start_only_moves_up(store: RemoteLogMetadataStore) -> None:
    assert await store.log_start(T1, 0) == 0
    assert await store.advance_log_start(T1, 0, 100) == 100
    assert await store.advance_log_start(T1, 0, 40) == 100
    assert await store.advance_log_start(T1, 1, 7) == 7
    assert (await store.log_start(T1, 0), await store.log_start(T1, 1)) == (100, 7)
    await store.delete_topics([T1])
    assert await store.log_start(T1, 0) == 0


async def test_two_stores_see_one_database(make: Callable[[], RemoteLogMetadataStore]) -> None:
    # Two brokers: a new leader sees what the old one copied.
    one, two = make(), make()
    await one.start()
    await two.start()
    try:
        a = seg(0, 9)
        await one.add_segment(a)
        assert await two.list_segments(T1, 0) == [a]
        # Racing to finish (or delete) the same copy: exactly one wins.
        results = await asyncio.gather(
            one.update_state(a.segment_id, S.DELETE_SEGMENT_STARTED, NOW),
            two.update_state(a.segment_id, S.DELETE_SEGMENT_STARTED, NOW),
        )
        assert sum(r is not None for r in results) == 1
    finally:
        await one.close()
        await two.close()


# --------------------------------------------------------------------------- backend extras


async def test_sqlite_store_shares_the_coordinator_file(tmp_path: Path) -> None:
    path = str(tmp_path / "coordinator.db")
    coordinator = SqliteCoordinator(path)
    remote = SqliteRemoteLogMetadata(path)
    await coordinator.start()
    await remote.start()
    a = seg(0, 9)
    try:
        await coordinator.create_logs([PartitionKey(T1, 0)])
        await remote.add_segment(a)
        assert len(await coordinator.log_info([PartitionKey(T1, 0)])) == 1
    finally:
        await remote.close()
        await coordinator.close()
    reopened = SqliteRemoteLogMetadata(path)
    await reopened.start()
    try:
        assert await reopened.list_segments(T1, 0) == [a]
    finally:
        await reopened.close()


async def test_postgresql_one_round_trip_per_operation(postgres_dsn: str) -> None:
    store = PostgresRemoteLogMetadata(postgres_dsn)
    await store.start()
    try:
        sent: list[str] = []
        store.pool.on_query = sent.append
        a = seg(0, 9)
        await store.add_segment(a)
        await store.update_state(a.segment_id, S.COPY_SEGMENT_FINISHED, NOW)
        await store.list_segments(T1, 0, from_offset=5, states=[S.COPY_SEGMENT_FINISHED])
        await store.delete_segments([a.segment_id])
        await store.delete_topics([T1])
        await store.advance_log_start(T1, 0, 5)
        await store.log_start(T1, 0)
        assert len(sent) == 7
    finally:
        await store.close()
