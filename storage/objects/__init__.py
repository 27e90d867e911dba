"""Where the bytes live: an object store with whole-object writes and ranged reads."""

from __future__ import annotations

import re
import uuid
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass

# A write is given as a sequence of buffers (slices of request frames) so that no
# joined copy of a flush is ever made in Python.
Chunks = Sequence[bytes | memoryview]


# The keys of objects that hold record batches: a broker flush's, or a merge or compaction
# job's (``merge-``). Only such keys are ever swept as orphans: the bucket may hold other
# things, such as the analytics tables or Iceberg warehouses the jobs write into it.
MERGE_KEY_PREFIX = "merge-"
_DATA_KEY = re.compile(r"(?:merge-)?[0-9a-f]{32}")


def new_data_key(prefix: str = "") -> str:
    return prefix + uuid.uuid4().hex


def is_data_key(key: str) -> bool:
    return _DATA_KEY.fullmatch(key) is not None


class ObjectStoreError(Exception):
    """The store could not complete an operation; the caller decides whether to retry."""

    dependency_outage = True  # storage.outage: raised once the store's own retries gave up


class ObjectNotFound(ObjectStoreError):
    dependency_outage = False  # an answer of a reachable store


@dataclass(frozen=True, slots=True)
class StoredObject:
    key: str
    size: int
    modified_ms: int


class ObjectStore(ABC):
    async def start(self) -> None:  # noqa: B027 - optional hook
        pass

    async def close(self) -> None:  # noqa: B027 - optional hook
        pass

    @abstractmethod
    async def put(self, key: str, chunks: Chunks) -> None:
        """Store an object atomically: after return it is durable and whole, or absent."""

    @abstractmethod
    async def get_range(self, key: str, offset: int, length: int) -> bytes:
        """Bytes ``[offset, offset + length)`` of an object (shorter at its end)."""

    @abstractmethod
    async def delete_many(self, keys: Sequence[str]) -> None:
        """Delete objects; missing ones are not an error."""

    @abstractmethod
    def list_objects(self) -> AsyncIterator[list[StoredObject]]:
        """Every object of this store, in pages (for the sweep of orphaned objects)."""
