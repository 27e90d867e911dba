"""Small helpers shared by handlers that address partitions by topic name."""

from __future__ import annotations

from typing import Protocol

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
