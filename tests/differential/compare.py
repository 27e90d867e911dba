"""Responses as plain trees, normalised where two correct brokers must differ, and diffed.

Normalised (and only these): node ids, hosts and ports (the two brokers are different
processes), cluster ids, topic ids, producer ids and group member ids (random by design),
log-append times and transaction start times (the wall clock), error messages (free text:
clients show it, none parses it; null vs non-null is still compared), config documentation
strings, and record CRCs (derived from fields that are compared). Every other field is
compared as the broker sent it, throttle times included. Lists of named entries are keyed by
name (or partition index, group id, transactional id) so order does not matter.
"""

from __future__ import annotations

import dataclasses
import datetime
import enum
import uuid
from collections.abc import Iterator
from typing import Any, NamedTuple

from kio.records.readers import read_batch

NODE_KEYS = {
    "node_id",
    "leader_id",
    "broker_id",
    "controller_id",
    "replica_nodes",
    "isr_nodes",
    "offline_replicas",
    "eligible_leader_replicas",
    "last_known_elr",
}
RANDOM_ID_KEYS = {"topic_id", "producer_id"}
# A group member's id is the broker's choice (Kafka: client id + UUID); only whether there is
# one is compared. "leader" is JoinGroup's leader member id.
MEMBER_ID_KEYS = {"member_id", "leader"}
WALL_CLOCK_KEYS = {"log_append_time", "log_append_time_ms", "transaction_start_time"}
ZERO_UUID = uuid.UUID(int=0)


def plain(value: Any, key: str = "") -> Any:
    """A kio entity as dicts, lists and scalars; record batches decoded."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name), f.name) for f in dataclasses.fields(value)}
    if isinstance(value, tuple | list):
        return [plain(v, key) for v in value]
    if isinstance(value, enum.Enum):  # error codes: readable in reports
        return f"{value.name}({value.value})"
    if isinstance(value, datetime.timedelta):
        return int(value.total_seconds() * 1000)
    if isinstance(value, datetime.datetime):
        return int(value.timestamp() * 1000)
    if isinstance(value, uuid.UUID):
        return str(value)
    if isinstance(value, bytes | bytearray | memoryview):
        if key == "records":
            return decode_batches(bytes(value))
        return bytes(value).hex()
    return value


def code(value: Any) -> int:
    """The number of an error code as :func:`plain` renders it ("name(3)" or an int)."""
    if isinstance(value, str):
        return int(value.rsplit("(", 1)[1].rstrip(")"))
    return int(value)


def decode_batches(data: bytes) -> list[Any]:
    out: list[Any] = []
    offset = 0
    while offset < len(data):
        if len(data) - offset < 12:
            out.append({"partial_tail_bytes": len(data) - offset})
            break
        length = int.from_bytes(data[offset + 8 : offset + 12], "big", signed=True)
        if offset + 12 + length > len(data):
            out.append({"partial_tail_bytes": len(data) - offset})
            break
        batch, size = read_batch(data, offset)
        entry = plain(batch)
        entry.pop("crc", None)
        out.append(entry)
        offset += size
    return out


# The three-broker sessions (cluster.py) number both sides' brokers 1, 2, 3 and compare which
# broker holds which replica; only the controller a broker names is its own choice (Kafka's
# KRaft brokers name a random live broker).
CLUSTER_NODE_KEYS = {"controller_id"}
# DescribeLogDirs: the directory's path and the file system's sizes are the machine's.
MACHINE_KEYS = {"log_dir", "total_bytes", "usable_bytes"}


def normalise(tree: Any, key: str = "", nodes: frozenset[str] | set[str] = NODE_KEYS) -> Any:
    """``nodes``: the keys whose node ids are normalised (all by default; the cluster
    sessions pass :data:`CLUSTER_NODE_KEYS`)."""
    if isinstance(tree, dict):
        return {k: normalise(v, k, nodes) for k, v in tree.items()}
    if isinstance(tree, list):
        items = [normalise(v, key, nodes) for v in tree]
        return _keyed(items)
    if key in nodes and isinstance(tree, int):
        return "<node>" if tree >= 0 else tree
    if key in MACHINE_KEYS and tree is not None:
        return f"<{key}>" if not isinstance(tree, int) or tree >= 0 else tree
    if key in RANDOM_ID_KEYS:
        if isinstance(tree, int):
            return "<id>" if tree >= 0 else tree
        if isinstance(tree, str):
            return "<id>" if tree != str(ZERO_UUID) else "<zero-uuid>"
    if key == "cluster_id" and tree is not None:
        return "<cluster>"
    if key in ("host", "port"):
        return f"<{key}>"
    if key in MEMBER_ID_KEYS and isinstance(tree, str):
        return "<member>" if tree else ""
    if key in WALL_CLOCK_KEYS and isinstance(tree, int) and tree >= 0:
        return "<time>"
    if key in ("error_message", "documentation"):
        return f"<{key}>" if tree else None  # "" and null alike: no message
    return tree


def _keyed(items: list[Any]) -> Any:
    """A list of entries that each carry a name or partition index becomes a dict by it, so
    an entry one broker has and the other lacks shows up under its own name."""
    if not items or not all(isinstance(i, dict) for i in items):
        return items
    for field in (
        "name",
        "partition_index",
        "index",
        "partition",
        "key",
        "group_id",
        "transactional_id",
    ):
        keys = [i.get(field) for i in items]
        if all(k is not None and not isinstance(k, dict | list) for k in keys):
            out: dict[str, Any] = {}
            for k, item in zip(keys, items, strict=True):
                label = _label(k)
                n = 1
                while label in out:  # a repeated entry: the n-th one with that name
                    n += 1
                    label = f"{_label(k)}#{n}"
                out[label] = item
            return out
    return items


def _label(key: Any) -> str:
    text = str(key)
    return f"[{text}]" if len(text) <= 40 else f"[{text[:12]}...({len(text)} chars)]"


class Difference(NamedTuple):
    path: str
    kafka: Any
    sluice: Any

    def __str__(self) -> str:
        return f"{self.path}: kafka={self.kafka!r} sluice={self.sluice!r}"


MISSING = "<absent>"


def diff(kafka: Any, sluice: Any, path: str = "") -> Iterator[Difference]:
    if isinstance(kafka, dict) and isinstance(sluice, dict):
        for k in list(kafka) + [k for k in sluice if k not in kafka]:
            sub = f"{path}.{k}" if path and not k.startswith("[") else f"{path}{k}"
            yield from diff(kafka.get(k, MISSING), sluice.get(k, MISSING), sub)
        return
    if isinstance(kafka, list) and isinstance(sluice, list):
        if len(kafka) != len(sluice):
            yield Difference(f"{path}.length", len(kafka), len(sluice))
        for i, (a, b) in enumerate(zip(kafka, sluice, strict=False)):
            yield from diff(a, b, f"{path}[{i}]")
        return
    if kafka != sluice:
        yield Difference(path, _short(kafka), _short(sluice))


def _short(value: Any) -> Any:
    text = repr(value)
    return value if len(text) <= 200 else text[:200] + "..."
