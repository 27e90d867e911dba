"""DescribeConfigs and IncrementalAlterConfigs for topics (broker configs are read-only)."""

from __future__ import annotations

from dataclasses import fields
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from storage.catalog import TopicNotFound

from .. import topic_config
from ..config import BrokerConfig
from ..controller_client import ControllerRefused
from ..topic_config import InvalidConfig

if TYPE_CHECKING:
    from ..node import Broker
    from ..server import RequestContext

RESOURCE_TOPIC = 2
RESOURCE_BROKER = 4
SOURCE_DYNAMIC_TOPIC = 1
SOURCE_STATIC_BROKER = 4
SOURCE_DEFAULT = 5
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT, TYPE_LONG, TYPE_LIST = 1, 2, 3, 5, 7
# Never shown: a DSN carries the database password.
SENSITIVE_BROKER_KEYS = frozenset({"s3.secret.key", "coordinator.dsn", "controller.secret"})
OP_SET, OP_DELETE, OP_APPEND, OP_SUBTRACT = 0, 1, 2, 3

_TOPIC_TYPES = {
    "retention.ms": TYPE_LONG,
    "retention.bytes": TYPE_LONG,
    "max.message.bytes": TYPE_INT,
    "message.timestamp.type": TYPE_STRING,
    "cleanup.policy": TYPE_LIST,
    "diskless.enable": TYPE_BOOLEAN,
    "delete.retention.ms": TYPE_LONG,
    "min.compaction.lag.ms": TYPE_LONG,
}


def _topic_configs(broker: Broker, name: str, keys: Any, with_docs: bool) -> list[dict[str, Any]]:
    topic = broker.topics.get(name)
    assert topic is not None
    out = []
    for key, value in sorted(broker.topics.config(topic).items()):
        if keys is not None and key not in keys:
            continue
        explicit = key in topic.configs
        out.append(
            {
                "name": key,
                "value": value,
                "read_only": key == "diskless.enable",
                "is_default": not explicit,
                "config_source": SOURCE_DYNAMIC_TOPIC if explicit else SOURCE_DEFAULT,
                "is_sensitive": False,
                "synonyms": [],
                "config_type": _TOPIC_TYPES.get(key, TYPE_STRING),
                "documentation": topic_config.KEYS[key].doc if with_docs else None,
            }
        )
    return out


def _broker_configs(config: BrokerConfig, keys: Any) -> list[dict[str, Any]]:
    out = []
    for f in fields(config):
        key = f.name.replace("_", ".")
        if keys is not None and key not in keys:
            continue
        value = getattr(config, f.name)
        sensitive = key in SENSITIVE_BROKER_KEYS
        if sensitive or value is None:
            shown = None
        else:
            shown = str(value).lower() if isinstance(value, bool) else str(value)
        out.append(
            {
                "name": key,
                "value": shown,
                "read_only": True,
                "is_default": value == f.default,
                "config_source": SOURCE_STATIC_BROKER,
                "is_sensitive": sensitive,
                "synonyms": [],
                "config_type": TYPE_STRING,
            }
        )
    return out


async def describe_configs(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    with_docs = getattr(request, "include_documentation", False)
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
        if res.resource_type == RESOURCE_TOPIC:
            if broker.topics.get(res.resource_name) is None:
                entry.update(
                    error_code=int(ErrorCode.unknown_topic_or_partition),
                    error_message=f"Topic '{res.resource_name}' does not exist.",
                )
            else:
                entry["configs"] = _topic_configs(broker, res.resource_name, keys, with_docs)
        elif res.resource_type == RESOURCE_BROKER:
            if res.resource_name not in ("", str(broker.config.node_id)):
                entry.update(
                    error_code=int(ErrorCode.invalid_request),
                    error_message=f"Unexpected broker id {res.resource_name!r}",
                )
            else:
                entry["configs"] = _broker_configs(broker.config, keys)
        else:
            entry.update(
                error_code=int(ErrorCode.invalid_request),
                error_message=f"Unsupported resource type {res.resource_type}",
            )
    return ctx.respond({"throttle_time": 0, "results": results})


def _apply(current: dict[str, str], name: str, op: int, value: str | None) -> str | None:
    if op == OP_SET:
        return value
    if op == OP_DELETE:
        return None
    if name not in ("cleanup.policy",):
        raise InvalidConfig(f"Config {name} is not a list: APPEND/SUBTRACT do not apply")
    items = [v for v in current.get(name, "").split(",") if v]
    given = [v for v in (value or "").split(",") if v]
    if op == OP_APPEND:
        items += [v for v in given if v not in items]
    elif op == OP_SUBTRACT:
        items = [v for v in items if v not in given]
    else:
        raise InvalidConfig(f"Unknown config operation {op}")
    return ",".join(items) if items else None


async def incremental_alter_configs(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    responses = []
    await broker.topics.ensure(
        (r.resource_name, None) for r in request.resources if r.resource_type == RESOURCE_TOPIC
    )
    for res in request.resources:
        entry: dict[str, Any] = {
            "error_code": 0,
            "error_message": None,
            "resource_type": res.resource_type,
            "resource_name": res.resource_name,
        }
        responses.append(entry)
        if res.resource_type != RESOURCE_TOPIC:
            entry.update(
                error_code=int(ErrorCode.invalid_request),
                error_message="Only topic configs can be altered; broker configs are static",
            )
            continue
        topic = broker.topics.get(res.resource_name)
        if topic is None:
            entry.update(
                error_code=int(ErrorCode.unknown_topic_or_partition),
                error_message=f"Topic '{res.resource_name}' does not exist.",
            )
            continue
        try:
            effective = broker.topics.config(topic)
            changes = {
                c.name: _apply(effective, c.name, c.config_operation, c.value) for c in res.configs
            }
            await broker.topics.alter_configs(res.resource_name, changes, request.validate_only)
        except InvalidConfig as exc:
            entry.update(error_code=int(ErrorCode.invalid_config), error_message=str(exc))
        except TopicNotFound:
            entry.update(error_code=int(ErrorCode.unknown_topic_or_partition))
        except ControllerRefused as exc:
            entry.update(error_code=int(exc.code), error_message=exc.message)
    return ctx.respond({"throttle_time": 0, "responses": responses})
