"""Topic catalog on PostgreSQL, in the coordinator's database (table ``topics``).

Same contract as :class:`storage.catalog.sqlite.SqliteCatalog`; every method is one
statement. Give it the coordinator's :class:`PostgresPool` to share connections.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from uuid import UUID

import asyncpg

from storage.catalog import Topic, TopicCatalog, TopicExists, TopicNotFound
from storage.postgres.pool import PoolUser, PostgresPool

_COLUMNS = "name, topic_id, partitions, configs"


def _topic(row: asyncpg.Record) -> Topic:
    # asyncpg hands back its own UUID subclass; keep the plain one callers compare with.
    return Topic(row[0], UUID(bytes=row[1].bytes), row[2], json.loads(row[3]))


class PostgresCatalog(PoolUser, TopicCatalog):
    def __init__(
        self,
        dsn: str | PostgresPool,
        *,
        command_timeout: float = 15.0,
        connect_timeout: float = 5.0,
    ) -> None:
        super().__init__(
            dsn,
            min_size=1,
            max_size=2,  # topic changes are rare and small
            command_timeout=command_timeout,
            connect_timeout=connect_timeout,
        )

    async def list_topics(self) -> list[Topic]:
        rows = await self._pool.fetch(f"SELECT {_COLUMNS} FROM topics ORDER BY name", write=False)
        return [_topic(r) for r in rows]

    async def create_topic(self, topic: Topic) -> None:
        if topic.partitions <= 0:
            raise ValueError(f"a topic needs at least one partition, not {topic.partitions}")
        try:
            await self._pool.fetch(
                "INSERT INTO topics (name, topic_id, partitions, configs) VALUES ($1, $2, $3, $4)",
                topic.name,
                topic.topic_id,
                topic.partitions,
                json.dumps(dict(topic.configs), sort_keys=True),
                write=True,
            )
        except asyncpg.UniqueViolationError as e:
            # The name is taken (or, vanishingly unlikely, the random topic id).
            raise TopicExists(topic.name) from e

    async def delete_topic(self, name: str) -> Topic:
        row = await self._pool.fetchrow(
            f"DELETE FROM topics WHERE name = $1 RETURNING {_COLUMNS}", name, write=True
        )
        if row is None:
            raise TopicNotFound(name)
        return _topic(row)

    async def set_partitions(self, name: str, count: int) -> Topic:
        # GREATEST keeps the row unchanged when asked to shrink; the answer then shows
        # the count it kept, which is how a shrink is told apart in one statement.
        row = await self._pool.fetchrow(
            "UPDATE topics SET partitions = GREATEST(partitions, $2) WHERE name = $1"
            f" RETURNING {_COLUMNS}",
            name,
            count,
            write=True,
        )
        if row is None:
            raise TopicNotFound(name)
        topic = _topic(row)
        if topic.partitions != count:
            # Kafka never removes partitions: their offsets and data would have nowhere to go.
            raise ValueError(
                f"topic {name} has {topic.partitions} partitions, cannot shrink to {count}"
            )
        return topic

    async def set_configs(self, name: str, configs: Mapping[str, str | None]) -> Topic:
        sets = {k: v for k, v in configs.items() if v is not None}
        removals = [k for k, v in configs.items() if v is None]
        row = await self._pool.fetchrow(
            "UPDATE topics SET configs = (configs || $2::jsonb) - $3::text[] WHERE name = $1"
            f" RETURNING {_COLUMNS}",
            name,
            json.dumps(sets),
            removals,
            write=True,
        )
        if row is None:
            raise TopicNotFound(name)
        return _topic(row)
