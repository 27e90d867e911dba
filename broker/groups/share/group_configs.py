"""Group configs (Kafka's GroupConfig): share groups' ``share.*`` keys and KIP-848 consumer
groups' ``consumer.session.timeout.ms`` / ``consumer.heartbeat.interval.ms``, set with
IncrementalAlterConfigs / AlterConfigs on a GROUP resource and shown by DescribeConfigs
(``kafka-configs.sh --entity-type groups``). A group without a setting uses the broker's
``group.share.*`` / ``group.consumer.*`` default; ``share.auto.offset.reset`` defaults to
latest and ``share.isolation.level`` to read_uncommitted, as Kafka. The consumer keys are
bounded by ``group.consumer.min/max.session.timeout.ms`` and
``group.consumer.min/max.heartbeat.interval.ms``, with Kafka's messages.

They are kept in the coordinator database (``storage.share_groups``), so every broker
serving the group's share-partitions applies them; a broker reads them again after
``CACHE_S``.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

from broker.groups.share.partition_state import Limits

if TYPE_CHECKING:
    from storage.share_groups import ShareStateStore

CACHE_S = 1.0
_CACHE_PRUNE_AT = 10_000
OP_SET = 0
OP_DELETE = 1
# DescribeConfigs' config types and sources.
TYPE_STRING = 2
TYPE_INT = 3
SOURCE_GROUP = 8
SOURCE_DEFAULT = 5

EARLIEST = "earliest"
LATEST = "latest"
BY_DURATION = "by_duration:"
READ_COMMITTED = "read_committed"
READ_UNCOMMITTED = "read_uncommitted"
# Java's Duration.parse: PnDTnHnMn.nS, every part optional (at least one).
_DURATION = re.compile(
    r"P(?:(?P<d>\d+)D)?(?:T(?:(?P<h>\d+)H)?(?:(?P<m>\d+)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?",
    re.IGNORECASE,
)


CONSUMER_SESSION_TIMEOUT = "consumer.session.timeout.ms"
CONSUMER_HEARTBEAT_INTERVAL = "consumer.heartbeat.interval.ms"
CONSUMER_ASSIGNMENT_INTERVAL = "consumer.assignment.interval.ms"


@dataclass(frozen=True, slots=True)
class ShareConfig:
    """The broker's defaults (and bounds) of every group config: the share groups' and,
    since the group configs are one table, the consumer groups' two keys."""

    lock_ms: int = 30_000
    delivery_count_limit: int = 5
    session_timeout_ms: int = 45_000
    heartbeat_interval_ms: int = 5_000
    max_record_locks: int = 2000
    consumer_session_timeout_ms: int = 45_000
    consumer_heartbeat_interval_ms: int = 5000
    consumer_session_bounds: tuple[int, int] = (45_000, 60_000)
    consumer_heartbeat_bounds: tuple[int, int] = (5000, 15_000)
    assignment_interval_ms: int = 1000
    assignment_interval_bounds: tuple[int, int] = (0, 15_000)
    consumer_assignment_interval_ms: int = 1000
    consumer_assignment_interval_bounds: tuple[int, int] = (0, 15_000)

    @classmethod
    def from_broker(cls, config: Any) -> ShareConfig:
        return cls(
            config.group_share_record_lock_duration_ms,
            config.group_share_delivery_count_limit,
            config.group_share_session_timeout_ms,
            config.group_share_heartbeat_interval_ms,
            config.group_share_partition_max_record_locks,
            config.group_consumer_session_timeout_ms,
            config.group_consumer_heartbeat_interval_ms,
            (
                config.group_consumer_min_session_timeout_ms,
                config.group_consumer_max_session_timeout_ms,
            ),
            (
                config.group_consumer_min_heartbeat_interval_ms,
                config.group_consumer_max_heartbeat_interval_ms,
            ),
            config.group_share_assignment_interval_ms,
            (
                config.group_share_min_assignment_interval_ms,
                config.group_share_max_assignment_interval_ms,
            ),
            config.group_consumer_assignment_interval_ms,
            (
                config.group_consumer_min_assignment_interval_ms,
                config.group_consumer_max_assignment_interval_ms,
            ),
        )

    @property
    def limits(self) -> Limits:
        return Limits(self.lock_ms, self.delivery_count_limit, self.max_record_locks)


