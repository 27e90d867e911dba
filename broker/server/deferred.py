"""Answers that wait: a handler may return a future the connection writes in order."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


def answer_when_done(future: asyncio.Future[T], respond: Callable[[T], Any]) -> Any:
    """The response now if ``future`` is done, else a future of it.

    The returned future is a new one: the connection cancels it if the client goes
    away, which must not cancel ``future`` (the group coordinator still completes it).
    """
    if future.done():
        return respond(future.result())
    out: asyncio.Future[Any] = asyncio.get_running_loop().create_future()

    def relay(done: asyncio.Future[T]) -> None:
        if out.done():
            return
        if done.cancelled():
            out.cancel()
        elif done.exception() is not None:
            out.set_exception(done.exception())  # type: ignore[arg-type]
        else:
            try:
                out.set_result(respond(done.result()))
            except Exception as exc:
                out.set_exception(exc)

    future.add_done_callback(relay)
    return out
