"""Build kio entities of any version from plain dicts.

Handlers describe a response once, as nested dicts in the newest shape; ``build``
fits that description to the (API, version) the client asked for: fields a version
lacks are dropped, fields the handler did not give get the protocol's defaults, and
plain ints become the ErrorCode / timedelta / UUID objects kio's writers expect.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from dataclasses import MISSING, fields
from functools import cache
from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    is_optional,
)

ZERO_UUID = UUID(int=0)

Plan = list[tuple[str, Callable[[Any], Any], Callable[[], Any]]]


def build(entity_type: type, data: Mapping[str, Any]) -> Any:
    """Instantiate ``entity_type`` from ``data`` (unknown keys are ignored)."""
    values = {}
    for name, convert, default in _plan(entity_type):
        value = data.get(name, MISSING)
        values[name] = default() if value is MISSING else convert(value)
    return entity_type(**values)


def error_response(entity_type: type, error: int) -> Any:
    """A response with every error code set to ``error`` and empty collections."""
    return _fill_errors(entity_type, ErrorCode(error))


def _fill_errors(entity_type: type, error: ErrorCode) -> Any:
    values = {}
    for f in fields(entity_type):
        if f.metadata.get("kafka_type") == "error_code" and "tag" not in f.metadata:
            values[f.name] = error
    base = build(entity_type, {})
    return type(base)(**{f.name: values.get(f.name, getattr(base, f.name)) for f in fields(base)})


@cache
def _plan(entity_type: type) -> Plan:
    plan: Plan = []
    for f in fields(entity_type):
        plan.append((f.name, _converter(f), _default(f)))
    return plan


def _converter(f: Any) -> Callable[[Any], Any]:
    kind = classify_field(f)
    if isinstance(kind, EntityField):
        sub = kind.type_
        return lambda v: v if v is None or isinstance(v, sub) else build(sub, v)
    if isinstance(kind, EntityTupleField):
        sub = kind.type_
        return lambda v: (
            None if v is None else tuple(x if isinstance(x, sub) else build(sub, x) for x in v)
        )
    if isinstance(kind, PrimitiveTupleField):
        return lambda v: None if v is None else tuple(v)
    kafka_type = f.metadata.get("kafka_type")
    if kafka_type == "error_code":
        return ErrorCode
    if kafka_type in ("timedelta_i32", "timedelta_i64"):
        return lambda v: (
            v if isinstance(v, datetime.timedelta) else datetime.timedelta(milliseconds=v)
        )
    if kafka_type == "uuid":
        return lambda v: v if v is None or isinstance(v, UUID) else UUID(v)
    if kafka_type in ("datetime_i64",):
        # Kafka encodes "no time" as -1, which kio models as None where the field is
        # nullable; elsewhere -1 must stay a time (1 ms before the epoch) to encode as -1.
        nullable = is_optional(f)
        return lambda v: (
            v
            if v is None or isinstance(v, datetime.datetime)
            else (
                None
                if v < 0 and nullable
                else datetime.datetime.fromtimestamp(v / 1000, tz=datetime.UTC)
            )
        )
    return _identity


def _identity(v: Any) -> Any:
    return v


def _default(f: Any) -> Callable[[], Any]:
    if f.default is not MISSING:
        value = f.default
        return lambda: value
    if f.default_factory is not MISSING:
        return f.default_factory
    kind = classify_field(f)
    if is_optional(f):
        return lambda: None
    if isinstance(kind, EntityTupleField | PrimitiveTupleField):
        return tuple
    if isinstance(kind, EntityField):
        sub = kind.type_
        return lambda: build(sub, {})
    kafka_type = f.metadata.get("kafka_type")
    simple: dict[str, Any] = {
        "error_code": ErrorCode.none,
        "timedelta_i32": datetime.timedelta(0),
        "timedelta_i64": datetime.timedelta(0),
        "uuid": ZERO_UUID,
        "string": "",
        "bytes": b"",
        "records": b"",
        "bool": False,
        "float64": 0.0,
    }
    value = simple.get(kafka_type, 0)
    return lambda: value
