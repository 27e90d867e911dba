"""TopicCatalog: topic metadata until the Raft controller takes over.

The ``catalog`` fixture (conftest.py) runs each test once per backend."""

from __future__ import annotations

from pathlib import Path
from uuid import uuid4

import pytest

from storage.catalog import Topic, TopicCatalog, TopicExists, TopicNotFound
from storage.catalog.sqlite import SqliteCatalog
from storage.coordinator.sqlite import SqliteCoordinator
from storage.partition_key import PartitionKey


def topic(name: str, partitions: int = 3, **configs: str) -> Topic:
    return Topic(name, uuid4(), partitions, configs)


async def test_create_and_list(catalog: TopicCatalog) -> None:
    b, a = topic("b", 1), topic("a", 4, **{"retention.ms": "1000"})
    await catalog.create_topic(b)
    await catalog.create_topic(a)
    assert await catalog.list_topics() == [a, b]


async def test_create_existing_name_raises(catalog: TopicCatalog) -> None:
    first = topic("t")
    await catalog.create_topic(first)
    with pytest.raises(TopicExists):
        await catalog.create_topic(topic("t", 9))
    assert await catalog.list_topics() == [first]


async def test_delete_returns_the_topic(catalog: TopicCatalog) -> None:
    t = topic("t", 2, **{"cleanup.policy": "delete"})
    await catalog.create_topic(t)
    assert await catalog.delete_topic("t") == t
    assert await catalog.list_topics() == []
    with pytest.raises(TopicNotFound):
        await catalog.delete_topic("t")
    await catalog.create_topic(topic("t"))  # the name is free again


async def test_set_partitions_grows_only(catalog: TopicCatalog) -> None:
    t = topic("t", 3)
    await catalog.create_topic(t)
    grown = await catalog.set_partitions("t", 5)
    assert (grown.topic_id, grown.partitions) == (t.topic_id, 5)
    with pytest.raises(ValueError):
        await catalog.set_partitions("t", 2)
    with pytest.raises(TopicNotFound):
        await catalog.set_partitions("nope", 9)
    assert [x.partitions for x in await catalog.list_topics()] == [5]


async def test_set_configs_sets_and_removes(catalog: TopicCatalog) -> None:
    await catalog.create_topic(topic("t", **{"retention.ms": "1", "segment.bytes": "2"}))
    updated = await catalog.set_configs(
        "t", {"retention.ms": "99", "segment.bytes": None, "max.message.bytes": "7", "x": None}
    )
    assert dict(updated.configs) == {"retention.ms": "99", "max.message.bytes": "7"}
    assert (await catalog.list_topics())[0].configs == updated.configs
    with pytest.raises(TopicNotFound):
        await catalog.set_configs("nope", {})


async def test_survives_reopen_and_can_share_a_file_with_the_coordinator(
    tmp_path: Path,
) -> None:
    path = str(tmp_path / "sluice.db")
    t = topic("t", 2, **{"retention.bytes": "10"})
    catalog = SqliteCatalog(path)
    coordinator = SqliteCoordinator(path)
    await catalog.start()
    await coordinator.start()
    await catalog.create_topic(t)
    await coordinator.create_logs([PartitionKey(t.topic_id, 0)])
    await catalog.close()
    await coordinator.close()

    reopened = SqliteCatalog(path)
    assert await reopened.list_topics() == [t]  # start() is optional: opened on first use
    await reopened.close()
    coordinator = SqliteCoordinator(path)
    assert (await coordinator.log_info([PartitionKey(t.topic_id, 0)]))[0].error == 0
    await coordinator.close()
