"""Topic config validation as Kafka does it: unknown names, values of the wrong type or out
of range, and the checks that relate two keys. The table of keys is ``topic_config_keys``.

Both paths validate here: the broker before it writes or forwards a change, and the
controller (``controller/service.py``) before it records one. What a topic's effective
value is, and where it comes from, is the broker's (``broker.metadata.topic_config``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from .topic_config_keys import (
    BOOLEAN,
    DOUBLE,
    INT,
    INT_MAX,
    KEYS,
    LIST,
    LONG,
    LONG_MAX,
    THROTTLED_REPLICA_KEYS,
    Key,
)

__all__ = ["LIST_KEYS", "InvalidConfig", "validate"]

LIST_KEYS = frozenset(name for name, key in KEYS.items() if key.type == LIST)


class InvalidConfig(ValueError):
    pass


def _bad(key: Key, value: str, why: str) -> InvalidConfig:
    return InvalidConfig(f"Invalid value {value} for configuration {key.name}: {why}")


def _check_number(key: Key, value: str) -> None:
    text = value.strip()
    if key.type == DOUBLE:
        try:
            number: float = float(text)
        except ValueError:
            raise _bad(key, value, "Not a number of type DOUBLE") from None
        if math.isnan(number):
            raise _bad(key, value, "Not a number of type DOUBLE")
    else:
        limit = INT_MAX if key.type == INT else LONG_MAX
        not_a_number = _bad(
            key, value, f"Not a number of type {'INT' if key.type == INT else 'LONG'}"
        )
        try:
            number = int(text)
        except ValueError:
            raise not_a_number from None
        # Java's parser takes no digit separators and no values past the type's range.
        if "_" in text or not -limit - 1 <= number <= limit:
            raise not_a_number
    if key.name == "compression.gzip.level" and not (number == -1 or 1 <= number <= 9):
        raise _bad(key, value, "Value must be between 1 and 9, or -1")
    if key.minimum is not None and key.maximum is not None:
        if not key.minimum <= number <= key.maximum:
            raise _bad(key, value, f"Value must be between {_n(key.minimum)} and {_n(key.maximum)}")
    elif key.minimum is not None and number < key.minimum:
        raise _bad(key, value, f"Value must be at least {_n(key.minimum)}")


def _n(bound: float) -> str:
    return str(int(bound)) if float(bound).is_integer() else str(bound)


def _check_value(key: Key, value: str) -> None:
    if key.type in (INT, LONG, DOUBLE):
        _check_number(key, value)
    elif key.type == BOOLEAN:
        if value.strip().lower() not in ("true", "false"):
            raise _bad(key, value, "Expected value to be either true or false")
    elif key.type == LIST:
        items = [v.strip() for v in value.split(",")] if value.strip() else []
        if key.name in THROTTLED_REPLICA_KEYS:
            if items != ["*"] and not all(_is_replica_pair(item) for item in items):
                raise _bad(key, value, "must be '*' or a list of partition:brokerId pairs")
        elif key.choices:
            if not items:
                raise _bad(key, value, "Empty list not allowed")
            for item in items:
                if item not in key.choices:
                    raise _bad(key, value, f"String must be one of: {', '.join(key.choices)}")
    elif key.choices and value.strip() not in key.choices:
        raise _bad(key, value, f"String must be one of: {', '.join(key.choices)}")


def _is_replica_pair(item: str) -> bool:
    partition, sep, broker = item.partition(":")
    return bool(sep) and partition.isdigit() and broker.isdigit()


def validate(changes: Mapping[str, str | None], current: Mapping[str, str] | None = None) -> None:
    """Raise InvalidConfig for an unknown name or a bad value. ``changes`` holds a new
    topic's configs or an alteration (None: remove the override); ``current`` the topic's
    overrides before it, for the checks that relate two keys."""
    for name, value in changes.items():
        key = KEYS.get(name)
        if key is None:
            raise InvalidConfig(f"Unknown topic config name: {name}")
        if value is not None:
            _check_value(key, value)
    merged = {**(current or {}), **changes}
    lag_min, lag_max = merged.get("min.compaction.lag.ms"), merged.get("max.compaction.lag.ms")
    if lag_min is not None and lag_max is not None and int(lag_min) > int(lag_max):
        raise InvalidConfig(
            f"conflict topic config setting min.compaction.lag.ms ({lag_min}) > "
            f"max.compaction.lag.ms ({lag_max})"
        )
