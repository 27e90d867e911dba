"""Reading the ``consumer`` protocol's member metadata (ConsumerProtocolSubscription) and
assignments (ConsumerProtocolAssignment).

A classic group never needs a member's metadata: it is passed to the leader as opaque
bytes, which is why every client-side assignor works. OffsetDelete looks inside, to refuse
deleting offsets of topics the group consumes. Classic members of a KIP-848 group (after
an upgrade, see :mod:`broker.groups.consumer_migration`) are assigned by the coordinator:
it reads their subscriptions and writes their assignments. Every version of both schemas
starts with the same fields and none is flexible.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The topics of a subscription, or None if the bytes are not one."""
    try:
        pos = _I16.size  # version: every version starts with the topics
        if len(metadata) < pos:
            return None
        (count,) = _I32.unpack_from(metadata, pos)
        pos += _I32.size
        if count < 0 or count > len(metadata):
            return None
        topics = set()
        for _ in range(count):
            (length,) = _I16.unpack_from(metadata, pos)
            pos += _I16.size
            if length < 0 or pos + length > len(metadata):
                return None
            topics.add(metadata[pos : pos + length].decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None


class MalformedProtocol(ValueError):
    """Member metadata or an assignment that is not the ``consumer`` protocol's."""


class CustomAssignorData(ValueError):
    """An assignment carrying user data: a custom client-side assignor's, which a consumer
    group (server-side assignors) would lose."""


@dataclass(frozen=True, slots=True)
class Subscription:
    """A ConsumerProtocolSubscription: what the coordinator of a KIP-848 group needs of a
    classic member's JoinGroup metadata (the topics, v1+'s owned partitions, v3+'s rack)."""

    version: int
    topics: tuple[str, ...]
    owned: dict[str, frozenset[int]]
    rack_id: str | None = None


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0

    def take(self, fmt: struct.Struct) -> int:
        try:
            (value,) = fmt.unpack_from(self.data, self.pos)
        except struct.error:
            raise MalformedProtocol("truncated") from None
        self.pos += fmt.size
        return int(value)

    def string(self, nullable: bool = False) -> str | None:
        length = self.take(_I16)
        if length < 0:
            if nullable:
                return None
            raise MalformedProtocol("null string")
        end = self.pos + length
        if end > len(self.data):
            raise MalformedProtocol("truncated string")
        try:
            text = self.data[self.pos : end].decode("utf-8")
        except UnicodeDecodeError:
            raise MalformedProtocol("string is not UTF-8") from None
        self.pos = end
        return text

    def count(self) -> int:
        n = self.take(_I32)
        if n < 0 or n > len(self.data):
            raise MalformedProtocol("bad array length")
        return n

    def skip_bytes(self) -> None:
        length = self.take(_I32)
        if length > 0:
            if self.pos + length > len(self.data):
                raise MalformedProtocol("truncated bytes")
            self.pos += length

    def topic_partitions(self) -> dict[str, frozenset[int]]:
        out: dict[str, set[int]] = {}
        for _ in range(self.count()):
            topic = self.string() or ""
            partitions = out.setdefault(topic, set())
            for _ in range(self.count()):
                partitions.add(self.take(_I32))
        return {t: frozenset(ps) for t, ps in out.items()}


def parse_subscription(metadata: bytes) -> Subscription:
    """Every version of the schema, none flexible; fields of later versions are read only
    when there (an older client's bytes end before them)."""
    r = _Reader(metadata)
    version = r.take(_I16)
    if version < 0:
        raise MalformedProtocol(f"version {version}")
    topics = tuple(r.string() or "" for _ in range(r.count()))
    r.skip_bytes()  # user data
    owned: dict[str, frozenset[int]] = {}
    rack = None
    if version >= 1 and r.pos < len(metadata):
        owned = r.topic_partitions()
        if version >= 2 and r.pos < len(metadata):
            r.take(_I32)  # generation id
            if version >= 3 and r.pos < len(metadata):
                rack = r.string(nullable=True) or None
    return Subscription(version, topics, owned, rack)


def parse_assignment(data: bytes, refuse_user_data: bool = False) -> dict[str, frozenset[int]]:
    """A ConsumerProtocolAssignment's partitions by topic name (empty bytes: none). With
    ``refuse_user_data``, CustomAssignorData when it carries user data."""
    if not data:
        return {}
    r = _Reader(data)
    if r.take(_I16) < 0:
        raise MalformedProtocol("negative version")
    partitions = r.topic_partitions()
    if refuse_user_data and r.pos + 4 <= len(data) and r.take(_I32) > 0:
        raise CustomAssignorData("user data from a custom assignor would be lost")
    return partitions


def assignment_bytes(version: int, partitions: dict[str, frozenset[int]]) -> bytes:
    """A ConsumerProtocolAssignment (every version has the same fields), user data null;
    ``version`` is the one of the member's subscription, as Kafka answers (capped at 3)."""
    out = bytearray(_I16.pack(max(0, min(version, 3))))
    out += _I32.pack(len(partitions))
    for topic, ps in sorted(partitions.items()):
        name = topic.encode()
        out += _I16.pack(len(name)) + name + _I32.pack(len(ps))
        for p in sorted(ps):
            out += _I32.pack(p)
    out += _I32.pack(-1)
    return bytes(out)
