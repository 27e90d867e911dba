"""Topic configs: validation as Kafka does it, defaults, and where an effective value comes
from (DescribeConfigs sources and synonyms). The table of keys is ``topic_config_keys``.

Both paths validate here: the broker before it writes or forwards a change, and the
controller (``controller/service.py``) before it records one.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, fields

from .config import BrokerConfig
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

__all__ = ["KEYS", "InvalidConfig", "Key", "effective", "int_config", "resolve", "validate"]

# DescribeConfigs config sources.
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5

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


@dataclass(frozen=True)
class Synonym:
    name: str
    value: str
    source: int


@dataclass(frozen=True)
class Resolved:
    """One key's effective value for a topic, with where it comes from (Kafka's order:
    the topic override, then broker configs, then the built-in default)."""

    value: str
    source: int
    synonyms: tuple[Synonym, ...]


_BROKER_DEFAULTS = {f.name: f.default for f in fields(BrokerConfig)}


def _broker_value(broker: BrokerConfig, name: str) -> str | None:
    """A broker config this broker sets away from its default (only names BrokerConfig
    has; Sluice's broker configs name few of Kafka's log.* defaults)."""
    attr = name.replace(".", "_")
    if attr not in _BROKER_DEFAULTS:
        return None
    value = getattr(broker, attr)
    if value == _BROKER_DEFAULTS[attr]:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def resolve(broker: BrokerConfig, explicit: Mapping[str, str], name: str) -> Resolved:
    key = KEYS[name]
    synonyms: list[Synonym] = []
    if name in explicit:
        synonyms.append(Synonym(name, explicit[name], SOURCE_DYNAMIC_TOPIC))
    for synonym, _ in key.synonyms:
        value = _broker_value(broker, synonym)
        if value is not None:
            synonyms.append(Synonym(synonym, value, SOURCE_STATIC_BROKER))
    if key.broker_default is not None:
        synonyms.append(Synonym(*key.broker_default, SOURCE_DEFAULT))
    if name in explicit:
        return Resolved(explicit[name], SOURCE_DYNAMIC_TOPIC, tuple(synonyms))
    for synonym, factor in key.synonyms:
        value = _broker_value(broker, synonym)
        if value is not None:
            shown = str(int(value) * factor) if factor != 1 else value
            return Resolved(shown, SOURCE_STATIC_BROKER, tuple(synonyms))
    return Resolved(key.default, SOURCE_DEFAULT, tuple(synonyms))


@functools.lru_cache(maxsize=4)
def _defaults(broker: BrokerConfig) -> dict[str, str]:
    # Produce reads configs per request: the broker-derived defaults are computed once.
    return {name: resolve(broker, {}, name).value for name in KEYS}


def effective(broker: BrokerConfig, explicit: Mapping[str, str]) -> dict[str, str]:
    return {**_defaults(broker), **explicit}


def int_config(broker: BrokerConfig, explicit: Mapping[str, str], name: str) -> int:
    value = explicit.get(name)
    return int((value if value is not None else _defaults(broker)[name]).strip())


def timestamp_bounds(broker: BrokerConfig, explicit: Mapping[str, str]) -> tuple[int, int]:
    """(before, after): how far a CreateTime batch timestamp may lie behind or ahead of the
    broker's clock. A topic from Kafka 3.x may carry only the deprecated
    ``message.timestamp.difference.max.ms``: it stands for whichever of the two is not
    set on the topic, as Kafka 3.6+ reads it."""
    legacy = explicit.get("message.timestamp.difference.max.ms")

    def bound(name: str) -> int:
        if name not in explicit and legacy is not None:
            return int(legacy.strip())
        return int_config(broker, explicit, name)

    return bound("message.timestamp.before.max.ms"), bound("message.timestamp.after.max.ms")
