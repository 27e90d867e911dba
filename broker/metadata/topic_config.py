"""Where a topic config's effective value comes from (DescribeConfigs sources and synonyms):
the topic's override, then this broker's configs, then Kafka's default. The table of keys
is ``common.topic_config_keys``, the rules a value must pass ``common.topic_config_validation``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, fields

from broker.config import BrokerConfig
from common.topic_config_keys import KEYS

__all__ = ["Resolved", "Synonym", "effective", "int_config", "resolve", "timestamp_bounds"]

# DescribeConfigs config sources.
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5


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
    """A broker config this broker sets: a broker-level topic default (log.retention.hours,
    ...) as written, or a BrokerConfig field set away from its default."""
    for key, value in broker.topic_defaults:
        if key == name:
            return value
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
    # The broker's synonyms as Kafka lists them: the set ones, then the default, from the
    # first one named after the key's primary broker config on (Kafka drops those before
    # it; so with log.retention.ms unset, log.retention.hours is not listed either).
    from_broker: list[Synonym] = []
    for synonym, _ in key.synonyms:
        value = _broker_value(broker, synonym)
        if value is not None:
            from_broker.append(Synonym(synonym, value, SOURCE_STATIC_BROKER))
    if key.broker_default is not None:
        from_broker.append(Synonym(*key.broker_default, SOURCE_DEFAULT))
    primary = key.synonyms[0][0] if key.synonyms else None
    while from_broker and from_broker[0].name != primary:
        from_broker.pop(0)
    synonyms += from_broker
    if name in explicit:
        return Resolved(explicit[name], SOURCE_DYNAMIC_TOPIC, tuple(synonyms))
    # The source is the first synonym's, as Kafka reports it: so a value set by
    # log.retention.hours (dropped from the synonyms above) shows as DEFAULT_CONFIG.
    source = synonyms[0].source if synonyms else SOURCE_DEFAULT
    for synonym, factor in key.synonyms:
        value = _broker_value(broker, synonym)
        if value is not None:
            shown = str(int(value) * factor) if factor != 1 else value
            return Resolved(shown, source, tuple(synonyms))
    return Resolved(key.default, source, tuple(synonyms))


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
