"""Background tasks of long-lived components (loops for heartbeats, retention, polling)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterable


async def cancel_and_wait(tasks: Iterable[asyncio.Task[None] | None]) -> None:
    """Cancel the tasks, then wait for each to finish, so nothing of a stopped component
    still runs (or holds a connection) when its stop() returns."""
    pending = [t for t in tasks if t is not None]
    for task in pending:
        task.cancel()
    for task in pending:
        with contextlib.suppress(asyncio.CancelledError):
            await task
