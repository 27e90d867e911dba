"""Bounds and nullability check of a request body, run before kio decodes it.

kio's native reader trusts length prefixes: a compact array count of ``ff ff ff ff 0f``
makes it reserve count x element size up front, and Rust aborts the whole process when
that allocation fails (Python cannot catch it). It also hands ``None`` to handlers for a
non-nullable array sent as null. So every request body is first walked by a checker
compiled from the same kio schema: it reads only lengths, counts, varints and null
markers, never builds a value, and refuses the body (:class:`InvalidRequestBytes`) when

- an array count, string/bytes length or tagged-field length claims more than the bytes
  left in the frame (every element needs at least its minimum encoded size),
- a field the schema says is non-nullable is sent as null (nested entities and tagged
  fields included), or a length is negative other than the null marker,
- a varint runs past 5 bytes or past 32 bits,
- a known tagged field's value does not fill exactly the length it declared (the
  native reader would then continue at a different offset than the one checked here).

After it passes, every length kio reads is one this check has bounded, so the native
reader can allocate nothing larger than the frame.

Each schema is compiled once into Python source (one function per entity; fixed-size
runs collapse into one addition, arrays of fixed-size entries into one multiplication)
because this runs for every Produce and Fetch request: record data is one bytes field
whose length is checked, never walked.
"""

from __future__ import annotations

import struct
import types
from collections.abc import Callable
from dataclasses import Field, fields
from functools import cache
from typing import Any, Union, get_args, get_origin

from kio.serial._introspect import (
    EntityField,
    EntityTupleField,
    PrimitiveTupleField,
    classify_field,
    get_field_tag,
)

Check = Callable[[Any, int], int]
Check3 = Callable[[Any, int, int], int]  # buffer, start, end -> where the value ends


class InvalidRequestBytes(Exception):
    """The body does not fit its schema; decoding it must not be attempted."""


# Encoded size of the fixed-width kio types (kafka_type metadata).
_FIXED_SIZE = {
    "bool": 1,
    "int8": 1,
    "int16": 2,
    "uint16": 2,
    "int32": 4,
    "uint32": 4,
    "timedelta_i32": 4,
    "int64": 8,
    "uint64": 8,
    "timedelta_i64": 8,
    "datetime_i64": 8,
    "float64": 8,
    "uuid": 16,
}
_LENGTH_PREFIXED = {"string", "bytes", "records"}

_I16 = struct.Struct(">h").unpack_from
_I32 = struct.Struct(">i").unpack_from


def _uvarint(buf: Any, pos: int) -> tuple[int, int]:
    """An unsigned varint of at most 5 bytes (32 bits), as Kafka reads them."""
    value = 0
    for shift in (0, 7, 14, 21):
        b = buf[pos]
        pos += 1
        value |= (b & 0x7F) << shift
        if b < 0x80:
            return value, pos
    b = buf[pos]
    if b > 0x0F:
        raise InvalidRequestBytes("varint longer than 5 bytes or wider than 32 bits")
    return value | (b << 28), pos + 1


def _tags(buf: Any, pos: int, end: int, known: dict[int, Check3], where: str) -> int:
    """A tagged-field section: each field's length bounded, known ones checked inside it."""
    count, pos = _uvarint(buf, pos)
    if count * 2 > end - pos:  # a tag and a length: at least two bytes each
        raise InvalidRequestBytes(f"{where}: tagged field count exceeds the frame")
    for _ in range(count):
        tag, pos = _uvarint(buf, pos)
        size, pos = _uvarint(buf, pos)
        stop = pos + size
        if stop > end:
            raise InvalidRequestBytes(f"{where}: tagged field {tag} runs past the frame")
        check = known.get(tag)
        if check is not None and check(buf, pos, stop) != stop:
            raise InvalidRequestBytes(f"{where}: tagged field {tag} does not fill its length")
        pos = stop
    return pos


def skip_tagged_fields(buf: Any, pos: int) -> int:
    """Past a tagged-field section none of whose tags are known (the request header's)."""
    try:
        return _tags(buf, pos, len(buf), {}, "request header")
    except IndexError:
        raise InvalidRequestBytes("request header runs past the end of the frame") from None


def _fail(why: str) -> InvalidRequestBytes:
    return InvalidRequestBytes(why)


def check_body(schema: type, buf: Any, offset: int) -> int:
    """Check the body of ``schema`` at ``offset``; returns where it ends."""
    try:
        return compiled(schema)(buf, offset)
    except (IndexError, struct.error):
        raise InvalidRequestBytes(f"{schema.__name__} runs past the end of the frame") from None


@cache
def compiled(schema: type) -> Check:
    """The checker of one request schema (entity type), compiled once."""
    compiler = _Compiler()
    top = compiler.entity(schema)
    namespace: dict[str, Any] = {
        "_I16": _I16,
        "_I32": _I32,
        "_uvarint": _uvarint,
        "_fail": _fail,
        "_tags": _tags,
    }
    code = compile("\n".join(compiler.lines), f"<request check {schema.__name__}>", "exec")
    exec(code, namespace)
    entity_check = namespace[top]

    def check(buf: Any, offset: int) -> int:
        return entity_check(buf, offset, len(buf))  # type: ignore[no-any-return]

    return check


