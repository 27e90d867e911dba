"""Storage clients for one process (the driver, or one reused Python worker of Spark).

The backends are asyncio-based; Spark calls plain functions. Each process keeps ONE event
loop and, per broker config, one object store and one coordinator, so a reused Python
worker (``spark.python.worker.reuse``, Spark's default) opens its connections once rather
than per task.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from broker.config import BrokerConfig
from storage.catalog import TopicCatalog
from storage.coordinator import BatchCoordinator
from storage.object_store import ObjectStore

T = TypeVar("T")

_lock = threading.Lock()
_loop: asyncio.AbstractEventLoop | None = None
_stores: dict[BrokerConfig, ObjectStore] = {}
_coordinators: dict[BrokerConfig, tuple[BatchCoordinator, TopicCatalog]] = {}


def run(coro: Coroutine[Any, Any, T]) -> T:
    """Run ``coro`` on this process's loop (clients stay bound to one loop)."""
    global _loop
    with _lock:
        if _loop is None or _loop.is_closed():
            _loop = asyncio.new_event_loop()
        loop = _loop
    return loop.run_until_complete(coro)


async def store(config: BrokerConfig) -> ObjectStore:
    found = _stores.get(config)
    if found is None:
        from sluice.backends import object_store

        found = object_store(config)
        await found.start()
        _stores[config] = found
    return found


async def coordinator(config: BrokerConfig) -> BatchCoordinator:
    return (await _backends(config))[0]


async def catalog(config: BrokerConfig) -> TopicCatalog:
    return (await _backends(config))[1]


async def _backends(config: BrokerConfig) -> tuple[BatchCoordinator, TopicCatalog]:
    found = _coordinators.get(config)
    if found is None:
        from sluice.backends import coordinator_and_catalog

        coord, cat = coordinator_and_catalog(config)
        await coord.start()
        await cat.start()
        found = _coordinators[config] = (coord, cat)
    return found


def close_all() -> None:
    """Close every client this process opened (the driver, at the end of a run)."""
    for coord, cat in list(_coordinators.values()):
        run(cat.close())
        run(coord.close())
    for s in list(_stores.values()):
        run(s.close())
    _coordinators.clear()
    _stores.clear()