class InvalidGroupConfig(ValueError):
    pass


def duration_ms(text: str) -> int:
    match = _DURATION.fullmatch(text)
    if match is None or not any(match.groupdict().values()) or text.upper().endswith("T"):
        raise InvalidGroupConfig(f"{text!r} is not an ISO-8601 duration (PnDTnHnMn.nS)")
    d, h, m, s = (match.group(k) for k in "dhms")
    seconds = int(d or 0) * 86400 + int(h or 0) * 3600 + int(m or 0) * 60 + float(s or 0)
    return int(seconds * 1000)


def _reset(value: str) -> str:
    lowered = value.strip().lower()
    if lowered in (EARLIEST, LATEST):
        return lowered
    if lowered.startswith(BY_DURATION):
        duration_ms(value.strip()[len(BY_DURATION) :])
        return BY_DURATION + value.strip()[len(BY_DURATION) :]
    raise InvalidGroupConfig(
        f"share.auto.offset.reset must be earliest, latest or by_duration:<duration>, not {value!r}"
    )


def _isolation(value: str) -> str:
    if value not in (READ_COMMITTED, READ_UNCOMMITTED):
        raise InvalidGroupConfig(
            f"share.isolation.level must be {READ_COMMITTED} or {READ_UNCOMMITTED}"
        )
    return value


def _int_between(low: int, high: int) -> Callable[[str, ShareConfig], str]:
    def check(value: str, config: ShareConfig) -> str:
        try:
            number = int(value)
        except ValueError:
            raise InvalidGroupConfig(f"{value!r} is not an integer") from None
        if not low <= number <= high:
            raise InvalidGroupConfig(f"{number} is not in [{low}, {high}]")
        return str(number)

    return check


def _bounded(bounds: Callable[[ShareConfig], tuple[int, int]]) -> Callable[[str, ShareConfig], str]:
    """An integer within bounds the broker's configs set."""

    def check(value: str, config: ShareConfig) -> str:
        return _int_between(*bounds(config))(value, config)

    return check


_INT = re.compile(r"[+-]?\d+")


def _consumer_ms(
    key: str, bounds: Callable[[ShareConfig], tuple[int, int]]
) -> Callable[[str, ShareConfig], str]:
    """Kafka's two checks, with its messages: the key's type and minimum (1), then the
    broker's group.consumer.min/max bounds."""

    def check(value: str, config: ShareConfig) -> str:
        text = value.strip()
        if not _INT.fullmatch(text) or not -(2**31) <= int(text) < 2**31:
            raise InvalidGroupConfig(
                f"Invalid value {value} for configuration {key}: Not a number of type INT"
            )
        number = int(text)
        if number < 1:
            raise InvalidGroupConfig(
                f"Invalid value {value} for configuration {key}: Value must be at least 1"
            )
        low, high = bounds(config)
        if not low <= number <= high:
            raise InvalidGroupConfig(f"{key} must be in the range {low} to {high} inclusive.")
        return str(number)

    return check


@dataclass(frozen=True, slots=True)
class _Key:
    type: int
    check: Callable[[str, ShareConfig], str]
    default: Callable[[ShareConfig], str]
    doc: str
    # The broker config whose value is the default, DescribeConfigs' default synonym (as
    # Kafka names it); None: the key itself (a fixed default).
    broker_key: str | None = None


