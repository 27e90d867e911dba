"""A slower entity reader that skips tagged fields it does not know.

kio's native reader raises KeyError on an unknown tagged field, while the protocol
says a reader must skip it (that is how newer clients add optional data). This
reader walks the same kio schema in Python and is only used after the native
reader refused a message, so the common path stays native.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import fields
from functools import cache
from typing import Any

from kio._kio_native import get_field_reader
from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    classify_field,
    get_field_tag,
    is_optional,
)
from kio.serial.readers import (
    read_compact_array_length,
    read_compact_string_nullable,
    read_int8,
    read_legacy_array_length,
    read_unsigned_varint,
)

Reader = Callable[[Any, int], tuple[Any, int]]


def read_tolerant(entity_type: type, buffer: Any, offset: int) -> tuple[Any, int]:
    """Decode ``entity_type`` at ``offset``; returns (entity, bytes consumed)."""
    return _entity_reader(entity_type)(buffer, offset)


@cache
def _entity_reader(entity_type: type) -> Reader:
    flexible = entity_type.__flexible__
    is_header = entity_type.__name__ == "RequestHeader"
    plain: list[tuple[str, Reader]] = []
    tagged: dict[int, tuple[str, Reader]] = {}
    for f in fields(entity_type):
        tag = get_field_tag(f)
        reader = _field_reader(entity_type, f, flexible, is_header, tag is not None)
        if tag is None:
            plain.append((f.name, reader))
        else:
            tagged[int(tag)] = (f.name, reader)
    defaults = {
        f.name: f.default
        for f in fields(entity_type)
        if get_field_tag(f) is not None and not callable(f.default_factory)  # type: ignore[misc]
    }

    def read(buffer: Any, offset: int) -> tuple[Any, int]:
        pos = offset
        values: dict[str, Any] = {}
        for name, reader in plain:
            values[name], size = reader(buffer, pos)
            pos += size
        if flexible:
            count, size = read_unsigned_varint(buffer, pos)
            pos += size
            for _ in range(count):
                tag, size = read_unsigned_varint(buffer, pos)
                pos += size
                length, size = read_unsigned_varint(buffer, pos)
                pos += size
                known = tagged.get(tag)
                if known is not None:
                    values[known[0]], _ = known[1](buffer, pos)
                pos += length  # unknown tags are skipped by their declared length
        for name, default in defaults.items():
            values.setdefault(name, default)
        return entity_type(**values), pos - offset

    return read


def _field_reader(
    entity_type: type, f: Any, flexible: bool, is_header: bool, is_tag: bool
) -> Reader:
    kind = classify_field(f)
    if isinstance(kind, EntityField):
        inner = _entity_reader(kind.type_)
        if is_optional(f) and not is_tag:
            return _nullable(inner)
        return inner
    if isinstance(kind, EntityTupleField):
        return _array(_entity_reader(kind.type_), flexible, is_optional(f))
    if is_tag and is_optional(f) and f.metadata.get("kafka_type") == "string":
        # kio's field reader for a nullable tagged string refuses null (Fetch v12+
        # cluster_id); a tagged value is always compact, so read it as such.
        return read_compact_string_nullable
    return get_field_reader(entity_type, f, is_header, is_tag)


def _nullable(inner: Reader) -> Reader:
    def read(buffer: Any, offset: int) -> tuple[Any, int]:
        marker, size = read_int8(buffer, offset)
        if marker < 0:
            return None, size
        value, inner_size = inner(buffer, offset + size)
        return value, size + inner_size

    return read


def _array(inner: Reader, flexible: bool, optional: bool) -> Reader:
    read_length = read_compact_array_length if flexible else read_legacy_array_length

    def read(buffer: Any, offset: int) -> tuple[Any, int]:
        length, pos = read_length(buffer, offset)
        pos += offset
        if length is None or length < 0:
            return (None if optional else ()), pos - offset
        items = []
        for _ in range(length):
            item, size = inner(buffer, pos)
            items.append(item)
            pos += size
        return tuple(items), pos - offset

    return read
