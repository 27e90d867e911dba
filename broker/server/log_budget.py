"""Budgets for log lines a client can cause at will.

A client can open connections, send garbage or invent client ids as fast as it likes; a
line for each would let it fill the disk through the log. ``LineBudget``: lines per second,
past which lines are only counted, and the next line that fits says how many were left out.
``TracebackLimiter``: a request that makes a handler fail is a bug to fix, and its first
traceback is what fixes it; the next thousand, from a client retrying in a loop, only fill
the disk and hide other lines. Each kind (the API and the exception's type) logs its
traceback once a minute; later ones are counted and the count goes with the next traceback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable


class LineBudget:
    def __init__(self, per_second: int, clock: Callable[[], float] = time.monotonic) -> None:
        self._per_second = per_second
        self._clock = clock
        self._window = -1.0
        self._lines = 0
        self.unlogged = 0

    def take(self) -> str | None:
        """None: over budget (counted). Otherwise the suffix for the line about to be
        logged: empty, or how many lines were left out since the last one."""
        now = self._clock()
        if now - self._window >= 1.0:
            self._window = now
            self._lines = 0
        if self._lines >= self._per_second:
            self.unlogged += 1
            return None
        self._lines += 1
        suffix = f" ({self.unlogged} more since, not logged)" if self.unlogged else ""
        self.unlogged = 0
        return suffix


INTERVAL_S = 60.0
MAX_KINDS = 1024  # distinct kinds remembered (a client cannot grow this without bound)


class TracebackLimiter:
    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self._interval = interval_s
        # kind -> (time of the last traceback logged, failures not logged since)
        self._kinds: dict[tuple[str, str], tuple[float, int]] = {}

    def log(
        self,
        logger: logging.Logger,
        kind: str,
        exc: BaseException | None,
        message: str,
        *args: object,
    ) -> None:
        """``logger.error(message, *args)`` with ``exc``'s traceback, or only counted."""
        key = (kind, type(exc).__name__)
        now = time.monotonic()
        last, suppressed = self._kinds.get(key, (float("-inf"), 0))
        if now - last < self._interval:
            self._kinds[key] = (last, suppressed + 1)
            return
        if len(self._kinds) >= MAX_KINDS and key not in self._kinds:
            self._kinds.clear()
        self._kinds[key] = (now, 0)
        if suppressed:
            message += f" ({suppressed} more like it in the last {self._interval:.0f} s)"
        logger.error(message, *args, exc_info=exc)


TRACEBACKS = TracebackLimiter()
