"""Topic metadata: names, ids, partition counts and configs.

This is the seam the Raft controller replaces: until it exists, the embedded
implementation keeps topics in SQLite beside the batch coordinator.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from uuid import UUID


class TopicExists(Exception):
    pass


class TopicNotFound(Exception):
    pass


@dataclass(frozen=True, slots=True)
class Topic:
    name: str
    topic_id: UUID
    partitions: int
    # Only explicitly set configs; defaults are the broker's (see broker.metadata.topic_config).
    configs: Mapping[str, str] = field(default_factory=dict)


class TopicCatalog(ABC):
    async def start(self) -> None:  # noqa: B027 - optional hook
        pass

    async def close(self) -> None:  # noqa: B027 - optional hook
        pass

    @abstractmethod
    async def list_topics(self) -> list[Topic]:
        """Every topic, for building Metadata answers (callers cache)."""

    @abstractmethod
    async def create_topic(self, topic: Topic) -> None:
        """Raises TopicExists when the name is taken."""

    @abstractmethod
    async def delete_topic(self, name: str) -> Topic:
        """Raises TopicNotFound; returns the deleted topic."""

    @abstractmethod
    async def set_partitions(self, name: str, count: int) -> Topic:
        """Grow a topic to ``count`` partitions. Raises TopicNotFound."""

    @abstractmethod
    async def set_configs(self, name: str, configs: Mapping[str, str | None]) -> Topic:
        """Set (value) or remove (None) explicit configs. Raises TopicNotFound."""
