"""Dynamic broker configs (Kafka's IncrementalAlterConfigs / AlterConfigs on a BROKER
resource, as ``kafka-configs.sh --entity-type brokers`` sends them): the few keys Sluice
changes at run time, recorded in the metadata log so every broker applies them, also one
started later or after a controller failover.

Today: the replication throttle rates of Kafka's reassignment tool (``--throttle``):
``leader.replication.throttled.rate`` and ``follower.replication.throttled.rate``, bytes
per second, per broker or as the cluster default (broker ""). Any other key stays static
(the config file) and is refused as Kafka refuses a config it cannot update dynamically.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from .image import MetadataImage
from .records import BrokerDynamicConfig, Record
from .requests import Outcome

LONG_MAX = 2**63 - 1
# key -> Kafka's default (LONG_MAX: no throttle)
DYNAMIC_BROKER_KEYS: dict[str, int] = {
    "leader.replication.throttled.rate": LONG_MAX,
    "follower.replication.throttled.rate": LONG_MAX,
    # The throttle of moves between a broker's log directories (KIP-113). Sluice has one
    # data directory, so there is nothing to throttle; accepted and stored because
    # kafka-reassign-partitions --throttle / --verify set and clear it with the other two.
    "replica.alter.log.dirs.io.max.bytes.per.second": LONG_MAX,
}


@dataclass(frozen=True)
class BrokerConfigAlteration:
    """One BROKER resource of a request: ``broker`` a node id or "" (the cluster default);
    ``values`` the keys to set (a value) or remove (None); ``replace`` (legacy AlterConfigs):
    the resource's dynamic keys not named are removed."""

    broker: str
    values: dict[str, str | None]
    replace: bool = False


@dataclass(frozen=True)
class BrokerConfigResult:
    error_code: int
    error_message: str | None = None


def _problem(image: MetadataImage, alteration: BrokerConfigAlteration) -> tuple[int, str] | None:
    broker = alteration.broker
    if broker and (not broker.isdigit() or int(broker) not in image.brokers):
        return int(ErrorCode.invalid_request), f"Unexpected broker id {broker!r}"
    static = sorted(k for k in alteration.values if k not in DYNAMIC_BROKER_KEYS)
    if static:
        return (
            int(ErrorCode.invalid_request),
            f"Cannot update these configs dynamically: {static}: Sluice's broker configs are "
            f"static (config file) except {sorted(DYNAMIC_BROKER_KEYS)}",
        )
    for key, value in alteration.values.items():
        if value is None:
            continue
        try:
            rate = int(value.strip())
        except ValueError:
            return int(ErrorCode.invalid_config), f"{key} must be a whole number, not {value!r}"
        if not 0 <= rate <= LONG_MAX:
            return int(ErrorCode.invalid_config), f"{key} must be at least 0, not {rate}"
    return None


def alter_broker_configs(
    image: MetadataImage, alterations: Sequence[BrokerConfigAlteration], validate_only: bool
) -> Outcome[list[BrokerConfigResult]]:
    records: list[Record] = []
    results = []
    for alteration in alterations:
        problem = _problem(image, alteration)
        if problem is not None:
            results.append(BrokerConfigResult(*problem))
            continue
        results.append(BrokerConfigResult(int(ErrorCode.none)))
        if validate_only:
            continue
        values = dict(alteration.values)
        if alteration.replace:
            for key in image.broker_configs.get(alteration.broker, {}):
                values.setdefault(key, None)
        for key in sorted(values):
            value = values[key]
            records.append(
                BrokerDynamicConfig(
                    alteration.broker, key, None if value is None else str(int(value.strip()))
                )
            )
    return Outcome(records, results)


def dynamic_value(image: MetadataImage, node_id: int | None, key: str) -> tuple[int, str]:
    """(value, where) of a dynamic broker config for broker ``node_id`` (None: the cluster
    default entity itself): "broker" (its own), "default" (the cluster default) or ""
    (Kafka's default)."""
    if node_id is not None:
        own = image.broker_configs.get(str(node_id), {})
        if key in own:
            return int(own[key]), "broker"
    default = image.broker_configs.get("", {})
    if key in default:
        return int(default[key]), "default"
    return DYNAMIC_BROKER_KEYS[key], ""
