"""Fixtures shared by the unit tests.

The coordinator contract suite runs once per backend in ``COORDINATOR_BACKENDS``. A
backend is an async context manager that prepares empty storage (a temp SQLite file; a
fresh database for PostgreSQL) and yields a zero-argument constructor; every
coordinator it constructs must see the same data, which is how persistence across a
close/reopen is tested. The catalog tests run the same way over ``CATALOG_BACKENDS``.

A backend is built by a plain (sync) fixture from the test's ``request``: PostgreSQL
takes its session server from it then, outside the event loop, and SQLite-only runs
never start one.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from storage.catalog import TopicCatalog
from storage.catalog.postgres import PostgresCatalog
from storage.catalog.sqlite import SqliteCatalog
from storage.coordinator import BatchCoordinator
from storage.coordinator.postgres import PostgresCoordinator
from storage.coordinator.sqlite import SqliteCoordinator

MakeCoordinator = Callable[[], BatchCoordinator]
# (request, tmp_path) -> async context manager yielding a zero-argument constructor
Backend = Callable[[pytest.FixtureRequest, Path], AbstractAsyncContextManager[Callable[[], Any]]]


def sqlite(cls: Callable[[str], Any]) -> Backend:
    @asynccontextmanager
    async def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[Any]:
        path = str(tmp_path / "sluice.db")
        yield lambda: cls(path)

    return backend


def postgresql(cls: Callable[[str], Any]) -> Backend:
    def backend(request: pytest.FixtureRequest, tmp_path: Path) -> AbstractAsyncContextManager[Any]:
        server = request.getfixturevalue("postgres_server")

        @asynccontextmanager
        async def database() -> AsyncIterator[Any]:
            dsn = await server.new_database()
            try:
                yield lambda: cls(dsn)
            finally:
                await server.drop_database(dsn)

        return database()

    return backend


# name -> backend
COORDINATOR_BACKENDS: dict[str, Backend] = {
    "sqlite": sqlite(SqliteCoordinator),
    "postgresql": postgresql(PostgresCoordinator),
}
CATALOG_BACKENDS: dict[str, Backend] = {
    "sqlite": sqlite(SqliteCatalog),
    "postgresql": postgresql(PostgresCatalog),
}


class CoordinatorFactory:
    """Opens (and at teardown closes) coordinators over one backend's storage."""

    def __init__(self, make: MakeCoordinator) -> None:
        self._make = make
        self._opened: list[BatchCoordinator] = []

    async def open(self) -> BatchCoordinator:
        coordinator = self._make()
        await coordinator.start()
        self._opened.append(coordinator)
        return coordinator

    async def close_all(self) -> None:
        for coordinator in self._opened:
            await coordinator.close()


@pytest.fixture(params=sorted(COORDINATOR_BACKENDS))
def coordinator_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AbstractAsyncContextManager[MakeCoordinator]:
    return COORDINATOR_BACKENDS[request.param](request, tmp_path)


@pytest.fixture
async def coordinator_factory(
    coordinator_backend: AbstractAsyncContextManager[MakeCoordinator],
) -> AsyncIterator[CoordinatorFactory]:
    async with coordinator_backend as make:
        factory = CoordinatorFactory(make)
        try:
            yield factory
        finally:
            await factory.close_all()


@pytest.fixture
async def coordinator(coordinator_factory: CoordinatorFactory) -> BatchCoordinator:
    return await coordinator_factory.open()


@pytest.fixture(params=sorted(CATALOG_BACKENDS))
def catalog_backend(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AbstractAsyncContextManager[Callable[[], TopicCatalog]]:
    return CATALOG_BACKENDS[request.param](request, tmp_path)


@pytest.fixture
async def catalog(
    catalog_backend: AbstractAsyncContextManager[Callable[[], TopicCatalog]],
) -> AsyncIterator[TopicCatalog]:
    async with catalog_backend as make:
        c = make()
        await c.start()
        try:
            yield c
        finally:
            await c.close()