KEYS: dict[str, _Key] = {
    CONSUMER_SESSION_TIMEOUT: _Key(
        TYPE_INT,
        _consumer_ms(CONSUMER_SESSION_TIMEOUT, lambda c: c.consumer_session_bounds),
        lambda c: str(c.consumer_session_timeout_ms),
        "A consumer-protocol member silent this long is fenced.",
        "group.consumer.session.timeout.ms",
    ),
    CONSUMER_HEARTBEAT_INTERVAL: _Key(
        TYPE_INT,
        _consumer_ms(CONSUMER_HEARTBEAT_INTERVAL, lambda c: c.consumer_heartbeat_bounds),
        lambda c: str(c.consumer_heartbeat_interval_ms),
        "The heartbeat interval consumer-protocol members are told.",
        "group.consumer.heartbeat.interval.ms",
    ),
    CONSUMER_ASSIGNMENT_INTERVAL: _Key(
        TYPE_INT, _bounded(lambda c: c.consumer_assignment_interval_bounds),
        lambda c: str(c.consumer_assignment_interval_ms),
        "The least time between two computations of a consumer group's target assignment.",
        "group.consumer.assignment.interval.ms",
    ),
    "share.assignment.interval.ms": _Key(
        TYPE_INT, _bounded(lambda c: c.assignment_interval_bounds),
        lambda c: str(c.assignment_interval_ms),
        "The least time between two computations of the group's target assignment.",
        "group.share.assignment.interval.ms",
    ),
    "share.auto.offset.reset": _Key(
        TYPE_STRING, lambda v, c: _reset(v), lambda c: LATEST,
        "Where a share-partition starts: earliest, latest or by_duration:<ISO-8601 duration>.",
    ),
    "share.isolation.level": _Key(
        TYPE_STRING, lambda v, c: _isolation(v), lambda c: READ_UNCOMMITTED,
        "read_committed: only committed transactional records are delivered.",
    ),
    "share.record.lock.duration.ms": _Key(
        TYPE_INT, _int_between(1000, 3_600_000), lambda c: str(c.lock_ms),
        "How long a delivered record stays locked to its consumer.",
        "group.share.record.lock.duration.ms",
    ),
    "share.delivery.count.limit": _Key(
        TYPE_INT, _int_between(2, 10), lambda c: str(c.delivery_count_limit),
        "Deliveries of a record before it is archived.", "group.share.delivery.count.limit",
    ),
    "share.partition.max.record.locks": _Key(
        TYPE_INT, _int_between(100, 10_000), lambda c: str(c.max_record_locks),
        "Records in flight per share-partition.", "group.share.partition.max.record.locks",
    ),
    "share.session.timeout.ms": _Key(
        TYPE_INT, _int_between(1000, 3_600_000), lambda c: str(c.session_timeout_ms),
        "A member silent this long leaves the group.", "group.share.session.timeout.ms",
    ),
    "share.heartbeat.interval.ms": _Key(
        TYPE_INT, _int_between(500, 3_600_000), lambda c: str(c.heartbeat_interval_ms),
        "How often members heartbeat.", "group.share.heartbeat.interval.ms",
    ),
}  # fmt: skip


class ConsumerTimings(NamedTuple):
    """A consumer group's session timeout, heartbeat interval and assignment interval (its
    own or the broker's)."""

    session_timeout_ms: int
    heartbeat_interval_ms: int
    assignment_interval_ms: int


def consumer_timings(config: ShareConfig, set_on_group: Mapping[str, str]) -> ConsumerTimings:
    session = set_on_group.get(CONSUMER_SESSION_TIMEOUT)
    interval = set_on_group.get(CONSUMER_HEARTBEAT_INTERVAL)
    assignment = set_on_group.get(CONSUMER_ASSIGNMENT_INTERVAL)
    return ConsumerTimings(
        int(session) if session else config.consumer_session_timeout_ms,
        int(interval) if interval else config.consumer_heartbeat_interval_ms,
        int(assignment) if assignment else config.consumer_assignment_interval_ms,
    )


@dataclass(frozen=True, slots=True)
class ShareSettings:
    """A group's effective share settings."""

    auto_offset_reset: str
    read_committed: bool
    limits: Limits
    session_timeout_ms: int
    heartbeat_interval_ms: int
    assignment_interval_ms: int


