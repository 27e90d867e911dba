"""ListTransactions' transactional id pattern: matched off the event loop, within a bound."""

from __future__ import annotations

import asyncio
import time

from broker.transactions.transactions_handler import PATTERN_TIMEOUT_S, _fullmatching


async def test_a_backtracking_pattern_is_given_up_on_and_the_loop_keeps_running() -> None:
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            await asyncio.sleep(0.05)
            ticks += 1

    running = asyncio.create_task(ticker())
    started = time.monotonic()
    try:
        # (a+)+b against forty a's backtracks for hours in Python's re.
        assert await _fullmatching("(a+)+b", ["a" * 40]) is None
    finally:
        running.cancel()
    elapsed = time.monotonic() - started
    assert PATTERN_TIMEOUT_S <= elapsed < PATTERN_TIMEOUT_S + 2
    assert ticks >= PATTERN_TIMEOUT_S / 0.05 / 2, "the event loop was blocked"


async def test_ordinary_patterns_match_whole_ids() -> None:
    ids = ["app-1", "app-12", "other-app-1", "ünï-çødé"]
    assert await _fullmatching(r"app-\d", ids) == {"app-1"}
    assert await _fullmatching(r".*app-\d+", ids) == {"app-1", "app-12", "other-app-1"}
    assert await _fullmatching("ünï.*", ids) == {"ünï-çødé"}
    assert await _fullmatching("x", []) == set()
