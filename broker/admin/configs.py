"""DescribeConfigs, AlterConfigs and IncrementalAlterConfigs (topic configs; broker configs
are static: shown, never altered)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import fields
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.config import SENSITIVE_KEYS, TOPIC_DEFAULT_KEYS, BrokerConfig, is_sensitive
from broker.groups.share.group_configs import InvalidGroupConfig
from broker.metadata import topic_config
from broker.metadata.controller_client import ControllerRefused
from broker.security import access
from common import topic_config_keys
from common.acl import AclOperation
from common.topic_config_validation import LIST_KEYS, InvalidConfig
from common.topic_names import topic_name_error
from controller.broker_config_admin import DYNAMIC_BROKER_KEYS, dynamic_value
from controller.image import DISKLESS_ENABLE, TopicImage
from controller.migration import configured, describe_entries
from storage.catalog import TopicNotFound

if TYPE_CHECKING:
    from broker.metadata.view import HandlerView
    from broker.security.request_context import RequestContext

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
# Group configs: share and consumer groups' (broker/groups/share/group_configs.py).
RESOURCE_GROUP = 32
# Never shown (broker/config.py is_sensitive): passwords, JAAS configs, a DSN's password.
SENSITIVE_BROKER_KEYS = SENSITIVE_KEYS
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3


def _topic_configs(
    broker: HandlerView, name: str, keys: Any, with_synonyms: bool, with_docs: bool
) -> list[dict[str, Any]]:
    topic = broker.topics.get(name)
    assert topic is not None
    controller = broker.controller
    image_topic = None if controller is None else controller.image.topic_by_id(topic.topic_id)
    # What the operator set (a migration's target included), not the kind it still has.
    explicit = topic.configs if image_topic is None else configured(image_topic)
    out = []
    for key in sorted(topic_config_keys.KEYS):
        if keys is not None and key not in keys:
            continue
        spec = topic_config_keys.KEYS[key]
        if spec.extra and key not in explicit:
            continue  # not a Kafka topic config: listed only where it is set
        resolved = topic_config.resolve(broker.config, explicit, key)
        out.append(
            {
                "name": key,
                "value": resolved.value,
                "read_only": key == DISKLESS_ENABLE,
                "is_default": resolved.source == topic_config.SOURCE_DEFAULT,
                "config_source": resolved.source,
                "is_sensitive": False,
                "synonyms": [
                    {"name": s.name, "value": s.value, "source": s.source}
                    for s in resolved.synonyms
                ]
                if with_synonyms
                else [],
                "config_type": spec.type,
                "documentation": spec.doc if with_docs else None,
            }
        )
    if image_topic is not None:
        out += _migration_entries(image_topic, keys)
    return out


def _migration_entries(image_topic: TopicImage, keys: Any) -> list[dict[str, Any]]:
    """A migration's progress (controller.migration): read-only entries beside the
    configs, as Kafka shows its own synthetic ones."""
    return [
        {
            "name": key,
            "value": value,
            "read_only": True,
            "is_default": False,
            "config_source": topic_config.SOURCE_DYNAMIC_TOPIC,
            "is_sensitive": False,
            "synonyms": [],
            "config_type": topic_config_keys.STRING,
            "documentation": None,
        }
        for key, value in describe_entries(image_topic).items()
        if keys is None or key in keys
    ]


# Kafka's DescribeConfigs sources of a broker config set at run time.
SOURCE_DYNAMIC_BROKER = 2
SOURCE_DYNAMIC_DEFAULT_BROKER = 3
# dynamic_value's "where" -> the source DescribeConfigs shows.
_DYNAMIC_SOURCES = {
    "broker": SOURCE_DYNAMIC_BROKER,
    "default": SOURCE_DYNAMIC_DEFAULT_BROKER,
    "": topic_config.SOURCE_DEFAULT,
}


def _dynamic_broker_configs(broker: HandlerView, name: str, keys: Any) -> list[dict[str, Any]]:
    """The run-time broker configs (controller.broker_config_admin): this broker's value,
    else the cluster default's, else Kafka's default; "" names the cluster default itself."""
    controller = broker.controller
    if controller is None:
        return []
    out = []
    for key in sorted(DYNAMIC_BROKER_KEYS):
        if keys is not None and key not in keys:
            continue
        node = None if name == "" else broker.config.node_id
        value, where = dynamic_value(controller.image, node, key)
        out.append(
            {
                "name": key,
                "value": str(value),
                "read_only": False,
                "is_default": not where,
                "config_source": _DYNAMIC_SOURCES[where],
                "is_sensitive": False,
                "synonyms": [],
                "config_type": topic_config_keys.LONG,
            }
        )
    return out


# Kafka's types of the Kafka broker configs Sluice has whose Python type does not say it
# (an int is INT unless listed here or named *.ms / *.bytes, which are mostly LONG).
_LONG_BROKER_KEYS = frozenset({"log.retention.check.interval.ms", "offsets.retention.minutes"})
_INT_BROKER_KEYS = frozenset(
    {
        "message.max.bytes",
        "socket.request.max.bytes",
        "replica.fetch.max.bytes",
        "replica.fetch.response.max.bytes",
        "replica.fetch.wait.max.ms",
        "replica.fetch.backoff.ms",
        "replica.socket.timeout.ms",
        "group.min.session.timeout.ms",
        "group.max.session.timeout.ms",
        "group.initial.rebalance.delay.ms",
        "group.consumer.session.timeout.ms",
        "group.consumer.heartbeat.interval.ms",
        "group.consumer.min.session.timeout.ms",
        "group.consumer.max.session.timeout.ms",
        "group.consumer.min.heartbeat.interval.ms",
        "group.consumer.max.heartbeat.interval.ms",
        "offsets.commit.timeout.ms",
        "transaction.max.timeout.ms",
        "transactional.id.expiration.ms",
        "broker.heartbeat.interval.ms",
        "broker.session.timeout.ms",
        "producer.id.expiration.ms",
        "connections.max.unauthenticated.ms",
    }
)


def _broker_type(key: str, value: Any) -> int:
    if isinstance(value, bool):
        return topic_config_keys.BOOLEAN
    if isinstance(value, int):
        if key in _LONG_BROKER_KEYS:
            return topic_config_keys.LONG
        if key in _INT_BROKER_KEYS or not key.endswith((".ms", ".bytes")):
            return topic_config_keys.INT
        return topic_config_keys.LONG
    if isinstance(value, float):
        return topic_config_keys.DOUBLE
    return topic_config_keys.STRING


def _shown(value: Any) -> str | None:
    if value is None:
        return None
    return str(value).lower() if isinstance(value, bool) else str(value)


def _static_entry(
    key: str,
    value: str | None,
    default: str | None,
    type_: int,
    with_synonyms: bool,
    named: bool = False,
) -> dict[str, Any]:
    """One static broker config as Kafka describes it: source STATIC_BROKER_CONFIG when set
    (named in the configuration, or a value other than the default), else DEFAULT_CONFIG;
    synonyms the set value, then the default (Kafka's order), when asked for."""
    sensitive = is_sensitive(key)
    synonyms = []
    if value is not None and (named or value != default):
        synonyms.append(
            {
                "name": key,
                "value": None if sensitive else value,
                "source": topic_config.SOURCE_STATIC_BROKER,
            }
        )
    if default is not None:
        synonyms.append(
            {
                "name": key,
                "value": None if sensitive else default,
                "source": topic_config.SOURCE_DEFAULT,
            }
        )
    return {
        "name": key,
        "value": None if sensitive else value,
        # Static: changing it means editing the broker's config and restarting it (the
        # dynamic ones are _dynamic_broker_configs').
        "read_only": True,
        "is_default": not synonyms or synonyms[0]["source"] == topic_config.SOURCE_DEFAULT,
        "config_source": synonyms[0]["source"] if synonyms else topic_config.SOURCE_DEFAULT,
        "is_sensitive": sensitive,
        "synonyms": synonyms if with_synonyms else [],
        "config_type": type_,
    }


def _broker_configs(config: BrokerConfig, keys: Any, with_synonyms: bool) -> list[dict[str, Any]]:
    out = []
    for f in fields(config):
        key = f.name.replace("_", ".")
        if f.name in ("listener_name_configs", "topic_defaults", "named_keys"):
            continue  # per-listener overrides and topic defaults are listed by their keys
        if keys is not None and key not in keys:
            continue
        value = getattr(config, f.name)
        out.append(
            _static_entry(
                key,
                _shown(value),
                _shown(f.default),
                _broker_type(key, f.default if value is None else value),
                with_synonyms,
                key in config.named_keys,
            )
        )
    # Kafka's broker-level topic defaults (log.retention.hours, ...), set or not: Kafka
    # lists every broker config, an unset one with a null value.
    set_defaults = dict(config.topic_defaults)
    for key in sorted(TOPIC_DEFAULT_KEYS):
        if keys is not None and key not in keys:
            continue
        topic_key, factor = TOPIC_DEFAULT_KEYS[key]
        spec = topic_config_keys.KEYS[topic_key]
        default = (
            spec.broker_default[1]
            if spec.broker_default and spec.broker_default[0] == key
            else None
        )
        type_ = topic_config_keys.INT if factor != 1 else spec.type
        out.append(
            _static_entry(
                key,
                set_defaults.get(key, default),
                default,
                type_,
                with_synonyms,
                key in set_defaults,
            )
        )
    return out


async def describe_configs(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    with_docs = getattr(request, "include_documentation", False)
    with_synonyms = getattr(request, "include_synonyms", False)
    results = []
    await broker.topics.ensure(
        (r.resource_name, None) for r in request.resources if r.resource_type == RESOURCE_TOPIC
    )
    for res in request.resources:
        entry: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": res.resource_type,
            "resource_name": res.resource_name,
            "configs": [],
        }
        results.append(entry)
        keys = set(res.configuration_keys) if res.configuration_keys is not None else None
        if denied := _denied(broker, ctx, res, AclOperation.DESCRIBE_CONFIGS):
            entry.update(error_code=denied)
            continue
        if res.resource_type == RESOURCE_TOPIC:
            if (reason := topic_name_error(res.resource_name)) is not None:
                entry.update(
                    error_code=int(ErrorCode.invalid_topic_exception), error_message=reason
                )
            elif broker.topics.get(res.resource_name) is None:
                entry.update(
                    error_code=int(ErrorCode.unknown_topic_or_partition),
                    error_message=f"Topic '{res.resource_name}' does not exist.",
                )
            else:
                entry["configs"] = _topic_configs(
                    broker, res.resource_name, keys, with_synonyms, with_docs
                )
        elif res.resource_type == RESOURCE_BROKER:
            if res.resource_name not in ("", str(broker.config.node_id)):
                entry.update(
                    error_code=int(ErrorCode.invalid_request),
                    error_message=f"Unexpected broker id {res.resource_name!r}",
                )
            else:
                # The cluster default ("") has no static configs (Kafka lists its dynamic
                # defaults only).
                static = (
                    _broker_configs(broker.config, keys, with_synonyms) if res.resource_name else []
                )
                entry["configs"] = static + _dynamic_broker_configs(broker, res.resource_name, keys)
        elif res.resource_type == RESOURCE_GROUP:
            share_configs = broker.share.configs  # type: ignore[attr-defined]
            entry["configs"] = await share_configs.describe(
                res.resource_name, keys, with_docs, with_synonyms
            )
        else:
            entry.update(
                error_code=int(ErrorCode.invalid_request),
                error_message=f"Unsupported resource type {res.resource_type}",
            )
    return ctx.respond({"throttle_time": 0, "results": results})


class _Refused(Exception):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _apply(current: dict[str, str], name: str, op: int, value: str | None) -> str | None:
    """One IncrementalAlterConfigs operation: the key's new override (None: removed)."""
    if op not in (OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT):
        raise _Refused(ErrorCode.invalid_request, f"Unknown config operation {op}")
    if name not in topic_config_keys.KEYS:
        raise InvalidConfig(f"Unknown topic config name: {name}")
    if op == OP_SET:
        if value is None:
            raise _Refused(ErrorCode.invalid_request, f"Null value not supported for : {name}")
        return value
    if op == OP_DELETE:
        return None
    if name not in LIST_KEYS:
        raise InvalidConfig(f"Config {name} is not a list: APPEND/SUBTRACT do not apply")
    items = [v.strip() for v in current.get(name, "").split(",") if v.strip()]
    given = [v.strip() for v in (value or "").split(",") if v.strip()]
    if op == OP_APPEND:
        items += [v for v in given if v not in items]
    else:
        items = [v for v in items if v not in given]
    return ",".join(items) if items else None


def _replace_all(explicit: Mapping[str, str], given: Any) -> dict[str, str | None]:
    """AlterConfigs: the topic's overrides become exactly the given ones; a key left out
    goes back to its default, as on Kafka. Except ``diskless.enable``: it is the topic's
    kind (read-only in DescribeConfigs, so tools that replay a describe leave it out), and
    dropping it would start a migration nobody asked for. Named, it migrates as with
    IncrementalAlterConfigs."""
    changes: dict[str, str | None] = {key: None for key in explicit if key != DISKLESS_ENABLE}
    for config in given:
        if config.value is None:
            raise _Refused(
                ErrorCode.invalid_request, f"Null value not supported for : {config.name}"
            )
        changes[config.name] = config.value
    return changes


async def _alter_broker_resource(broker: HandlerView, res: Any, validate_only: bool) -> None:
    """A BROKER resource: the dynamic keys go to the controller (controller mode), for one
    broker or ("" name) the cluster default; anything else is refused as static."""
    controller = broker.controller
    if controller is None:
        _refuse_broker_resource(broker, res.resource_name, [c.name for c in res.configs])
        return
    values: dict[str, str | None] = {}
    replace = False
    for c in res.configs:
        op = getattr(c, "config_operation", None)
        if op is None:  # AlterConfigs: the resource's dynamic configs become these
            replace = True
            values[c.name] = c.value
        elif op == OP_SET:
            if c.value is None:
                raise _Refused(
                    ErrorCode.invalid_request, f"Null value not supported for : {c.name}"
                )
            values[c.name] = c.value
        elif op == OP_DELETE:
            values[c.name] = None
        elif op in (OP_APPEND, OP_SUBTRACT):
            raise InvalidConfig(f"Config {c.name} is not a list: APPEND/SUBTRACT do not apply")
        else:
            raise _Refused(ErrorCode.invalid_request, f"Unknown config operation {op}")
    await controller.alter_broker_configs(res.resource_name, values, replace, validate_only)


def _refuse_broker_resource(broker: HandlerView, name: str, keys: list[str]) -> None:
    if name not in ("", str(broker.config.node_id)):
        raise _Refused(ErrorCode.invalid_request, f"Unexpected broker id {name!r}")
    if keys:
        # Kafka's answer for configs that exist only in the broker's properties file.
        raise _Refused(
            ErrorCode.invalid_request,
            f"Cannot update these configs dynamically: {sorted(keys)}: Sluice's broker "
            "configs are static (config file, SLUICE_* variables, -o)",
        )


def _denied(broker: HandlerView, ctx: RequestContext, res: Any, operation: AclOperation) -> int:
    """The authorization error for a config resource, 0 when allowed: topic configs are
    the topic's, broker configs the cluster's (as Kafka checks them)."""
    if not access.enabled(broker):
        return 0
    if res.resource_type == RESOURCE_TOPIC:
        return access.topic_error(broker, ctx, operation, res.resource_name)
    if res.resource_type == RESOURCE_BROKER and not access.cluster(broker, ctx, operation):
        return int(ErrorCode.cluster_authorization_failed)
    if res.resource_type == RESOURCE_GROUP and not access.group(
        broker, ctx, operation, res.resource_name
    ):
        return int(ErrorCode.group_authorization_failed)
    return 0


async def _alter(
    broker: HandlerView,
    ctx: RequestContext,
    request: Any,
    changes_of: Callable[[dict[str, str], Mapping[str, str], Any], dict[str, str | None]],
) -> list[dict[str, Any]]:
    responses = []
    await broker.topics.ensure(
        (r.resource_name, None) for r in request.resources if r.resource_type == RESOURCE_TOPIC
    )
    seen = Counter((r.resource_type, r.resource_name) for r in request.resources)
    for res in request.resources:
        entry: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": res.resource_type,
            "resource_name": res.resource_name,
        }
        responses.append(entry)
        try:
            if seen[(res.resource_type, res.resource_name)] > 1:
                raise _Refused(ErrorCode.invalid_request, "Duplicate resource in request")
            if denied := _denied(broker, ctx, res, AclOperation.ALTER_CONFIGS):
                entry.update(error_code=denied)
                continue
            names = [c.name for c in res.configs]
            if len(set(names)) != len(names):
                raise _Refused(ErrorCode.invalid_request, "Duplicate config keys in request")
            if res.resource_type == RESOURCE_BROKER:
                await _alter_broker_resource(broker, res, request.validate_only)
                continue
            if res.resource_type == RESOURCE_GROUP:
                share_configs = broker.share.configs  # type: ignore[attr-defined]
                await share_configs.alter_resource(
                    res.resource_name, res.configs, request.validate_only
                )
                continue
            if res.resource_type != RESOURCE_TOPIC:
                raise _Refused(
                    ErrorCode.invalid_request, f"Unsupported resource type {res.resource_type}"
                )
            topic = broker.topics.get(res.resource_name)
            if topic is None:
                raise _Refused(
                    ErrorCode.unknown_topic_or_partition,
                    f"Topic '{res.resource_name}' does not exist.",
                )
            changes = changes_of(broker.topics.config(topic), topic.configs, res.configs)
            await broker.topics.alter_configs(res.resource_name, changes, request.validate_only)
        except _Refused as exc:
            entry.update(error_code=int(exc.code), error_message=exc.message)
        except (InvalidConfig, InvalidGroupConfig) as exc:
            entry.update(error_code=int(ErrorCode.invalid_config), error_message=str(exc))
        except TopicNotFound:
            entry.update(error_code=int(ErrorCode.unknown_topic_or_partition))
        except ControllerRefused as exc:
            entry.update(error_code=int(exc.code), error_message=exc.message)
    return responses


async def incremental_alter_configs(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    def changes(effective: dict[str, str], explicit: Any, given: Any) -> dict[str, str | None]:
        return {c.name: _apply(effective, c.name, c.config_operation, c.value) for c in given}

    responses = await _alter(broker, ctx, request, changes)
    return ctx.respond({"throttle_time": 0, "responses": responses})


async def alter_configs(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    """AlterConfigs (API 33), the pre-KIP-339 form: a resource's configs are replaced as
    a whole, so keys not named lose their override."""

    def changes(effective: dict[str, str], explicit: Any, given: Any) -> dict[str, str | None]:
        return _replace_all(explicit, given)

    responses = await _alter(broker, ctx, request, changes)
    return ctx.respond({"throttle_time": 0, "responses": responses})
