"""Topic configs: which keys exist, their defaults, validation and what is enforced."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from .config import BrokerConfig

LONG_MAX = (1 << 63) - 1  # Java's Long.MAX_VALUE: Kafka's "no limit"


@dataclass(frozen=True)
class ConfigKey:
    name: str
    default: Callable[[BrokerConfig], str]
    validate: Callable[[str], bool]
    doc: str


def _is_int(minimum: int) -> Callable[[str], bool]:
    def check(value: str) -> bool:
        try:
            return int(value) >= minimum
        except ValueError:
            return False

    return check


def _one_of(*choices: str) -> Callable[[str], bool]:
    return lambda value: value in choices


def _policy(value: str) -> bool:
    parts = [p.strip() for p in value.split(",")]
    return bool(parts) and all(p in ("delete", "compact") for p in parts)


KEYS: dict[str, ConfigKey] = {
    k.name: k
    for k in (
        ConfigKey(
            "retention.ms",
            lambda c: "604800000",
            _is_int(-1),
            "Batches older than this are deleted (whole batches); -1 keeps them forever.",
        ),
        ConfigKey(
            "retention.bytes",
            lambda c: "-1",
            _is_int(-1),
            "Oldest batches are deleted while a partition is larger than this; -1: no limit.",
        ),
        ConfigKey(
            "max.message.bytes",
            lambda c: str(c.message_max_bytes),
            _is_int(0),
            "Largest record batch accepted, in bytes.",
        ),
        ConfigKey(
            "message.timestamp.type",
            lambda c: "CreateTime",
            _one_of("CreateTime", "LogAppendTime"),
            "CreateTime keeps the producer's timestamps; LogAppendTime stamps the commit time.",
        ),
        ConfigKey(
            "message.timestamp.before.max.ms",
            lambda c: str(LONG_MAX),
            _is_int(0),
            "CreateTime records older than this (against the broker's clock) are refused "
            "with INVALID_TIMESTAMP.",
        ),
        ConfigKey(
            "message.timestamp.after.max.ms",
            lambda c: "3600000",  # Kafka 4.0's default
            _is_int(0),
            "CreateTime records further than this in the future are refused with "
            "INVALID_TIMESTAMP.",
        ),
        ConfigKey(
            "message.timestamp.difference.max.ms",
            lambda c: str(LONG_MAX),
            _is_int(0),
            "Deprecated: both of the above at once, where they are not set themselves.",
        ),
        ConfigKey(
            "cleanup.policy",
            lambda c: "delete",
            _policy,
            "'delete' drops old batches by retention; 'compact' keeps the latest record per key "
            "when `sluice jobs compact` runs (PySpark); both can be combined.",
        ),
        ConfigKey(
            "delete.retention.ms",
            lambda c: "86400000",
            _is_int(0),
            "How long compaction keeps tombstones (records with a null value).",
        ),
        ConfigKey(
            "min.compaction.lag.ms",
            lambda c: "0",
            _is_int(0),
            "Records younger than this are never compacted.",
        ),
        ConfigKey(
            "diskless.enable",
            lambda c: "true",
            _one_of("true", "false"),
            "Every Sluice topic is diskless; only 'true' is accepted.",
        ),
    )
}


class InvalidConfig(ValueError):
    pass


def validate(configs: Mapping[str, str | None]) -> None:
    for name, value in configs.items():
        key = KEYS.get(name)
        if key is None:
            raise InvalidConfig(f"Unknown topic config name: {name}")
        if value is None:
            continue
        if not key.validate(value):
            raise InvalidConfig(f"Invalid value {value!r} for configuration {name}")
        if name == "diskless.enable" and value != "true":
            raise InvalidConfig("diskless.enable=false is not supported: every topic is diskless")


def effective(broker: BrokerConfig, explicit: Mapping[str, str]) -> dict[str, str]:
    out = {name: key.default(broker) for name, key in KEYS.items()}
    out.update(explicit)
    return out


def int_config(broker: BrokerConfig, explicit: Mapping[str, str], name: str) -> int:
    value = explicit.get(name)
    return int(value if value is not None else KEYS[name].default(broker))
