"""Fixtures shared by the unit tests.

The coordinator contract suite runs once per backend in ``COORDINATOR_BACKENDS``. A
backend is an async context manager that prepares empty storage (a temp SQLite file; a
fresh database for PostgreSQL) and yields a zero-argument constructor; every
coordinator it constructs must see the same data, which is how persistence across a
close/reopen is tested.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path

import pytest

from storage.coordinator import BatchCoordinator
from storage.sqlite_coordinator import SqliteCoordinator

MakeCoordinator = Callable[[], BatchCoordinator]


@asynccontextmanager
async def sqlite_backend(tmp_path: Path) -> AsyncIterator[MakeCoordinator]:
    path = str(tmp_path / "coordinator.db")
    yield lambda: SqliteCoordinator(path)


# name -> backend; add "postgresql" here when that backend exists.
COORDINATOR_BACKENDS: dict[str, Callable[[Path], AbstractAsyncContextManager[MakeCoordinator]]] = {
    "sqlite": sqlite_backend,
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
async def coordinator_factory(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[CoordinatorFactory]:
    async with COORDINATOR_BACKENDS[request.param](tmp_path) as make:
        factory = CoordinatorFactory(make)
        try:
            yield factory
        finally:
            await factory.close_all()


@pytest.fixture
async def coordinator(coordinator_factory: CoordinatorFactory) -> BatchCoordinator:
    return await coordinator_factory.open()
