"""Embedded topic catalog on SQLite, until the Raft controller replaces it.

Same threading model as the coordinator: one worker thread owns one connection (see
:class:`storage.sqlite.SqliteThread`), every method is one transaction.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Mapping
from uuid import UUID

from storage.catalog import Topic, TopicCatalog, TopicExists, TopicNotFound
from storage.sqlite import SqliteUser

MIGRATIONS: list[list[str]] = [
    [
        """CREATE TABLE topics (
            name TEXT PRIMARY KEY,
            topic_id BLOB NOT NULL UNIQUE,
            partitions INTEGER NOT NULL CHECK (partitions > 0),
            configs TEXT NOT NULL DEFAULT '{}'
        )""",
    ],
]

_SELECT = "SELECT name, topic_id, partitions, configs FROM topics"


def _topic(row: tuple[str, bytes, int, str]) -> Topic:
    return Topic(row[0], UUID(bytes=row[1]), row[2], json.loads(row[3]))


def _get(cur: sqlite3.Cursor, name: str) -> Topic:
    row = cur.execute(_SELECT + " WHERE name = ?", (name,)).fetchone()
    if row is None:
        raise TopicNotFound(name)
    return _topic(row)


def _dump(configs: Mapping[str, str]) -> str:
    return json.dumps(dict(configs), sort_keys=True)


class SqliteCatalog(SqliteUser, TopicCatalog):
    def __init__(self, path: str) -> None:
        super().__init__(path, "catalog", MIGRATIONS, "sluice-catalog")

    async def list_topics(self) -> list[Topic]:
        return await self._read(_list_topics)

    async def create_topic(self, topic: Topic) -> None:
        await self._write(_create_topic, topic)

    async def delete_topic(self, name: str) -> Topic:
        return await self._write(_delete_topic, name)

    async def set_partitions(self, name: str, count: int) -> Topic:
        return await self._write(_set_partitions, name, count)

    async def set_configs(self, name: str, configs: Mapping[str, str | None]) -> Topic:
        return await self._write(_set_configs, name, dict(configs))


def _list_topics(cur: sqlite3.Cursor) -> list[Topic]:
    return [_topic(row) for row in cur.execute(_SELECT + " ORDER BY name")]


def _create_topic(cur: sqlite3.Cursor, topic: Topic) -> None:
    if topic.partitions <= 0:
        raise ValueError(f"a topic needs at least one partition, not {topic.partitions}")
    try:
        cur.execute(
            "INSERT INTO topics (name, topic_id, partitions, configs) VALUES (?, ?, ?, ?)",
            (topic.name, topic.topic_id.bytes, topic.partitions, _dump(topic.configs)),
        )
    except sqlite3.IntegrityError as e:
        # The name is taken (or, vanishingly unlikely, the random topic id).
        raise TopicExists(topic.name) from e


def _delete_topic(cur: sqlite3.Cursor, name: str) -> Topic:
    topic = _get(cur, name)
    cur.execute("DELETE FROM topics WHERE name = ?", (name,))
    return topic


def _set_partitions(cur: sqlite3.Cursor, name: str, count: int) -> Topic:
    topic = _get(cur, name)
    if count < topic.partitions:
        # Kafka never removes partitions: their offsets and data would have nowhere to go.
        raise ValueError(
            f"topic {name} has {topic.partitions} partitions, cannot shrink to {count}"
        )
    cur.execute("UPDATE topics SET partitions = ? WHERE name = ?", (count, name))
    return Topic(topic.name, topic.topic_id, count, topic.configs)


def _set_configs(cur: sqlite3.Cursor, name: str, changes: dict[str, str | None]) -> Topic:
    topic = _get(cur, name)
    configs = dict(topic.configs)
    for key, value in changes.items():
        if value is None:
            configs.pop(key, None)
        else:
            configs[key] = value
    cur.execute("UPDATE topics SET configs = ? WHERE name = ?", (_dump(configs), name))
    return Topic(topic.name, topic.topic_id, topic.partitions, configs)
