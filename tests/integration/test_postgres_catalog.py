"""PostgresCatalog beside the coordinator: one database, one shared pool, many brokers."""

from __future__ import annotations

import asyncio
from uuid import uuid4

import pytest

from storage.catalog import Topic, TopicExists
from storage.catalog.postgres import PostgresCatalog
from storage.coordinator.postgres import PostgresCoordinator
from storage.partition_key import PartitionKey
from storage.postgres.pool import PostgresPool


async def test_catalog_and_coordinator_share_a_pool_and_survive_reopen(postgres_dsn: str) -> None:
    t = Topic("t", uuid4(), 2, {"retention.bytes": "10"})
    pool = PostgresPool(postgres_dsn, max_size=2)
    await pool.start()  # the test's own hold
    catalog, coordinator = PostgresCatalog(pool), PostgresCoordinator(pool)
    await catalog.start()
    await coordinator.start()
    await catalog.create_topic(t)
    await coordinator.create_logs([PartitionKey(t.topic_id, 0)])
    await catalog.close()
    await coordinator.close()
    # Starts and closes are counted: the pool stays open for the holder left...
    assert await pool.fetch("SELECT 1", write=False)
    await pool.close()
    # ...and closes with it.
    with pytest.raises(RuntimeError, match="not started"):
        await pool.fetch("SELECT 1", write=False)

    reopened = PostgresCatalog(postgres_dsn)
    await reopened.start()
    assert await reopened.list_topics() == [t]
    await reopened.close()
    coordinator = PostgresCoordinator(postgres_dsn)
    await coordinator.start()
    assert (await coordinator.log_info([PartitionKey(t.topic_id, 0)]))[0].error == 0
    await coordinator.close()


async def test_two_brokers_creating_the_same_topic_one_wins(postgres_dsn: str) -> None:
    catalogs = [PostgresCatalog(postgres_dsn) for _ in range(2)]
    await asyncio.gather(*(c.start() for c in catalogs))
    try:
        outcomes = await asyncio.gather(
            *(c.create_topic(Topic("same", uuid4(), 1)) for c in catalogs),
            return_exceptions=True,
        )
        assert sorted(type(o).__name__ for o in outcomes) == ["NoneType", "TopicExists"]
        assert len(await catalogs[0].list_topics()) == 1
    finally:
        for c in catalogs:
            await c.close()


async def test_names_sort_by_bytes_whatever_the_locale(postgres_dsn: str) -> None:
    catalog = PostgresCatalog(postgres_dsn)
    await catalog.start()
    try:
        for name in ["b", "B", "a", "_x", "a.b", "a-b"]:
            await catalog.create_topic(Topic(name, uuid4(), 1))
        names = [t.name for t in await catalog.list_topics()]
        assert names == sorted(names)  # Python sorts str by code point, as SQLite does
        with pytest.raises(TopicExists):
            await catalog.create_topic(Topic("other", (await catalog.list_topics())[0].topic_id, 1))
    finally:
        await catalog.close()
