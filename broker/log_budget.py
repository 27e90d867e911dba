"""A budget of log lines per second for lines a client can cause at will.

A client can open connections, send garbage or invent client ids as fast as it likes; a
line for each would let it fill the disk through the log. Past the budget, lines are only
counted, and the next line that fits says how many were left out.
"""

from __future__ import annotations

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
