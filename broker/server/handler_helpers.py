"""Small helpers shared by handlers that address partitions by topic name."""

from __future__ import annotations

from typing import Any, Protocol

from kio.schema.errors import ErrorCode

from storage.catalog import Topic


class _Topics(Protocol):
    def get(self, name: str) -> Topic | None: ...


class WithTopics(Protocol):
    """A handler's services that know the topics (broker/metadata/topics.py's registry)."""

    @property
    def topics(self) -> _Topics: ...


def resolve_partition(broker: WithTopics, name: str, partition: int) -> tuple[Topic | None, int]:
    """The topic if ``name``/``partition`` exists, else None and the Kafka error."""
    topic = broker.topics.get(name)
    if topic is None or not 0 <= partition < topic.partitions:
        return None, int(ErrorCode.unknown_topic_or_partition)
    return topic, 0


def group_by_topic(entries: list[tuple[str, dict]], key: str = "name") -> list[dict]:
    """[(topic, partition entry)] -> [{key: topic, "partitions": [...]}] in first-seen order."""
    grouped: dict[str, list[dict]] = {}
    for name, entry in entries:
        grouped.setdefault(name, []).append(entry)
    return [{key: name, "partitions": parts} for name, parts in grouped.items()]


def fetch_replica_id(fetch: Any) -> int:
    """The follower's broker id of a replication Fetch (-1: a consumer): ``replica_id`` up
    to v14, ``replica_state`` from v15 (KIP-903)."""
    state = getattr(fetch, "replica_state", None)
    if state is not None:
        return int(state.replica_id)
    return int(getattr(fetch, "replica_id", -1))