def settings(config: ShareConfig, set_on_group: Mapping[str, str]) -> ShareSettings:
    def value(key: str) -> str:
        return set_on_group.get(key) or KEYS[key].default(config)

    return ShareSettings(
        value("share.auto.offset.reset"),
        value("share.isolation.level") == READ_COMMITTED,
        Limits(
            int(value("share.record.lock.duration.ms")),
            int(value("share.delivery.count.limit")),
            int(value("share.partition.max.record.locks")),
        ),
        int(value("share.session.timeout.ms")),
        int(value("share.heartbeat.interval.ms")),
        int(value("share.assignment.interval.ms")),
    )


class GroupConfigs:
    """The groups' configs as this broker reads them (cached ``CACHE_S``)."""

    def __init__(self, config: ShareConfig, store: ShareStateStore) -> None:
        self.config = config
        self.store = store
        self._cache: dict[str, tuple[float, dict[str, str]]] = {}

    async def set_on(self, group_id: str) -> dict[str, str]:
        cached = self._cache.get(group_id)
        now = time.monotonic()
        if cached is not None and cached[0] > now:
            return cached[1]
        found = await self.store.group_configs(group_id)
        if len(self._cache) >= _CACHE_PRUNE_AT:
            # Every consumer group's heartbeats read here too: forget the groups not asked
            # about for a while.
            self._cache = {g: entry for g, entry in self._cache.items() if entry[0] > now}
        self._cache[group_id] = (now + CACHE_S, found)
        return found

    async def consumer_timings(self, group_id: str) -> ConsumerTimings:
        return consumer_timings(self.config, await self.set_on(group_id))

    async def settings(self, group_id: str) -> ShareSettings:
        return settings(self.config, await self.set_on(group_id))

    def validate(self, changes: Mapping[str, str | None]) -> dict[str, str | None]:
        out: dict[str, str | None] = {}
        for key, value in changes.items():
            spec = KEYS.get(key)
            if spec is None:
                raise InvalidGroupConfig(f"Unknown group config name: {key}")
            out[key] = None if value is None else spec.check(value, self.config)
        return out

    async def alter(self, group_id: str, changes: Mapping[str, str | None]) -> None:
        await self.store.alter_group_configs(group_id, self.validate(changes))
        self._cache.pop(group_id, None)

    async def alter_resource(self, group_id: str, given: Any, validate_only: bool) -> None:
        """An IncrementalAlterConfigs (SET, DELETE: no group config is a list) or an
        AlterConfigs (the group's settings become exactly the given ones) of a GROUP."""
        current = await self.store.group_configs(group_id)
        changes: dict[str, str | None] = {}
        for entry in given:
            op = getattr(entry, "config_operation", None)
            if op is None:  # AlterConfigs
                changes = changes or {key: None for key in current}
                changes[entry.name] = entry.value
            elif op == OP_SET and entry.value is not None:
                changes[entry.name] = entry.value
            elif op == OP_DELETE:
                changes[entry.name] = None
            else:
                raise InvalidGroupConfig(f"Operation {op} does not apply to {entry.name}")
        if validate_only:
            self.validate(changes)
        else:
            await self.alter(group_id, changes)

    async def describe(
        self, group_id: str, keys: Any, with_docs: bool, with_synonyms: bool
    ) -> list[dict[str, Any]]:
        set_on = await self.set_on(group_id)
        out = []
        for key in sorted(KEYS):
            if keys is not None and key not in keys:
                continue
            spec = KEYS[key]
            default = spec.default(self.config)
            synonyms = [
                {"name": spec.broker_key or key, "value": default, "source": SOURCE_DEFAULT}
            ]
            if key in set_on:
                synonyms.insert(0, {"name": key, "value": set_on[key], "source": SOURCE_GROUP})
            out.append(
                {
                    "name": key,
                    "value": set_on.get(key, default),
                    "read_only": False,
                    "is_default": key not in set_on,
                    "config_source": SOURCE_GROUP if key in set_on else SOURCE_DEFAULT,
                    "is_sensitive": False,
                    "synonyms": synonyms if with_synonyms else [],
                    "config_type": spec.type,
                    "documentation": spec.doc if with_docs else None,
                }
            )
        return out