def source(schema: type) -> str:
    """The generated checker source, for reading and debugging."""
    compiler = _Compiler()
    compiler.entity(schema)
    return "\n".join(compiler.lines)


class _Compiler:
    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[type, str] = {}
        self.min_sizes: dict[type, int] = {}
        self.fixed_sizes: dict[type, int | None] = {}
        self.counter = 0

    def _name(self, base: str) -> str:
        self.counter += 1
        return f"_{base}_{self.counter}"

    # -- sizes ---------------------------------------------------------------
    def min_size(self, entity: type) -> int:
        """Fewest bytes an encoded ``entity`` can take (all arrays empty, strings null)."""
        if entity not in self.min_sizes:
            flexible = entity.__flexible__
            size = 1 if flexible else 0  # the tagged-field count
            for f in fields(entity):
                if get_field_tag(f) is None:
                    size += self._field_min_size(f, flexible)
            self.min_sizes[entity] = size
        return self.min_sizes[entity]

    def _field_min_size(self, f: Field[Any], flexible: bool) -> int:
        kind = classify_field(f)
        if kind.is_array:
            return 1 if flexible else 4
        if isinstance(kind, EntityField):
            return 1 if _nullable(f.type) else self.min_size(kind.type_)
        kafka_type = f.metadata["kafka_type"]
        if kafka_type in _FIXED_SIZE:
            return _FIXED_SIZE[kafka_type]
        return 1 if flexible else (2 if kafka_type == "string" else 4)

    def fixed_size(self, entity: type) -> int | None:
        """The encoded size of ``entity`` when it cannot vary (only fixed-width fields)."""
        if entity not in self.fixed_sizes:
            size: int | None = 0
            if entity.__flexible__:
                size = None  # the tagged-field section can always grow
            else:
                for f in fields(entity):
                    kind = classify_field(f)
                    kafka_type = f.metadata.get("kafka_type")
                    if (
                        kind.is_array
                        or isinstance(kind, EntityField)
                        or (kafka_type not in _FIXED_SIZE)
                    ):
                        size = None
                        break
                    assert size is not None
                    size += _FIXED_SIZE[kafka_type]
            self.fixed_sizes[entity] = size
        return self.fixed_sizes[entity]

    # -- code ----------------------------------------------------------------
    def entity(self, entity: type) -> str:
        """Emit the checker function of ``entity``; returns its name."""
        if entity in self.names:
            return self.names[entity]
        name = self._name(entity.__name__)
        self.names[entity] = name
        body = self.entity_body(entity)
        self.lines.append(f"def {name}(buf, pos, end):")
        self.lines += ["    " + line for line in [*body, "return pos"]]
        self.lines.append("")
        return name

    def entity_body(self, entity: type) -> list[str]:
        """Statements advancing ``pos`` over one ``entity`` (inlined into array loops:
        a call per partition was half the cost of a 50-partition Produce)."""
        flexible = entity.__flexible__
        body: list[str] = []
        tagged: dict[int, str] = {}
        pending = 0  # fixed-width bytes not yet added to pos
        for f in fields(entity):
            tag = get_field_tag(f)
            if tag is not None:
                tagged[int(tag)] = self._tagged_field(entity, f)
                continue
            kafka_type = f.metadata.get("kafka_type")
            if not classify_field(f).is_array and kafka_type in _FIXED_SIZE:
                pending += _FIXED_SIZE[kafka_type]
                continue
            if pending:
                body.append(f"pos += {pending}")
                pending = 0
            body += self._field(entity, f, flexible)
        if pending:
            body.append(f"pos += {pending}")
        if flexible:
            body += self._tag_section(entity, tagged)
        body.append("if pos > end:")
        body.append(f"    raise _fail('{entity.__name__} runs past its end')")
        return body

    def _field(self, entity: type, f: Field[Any], flexible: bool) -> list[str]:
        kind = classify_field(f)
        where = f"{entity.__name__}.{f.name}"
        nullable = _nullable(f.type)
        if isinstance(kind, EntityTupleField | PrimitiveTupleField):
            return self._array(f, kind, where, flexible, nullable)
        if isinstance(kind, EntityField):
            inner = self.entity(kind.type_)
            if not nullable:
                return [f"pos = {inner}(buf, pos, end)"]
            # A nullable struct: one int8 marker, negative for null.
            return [
                "if buf[pos] >= 0x80:",
                "    pos += 1",
                "else:",
                f"    pos = {inner}(buf, pos + 1, end)",
            ]
        kafka_type = f.metadata["kafka_type"]
        if kafka_type not in _LENGTH_PREFIXED:
            raise TypeError(f"request check: unknown kafka_type {kafka_type!r} in {where}")
        return self._length_prefixed(kafka_type, where, flexible, nullable)

    def _length_prefixed(
        self, kafka_type: str, where: str, flexible: bool, nullable: bool
    ) -> list[str]:
        null = f"raise _fail('{where} is not nullable but was null')"
        if flexible:
            lines = [*_read_uvarint("n"), "if n:", "    pos += n - 1"]
            return lines if nullable else [*lines, "else:", f"    {null}"]
        width, unpack = (2, "_I16") if kafka_type == "string" else (4, "_I32")
        return [
            f"n = {unpack}(buf, pos)[0]",
            f"pos += {width}",
            "if n >= 0:",
            "    pos += n",
            *([] if nullable else ["elif n == -1:", f"    {null}"]),
            "elif n < -1:" if nullable else "else:",
            f"    raise _fail('{where}: negative length')",
        ]

    def _array(
        self,
        f: Field[Any],
        kind: EntityTupleField | PrimitiveTupleField,
        where: str,
        flexible: bool,
        nullable: bool,
    ) -> list[str]:
        null = f"raise _fail('{where} is not nullable but was null')"
        if flexible:
            lines = [*_read_uvarint("n"), "if n:", "    n -= 1"]
        else:
            lines = [
                "n = _I32(buf, pos)[0]",
                "pos += 4",
                "if n >= 0:",
            ]
        loop = self._array_items(f, kind, where, flexible)
        lines += ["    " + line for line in loop]
        if flexible:
            lines += [] if nullable else ["else:", f"    {null}"]
        else:
            lines += [
                *([] if nullable else ["elif n == -1:", f"    {null}"]),
                "elif n < -1:" if nullable else "else:",
                f"    raise _fail('{where}: negative array length')",
            ]
        return lines

    def _array_items(
        self,
        f: Field[Any],
        kind: EntityTupleField | PrimitiveTupleField,
        where: str,
        flexible: bool,
    ) -> list[str]:
        too_many = f"    raise _fail('{where}: array count exceeds the frame')"
        if isinstance(kind, EntityTupleField):
            fixed = self.fixed_size(kind.type_)
            if fixed is not None:
                return [f"pos += n * {fixed}"]  # checked against end by the caller's last line
            least = max(1, self.min_size(kind.type_))
            return [
                f"if n * {least} > end - pos:",
                too_many,
                "for _ in range(n):",
                *["    " + line for line in self.entity_body(kind.type_)],
            ]
        kafka_type = f.metadata["kafka_type"]
        if kafka_type in _FIXED_SIZE:
            return [f"pos += n * {_FIXED_SIZE[kafka_type]}"]
        if kafka_type not in _LENGTH_PREFIXED:
            raise TypeError(f"request check: unknown kafka_type {kafka_type!r} in {where}")
        least = 1 if flexible else (2 if kafka_type == "string" else 4)
        item_nullable = _nullable(get_args(_strip_none(f.type))[0])
        item = self._length_prefixed(kafka_type, f"{where}[]", flexible, item_nullable)
        return [
            f"if n * {least} > end - pos:",
            too_many,
            "for _ in range(n):",
            *["    " + line for line in item],
        ]

    def _tagged_field(self, entity: type, f: Field[Any]) -> str:
        """A function checking one tagged field's value in [pos, end)."""
        name = self._name(f"{entity.__name__}_{f.name}")
        kind = classify_field(f)
        if isinstance(kind, EntityField):
            # Tagged structs carry no null marker: absent is how they are null.
            lines = [f"pos = {self.entity(kind.type_)}(buf, pos, end)"]
        elif not kind.is_array and f.metadata.get("kafka_type") in _FIXED_SIZE:
            lines = [f"pos += {_FIXED_SIZE[f.metadata['kafka_type']]}"]
        else:
            lines = self._field(entity, f, flexible=True)
        self.lines.append(f"def {name}(buf, pos, end):")
        self.lines += ["    " + line for line in lines]
        self.lines.append("    return pos")
        self.lines.append("")
        return name

    def _tag_section(self, entity: type, tagged: dict[int, str]) -> list[str]:
        known = ", ".join(f"{tag}: {fn}" for tag, fn in sorted(tagged.items()))
        return [
            "if buf[pos] == 0:",  # no tagged fields: what clients send almost always
            "    pos += 1",
            "else:",
            f"    pos = _tags(buf, pos, end, {{{known}}}, '{entity.__name__}')",
        ]


def _read_uvarint(var: str) -> list[str]:
    # Inline fast paths for one- and two-byte varints (lengths below 16 KiB): nearly
    # every length is one, and a call per record-data length was a third of the cost.
    return [
        f"{var} = buf[pos]",
        f"if {var} < 0x80:",
        "    pos += 1",
        "elif buf[pos + 1] < 0x80:",
        f"    {var} = ({var} & 0x7F) | (buf[pos + 1] << 7)",
        "    pos += 2",
        "else:",
        f"    {var}, pos = _uvarint(buf, pos)",
    ]


def _nullable(annotation: Any) -> bool:
    origin = get_origin(annotation)
    return origin in (types.UnionType, Union) and type(None) in get_args(annotation)


def _strip_none(annotation: Any) -> Any:
    if _nullable(annotation):
        return next(a for a in get_args(annotation) if a is not type(None))
    return annotation
