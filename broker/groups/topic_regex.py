"""KIP-848 regex subscriptions (``SubscribedTopicRegex``): RE2 syntax, as Kafka's RE2/J,
matched against whole topic names. RE2 runs in time linear in the name whatever the
pattern, so a client's regex cannot stall the coordinator (Python's ``re`` backtracks)."""

from __future__ import annotations

import functools
from collections.abc import Iterable
from typing import Any

import re2

_OPTIONS = re2.Options()
_OPTIONS.log_errors = False  # a client's bad pattern is its error, not the broker's log


class InvalidRegex(ValueError):
    pass


@functools.lru_cache(maxsize=1024)
def compile_regex(pattern: str) -> Any:
    try:
        return re2.compile(pattern, _OPTIONS)
    except re2.error as exc:
        detail = exc.args[0].decode(errors="replace") if exc.args else ""
        raise InvalidRegex(detail) from None


def matching(pattern: str, names: Iterable[str]) -> set[str]:
    """The names ``pattern`` matches in full (an invalid pattern matches none)."""
    try:
        regex = compile_regex(pattern)
    except InvalidRegex:
        return set()
    return {name for name in names if regex.fullmatch(name) is not None}
