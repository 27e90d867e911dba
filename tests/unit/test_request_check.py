"""The decode-time bounds and nullability check (protocol/request_check.py).

Every request schema of every version the broker serves is covered: a small wire writer
here (written from the protocol rules, not from the checker) produces a valid body and
then the same body with one length, count or null marker replaced. Valid bodies must pass
the check and decode with kio's native reader; the replaced ones must be refused before
kio sees them.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import fields
from typing import Any, Union, get_args, get_origin

import pytest
from kio.index import load_request_schema
from kio.serial import entity_reader
from kio.serial._introspect import EntityField, EntityTupleField, classify_field, get_field_tag

from broker.server.api_table import VERSIONS
from protocol.codec import MalformedRequest, decode_body, parse_request_header
from protocol.request_check import InvalidRequestBytes, check_body, compiled

SERVED = [
    (key, version, load_request_schema(key, version))
    for key, _name, low, high in VERSIONS
    for version in range(low, high + 1)
]
IDS = [f"{schema.__name__}-v{version}" for _key, version, schema in SERVED]

_FIXED = {
    "bool": b"\x01",
    "int8": b"\x07",
    "int16": b"\x00\x07",
    "uint16": b"\x00\x07",
    "int32": b"\x00\x00\x00\x07",
    "timedelta_i32": b"\x00\x00\x00\x07",
    "int64": b"\x00" * 7 + b"\x07",
    "timedelta_i64": b"\x00" * 7 + b"\x07",
    "float64": struct.pack(">d", 1.5),
    "uuid": bytes(range(16)),
}

# A site is one length, count or null marker the writer emits: (path, what, nullable).
Site = tuple[str, str, bool]
# Returns replacement bytes for a site, or None to write it normally.
Hook = Callable[[Site, bool], bytes | None]


def _nullable(annotation: Any) -> bool:
    return get_origin(annotation) in (types.UnionType, Union) and type(None) in get_args(annotation)


def _uvarint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _length(n: int, flexible: bool, legacy_width: int) -> bytes:
    """A length or count; n = -1 is null."""
    if flexible:
        return _uvarint(n + 1)
    return struct.pack(">h" if legacy_width == 2 else ">i", n)


class Writer:
    """Encodes a body for ``entity`` with every array holding one element, every string
    "ab", and (with ``tags``) each known tagged field present."""

    def __init__(self, hook: Hook | None = None, tags: bool = False) -> None:
        self.hook = hook
        self.tags = tags
        self.sites: list[Site] = []

    def _site(self, site: Site, flexible: bool) -> bytes | None:
        self.sites.append(site)
        return self.hook(site, flexible) if self.hook else None

    def entity(self, entity: type, path: str) -> bytes:
        flexible = entity.__flexible__
        out = b""
        tagged: list[tuple[int, bytes]] = []
        for f in fields(entity):
            tag = get_field_tag(f)
            value = self.field(entity, f, f"{path}.{f.name}", flexible, tag is not None)
            if tag is None:
                out += value
            elif self.tags:
                tagged.append((int(tag), value))
        if flexible:
            out += _uvarint(len(tagged))
            for tag, value in tagged:
                out += _uvarint(tag) + _uvarint(len(value)) + value
        return out

    def field(self, entity: type, f: Any, path: str, flexible: bool, is_tag: bool) -> bytes:
        kind = classify_field(f)
        nullable = _nullable(f.type)
        if kind.is_array:
            replaced = self._site((path, "array", nullable), flexible)
            if replaced is not None:
                return replaced
            if isinstance(kind, EntityTupleField):
                item = self.entity(kind.type_, path + "[]")
            else:
                inner = get_args(f.type if not nullable else get_args(f.type)[0])[0]
                item = self.primitive(f.metadata["kafka_type"], path + "[]", flexible, inner)
            return _length(1, flexible, 4) + item
        if isinstance(kind, EntityField):
            if nullable and not is_tag:
                replaced = self._site((path, "struct", True), flexible)
                if replaced is not None:
                    return replaced
                return b"\x01" + self.entity(kind.type_, path)
            return self.entity(kind.type_, path)
        return self.primitive(f.metadata["kafka_type"], path, flexible, f.type)

    def primitive(self, kafka_type: str, path: str, flexible: bool, annotation: Any) -> bytes:
        if kafka_type in _FIXED:
            return _FIXED[kafka_type]
        replaced = self._site((path, kafka_type, _nullable(annotation)), flexible)
        if replaced is not None:
            return replaced
        data = b"ab"
        return _length(len(data), flexible, 2 if kafka_type == "string" else 4) + data


def _sites(schema: type) -> list[Site]:
    writer = Writer(tags=True)
    writer.entity(schema, schema.__name__)
    return writer.sites


def _with(schema: type, target: str, replacement: Callable[[bool, Site], bytes]) -> bytes:
    def hook(site: Site, flexible: bool) -> bytes | None:
        return replacement(flexible, site) if site[0] == target else None

    return Writer(hook, tags=True).entity(schema, schema.__name__)


def _cases() -> Iterator[tuple[str, type, Site]]:
    for (_key, version, schema), _id in zip(SERVED, IDS, strict=True):
        for site in _sites(schema):
            yield f"{schema.__name__}-v{version}-{site[0]}", schema, site


CASES = list(_cases())


def test_every_served_request_schema_is_covered() -> None:
    # Every version of every API the broker table serves compiles (an unknown kafka_type
    # would raise here); the tests below replace each of their 576 lengths/counts/nulls.
    assert len(SERVED) == sum(high - low + 1 for _k, _n, low, high in VERSIONS)
    for _key, _version, schema in SERVED:
        assert callable(compiled(schema))
    assert len(CASES) > 500


@pytest.mark.parametrize(("key", "version", "schema"), SERVED, ids=IDS)
@pytest.mark.parametrize("tags", [False, True])
def test_valid_bodies_pass_and_decode(key: int, version: int, schema: type, tags: bool) -> None:
    body = Writer(tags=tags).entity(schema, schema.__name__)
    assert check_body(schema, body, 0) == len(body)
    decoded = decode_body(schema, memoryview(body), 0)
    assert type(decoded) is schema
    # Every proper prefix is refused: nothing passes that kio would read past the end of.
    for cut in range(len(body)):
        with pytest.raises(InvalidRequestBytes):
            check_body(schema, body[:cut], 0)


def _every_site(test: Callable[[type, Site], None]) -> None:
    for _name, schema, site in CASES:
        test(schema, site)


def test_null_is_refused_exactly_where_the_schema_says_non_nullable() -> None:
    checked = 0

    def one(schema: type, site: Site) -> None:
        nonlocal checked
        path, what, nullable = site

        def null(flexible: bool, _site: Site) -> bytes:
            if what == "struct":
                return b"\xff"
            return _length(-1, flexible, 2 if what == "string" else 4)

        body = _with(schema, path, null)
        if nullable:
            assert check_body(schema, body, 0) == len(body), path
            decode_body(schema, memoryview(body), 0)
        else:
            with pytest.raises(InvalidRequestBytes, match="not nullable"):
                check_body(schema, body, 0)
            with pytest.raises(MalformedRequest):
                decode_body(schema, memoryview(body), 0)
        checked += 1

    _every_site(one)
    assert checked == len(CASES)


@pytest.mark.parametrize(
    "claim",
    [2**31 - 1, 2**32 - 2, 3],  # 3: one more than the "ab" every string here has
)
def test_lengths_beyond_the_frame_are_refused(claim: int) -> None:
    def one(schema: type, site: Site) -> None:
        path, what, _nullable = site

        def big(flexible: bool, _site: Site) -> bytes:
            if flexible:
                return _uvarint(claim + 1 if claim < 2**32 - 1 else claim)
            if what == "string":
                return struct.pack(">h", min(claim, 2**15 - 1))
            return struct.pack(">i", min(claim, 2**31 - 1))

        body = _with(schema, path, big)
        if claim == 3:
            # One byte (or two entries) more than written: the body may still parse by
            # eating into what follows, but then it cannot end where the writer ended it.
            try:
                end = check_body(schema, body, 0)
            except InvalidRequestBytes:
                return
            assert end != len(body), path
            return
        with pytest.raises(InvalidRequestBytes):
            check_body(schema, body, 0)

    _every_site(one)


def test_varints_longer_than_five_bytes_are_refused() -> None:
    schema = load_request_schema(3, 13)
    body = b"\x80\x80\x80\x80\x80\x01" + b"\x00\x00\x00"
    with pytest.raises(InvalidRequestBytes, match="varint"):
        check_body(schema, body, 0)


def test_tagged_field_claiming_more_than_the_frame_is_refused() -> None:
    schema = load_request_schema(3, 13)
    ok = b"\x01" + b"\x01\x00\x00"  # empty topics, two bools, no tags
    assert check_body(schema, ok, 0) == len(ok)
    with pytest.raises(InvalidRequestBytes, match="tagged field"):
        check_body(schema, b"\x01\x01\x00" + b"\x01" + b"\x05" + b"\xff\xff\xff\x0f", 0)
    with pytest.raises(InvalidRequestBytes, match="tagged field count"):
        check_body(schema, b"\x01\x01\x00" + b"\xff\xff\xff\xff\x0f", 0)


def test_known_tagged_field_must_fill_its_declared_length() -> None:
    schema = load_request_schema(1, 16)  # FetchRequest: tag 0 is the cluster id string
    good = Writer(tags=True).entity(schema, "f")
    assert check_body(schema, good, 0) == len(good)
    plain = Writer(tags=False).entity(schema, "f")
    # cluster_id "ab" (compact: 03 61 62) declared as 5 bytes long, padded
    bad = plain[:-1] + b"\x01" + b"\x00\x05" + b"\x03ab\x00\x00"
    with pytest.raises(InvalidRequestBytes, match="does not fill"):
        check_body(schema, bad, 0)


# The issue's frames: on the code before this check, kio's native reader aborted the
# whole process on them (a Rust allocation failure Python cannot catch), hence the
# subprocess.
ABORTING_FRAMES = {
    "metadata-v13": "0003000d00000002000772646b61666b6100ffffffff0f000000",
    # OffsetCommit v8: group "g", generation, member "m", no instance id, topics count huge
    "offset-commit-v8": "0008000800000003000772646b61666b6100"
    + "0267"
    + "00000001"
    + "026d"
    + "00"
    + "ffffffff0f"
    + "00",
    # Produce v10: no transactional id, acks 1, timeout, topic_data count huge
    "produce-v10": "0000000a00000004000772646b61666b6100"
    + "00"
    + "0001"
    + "00007530"
    + "ffffffff0f"
    + "00",
}


@pytest.mark.parametrize("name", sorted(ABORTING_FRAMES))
def test_issue_frames_are_malformed_not_fatal(name: str) -> None:
    script = (
        "import sys\n"
        "from protocol.codec import MalformedRequest, decode_body, parse_request_header,"
        " request_schema\n"
        f"frame = memoryview(bytes.fromhex({ABORTING_FRAMES[name]!r}))\n"
        "header, offset = parse_request_header(frame)\n"
        "schema = request_schema(header.api_key, header.api_version)\n"
        "try:\n"
        "    decode_body(schema, frame, offset)\n"
        "except MalformedRequest as exc:\n"
        "    print('malformed:', exc)\n"
        "    sys.exit(0)\n"
        "sys.exit(3)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
    assert "exceeds the frame" in done.stdout


def test_header_tagged_fields_are_bounded() -> None:
    head = struct.pack(">hhih", 3, 13, 1, 1) + b"c"
    with pytest.raises(MalformedRequest):
        parse_request_header(memoryview(head + b"\xff\xff\xff\xff\x0f"))
    with pytest.raises(MalformedRequest):
        parse_request_header(memoryview(head + b"\x01\x00\x7f\x00"))


def test_native_reader_agrees_with_the_writer() -> None:
    # The writer above is this test's oracle: kio must read what it writes.
    schema = load_request_schema(0, 10)
    body = Writer(tags=True).entity(schema, "p")
    value, size = entity_reader(schema)(body, 0)
    assert size == len(body)
    assert value.topic_data[0].partition_data[0].records == b"ab"
