"""Storage clients for one process (the driver, or one reused Python worker of Spark).

The backends are asyncio-based; Spark calls plain functions. Each process keeps ONE event
loop and, per broker config, one object store and one coordinator, so a reused Python
worker (``spark.python.worker.reuse``, Spark's default) opens its connections once rather
than per task.
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

from broker.config import BrokerConfig
from broker.metadata.controller_catalog import ControllerCatalog, ImageCatalog
from storage.catalog import TopicCatalog
from storage.coordinator import BatchCoordinator
from storage.objects import ObjectStore

from .source import topic_source

T = TypeVar("T")
log = logging.getLogger("sluice.jobs")

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
        from storage.backends import object_store

        found = object_store(config)
        await found.start()
        _stores[config] = found
    return found


async def coordinator(config: BrokerConfig) -> BatchCoordinator:
    return (await _backends(config))[0]


async def catalog(config: BrokerConfig) -> TopicCatalog:
    """The topics as of now (a long-running scheduler sees topics created since it began)."""
    found = (await _backends(config))[1]
    if isinstance(found, ControllerCatalog):
        # A broker follows the log in the background; a job reads it to its end when asked.
        await found.follower.catch_up()
    return found


async def _backends(config: BrokerConfig) -> tuple[BatchCoordinator, TopicCatalog]:
    found = _coordinators.get(config)
    if found is None:
        from storage.backends import coordinator_and_catalog

        # Decided before anything is opened: a refused source creates no file.
        source = topic_source(config)
        log.info("topics from %s", source.description)
        coord, cat = coordinator_and_catalog(
            config, ControllerCatalog.from_config(config) if config.controller_mode else None
        )
        await coord.start()
        if source.embedded_log is not None:
            cat = ImageCatalog(source.embedded_log)
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
