"""How a periodic task logs an outage of the services it depends on.

The coordinator database, the object store and the controllers go away at times (a restart,
a failover, a network cut): that is an operating condition, not a bug. A task that runs every
few hundred milliseconds must not write a traceback each round, burying the one line that
matters. So each task says once, at WARNING and without a traceback, that a dependency is
unavailable, and once, at INFO, that it works again. A failure that is no outage (a bug) is
still logged at ERROR with its traceback, every time.

Every periodic loop wraps its round in its own ``OutageLog``::

    outage = OutageLog("deleting files marked for deletion", log)
    while True:
        await asyncio.sleep(interval)
        with outage:
            await self.delete_marked_files()
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from types import TracebackType


def is_outage(exc: BaseException) -> bool:
    """A dependency that cannot be reached: sockets and timeouts, and the exception types
    that say so themselves (``dependency_outage = True``: the PostgreSQL pool's
    CoordinatorUnavailable and the object stores' errors, raised after their own retries;
    the brokers' ControllerUnavailable)."""
    return isinstance(exc, (ConnectionError, TimeoutError)) or bool(
        getattr(exc, "dependency_outage", False)
    )


class OutageLog:
    """One periodic task's log of its rounds: a context manager around one round that
    swallows the round's failure (the loop carries on) and logs it as described above.
    Cancellation and other BaseExceptions pass through."""

    def __init__(
        self,
        task: str,
        logger: logging.Logger,
        outage: Callable[[BaseException], bool] = is_outage,
    ) -> None:
        self.task = task
        self._log = logger
        self._is_outage = outage
        self._since: float | None = None  # monotonic start of the outage, None: none
        self._failed_rounds = 0
        # Start (monotonic) of the latest round that worked. Callers whose rounds overlap
        # (requests in flight together) pass each round's start: a round that began before
        # one that worked and fails now (a ten-second timeout) tells of an outage that is
        # already over, and starts none (the log flapped "unavailable" / "works again").
        self._last_ok_start = float("-inf")

    @property
    def ongoing(self) -> bool:
        return self._since is not None

    def __enter__(self) -> OutageLog:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        if exc is None:
            self.succeeded()
            return False
        if not isinstance(exc, Exception):
            return False
        self.failed(exc)
        return True

    def succeeded(self, started: float | None = None) -> None:
        if started is not None:
            self._last_ok_start = max(self._last_ok_start, started)
        if self._since is None:
            return
        self._log.info(
            "%s works again after %.1f s unavailable (%d failed rounds)",
            self.task,
            time.monotonic() - self._since,
            self._failed_rounds,
        )
        self._since = None
        self._failed_rounds = 0

    def failed(self, exc: Exception, started: float | None = None) -> None:
        if not self._is_outage(exc):
            self._log.error("%s failed", self.task, exc_info=exc)
            return
        if started is not None and started < self._last_ok_start and self._since is None:
            self._log.debug("%s: a round from before it last worked failed: %s", self.task, exc)
            return
        self._failed_rounds += 1
        if self._since is None:
            self._since = time.monotonic()
            self._log.warning(
                "%s: a dependency is unavailable (%s: %s); retrying every round, "
                "logged again once it works",
                self.task,
                type(exc).__name__,
                exc,
            )
