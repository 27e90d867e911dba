"""Cluster metadata records: the entries of the Raft log (as in KRaft, the log *is* the metadata).

Every record is a frozen dataclass. Records say exactly what changes; applying them
(``controller.image.MetadataImage.apply``) never decides anything, so every voter and every
broker following the log builds the same image. Decisions (placement, leader election,
fencing) are made once, by the active controller, in ``controller.logic``.

Encoding: JSON, never pickle (decoding must not run code). Each record is an object with a
type tag ``"t"``, a per-type version ``"v"`` and its fields; UUIDs are strings, tuples are
lists. Keys are sorted and separators compact so one record always encodes to the same bytes.
A reader accepts a version up to the one it knows, ignores fields it does not know (written
by a newer minor change) and fills fields a record lacks with their defaults. A type or
version it does not know raises ``DecodeError``: silently skipping a record would make this
reader's image differ from the others'.

A request's records are proposed as one Raft entry (``encode_batch``) so they commit
atomically: a topic never exists without its partitions, a broker is never fenced while it
still leads partitions.
"""

from __future__ import annotations

import dataclasses
import json
import types
import typing
from dataclasses import dataclass
from typing import Any, ClassVar, Union
from uuid import UUID

from common.acl import AclBinding

NO_LEADER = -1
BATCH_VERSION = 1


class DecodeError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class RegisterBroker:
    """A broker (re-)registered. A new incarnation gets a new, larger ``broker_epoch``; the
    heartbeats of older incarnations carry an older epoch and are refused."""

    TYPE: ClassVar[str] = "RegisterBroker"
    VERSION: ClassVar[int] = 1
    node_id: int
    incarnation_id: UUID
    broker_epoch: int
    host: str
    port: int
    rack: str | None = None
    fenced: bool = True  # a new registration is fenced until its first heartbeat
    # Every advertised listener, "NAME://host:port" (Kafka's RegisterBrokerRecord lists its
    # endpoints); host/port above are the inter-broker listener's. Older readers ignore it.
    listeners: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class UnregisterBroker:
    TYPE: ClassVar[str] = "UnregisterBroker"
    VERSION: ClassVar[int] = 1
    node_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class FenceBroker:
    TYPE: ClassVar[str] = "FenceBroker"
    VERSION: ClassVar[int] = 1
    node_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class UnfenceBroker:
    TYPE: ClassVar[str] = "UnfenceBroker"
    VERSION: ClassVar[int] = 1
    node_id: int
    broker_epoch: int


@dataclass(frozen=True, slots=True)
class BrokerEpochCounter:
    """The largest broker epoch ever handed out. Only snapshots carry it: in the log every
    RegisterBroker advances it, but a snapshot lists only the brokers registered now, and an
    epoch of an unregistered broker must still never be handed out again."""

    TYPE: ClassVar[str] = "BrokerEpochCounter"
    VERSION: ClassVar[int] = 1
    last_broker_epoch: int


@dataclass(frozen=True, slots=True)
class Topic:
    """A new topic. Seed 000's placement is static, so what it was created with is
    recorded here, never recomputed from the racks registered later:

    - ``replication_factor``: the RF assigned at creation (diskless: the rack count then);
    - ``legacy``: a diskless topic created under the old binary's RF=1 rule (faked
      metadata; Sluice's import of a pre-controller catalog), which the controller may
      expand (``controller.legacy.rf.expansion.enable``). A topic created with RF=1
      because the cluster had one rack is not legacy when a second rack registers.

    Both None: a record written before these fields (an older log or snapshot). The image
    then takes them from the topic's first partition as it is applied (``controller.image``):
    its replica count, and legacy iff a diskless single replica while several racks were
    registered, which the managed rule never creates. Older readers ignore the fields."""

    TYPE: ClassVar[str] = "Topic"
    VERSION: ClassVar[int] = 1
    name: str
    topic_id: UUID
    replication_factor: int | None = None
    legacy: bool | None = None


@dataclass(frozen=True, slots=True)
class TopicConfig:
    """Sets (``value`` a string) or removes (``value`` None) one topic config override."""

    TYPE: ClassVar[str] = "TopicConfig"
    VERSION: ClassVar[int] = 1
    topic_id: UUID
    key: str
    value: str | None


@dataclass(frozen=True, slots=True)
class Partition:
    """A new partition with its whole state (also how snapshots carry partitions).

    ``replicas[0]`` is the preferred leader. During a reassignment ``replicas`` holds the
    target replicas followed by the ones being removed (as KRaft does), ``adding_replicas``
    the targets that are new and ``removing_replicas`` the ones going away."""

    TYPE: ClassVar[str] = "Partition"
    VERSION: ClassVar[int] = 1
    topic_id: UUID
    partition: int
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class PartitionChange:
    """Changes some fields of a partition; None means "unchanged" (``()`` clears a list and
    ``leader=-1`` means "no leader"). Applying it bumps ``partition_epoch``; setting ``leader``
    (even to the same value, as KRaft does) bumps ``leader_epoch``, so the controller sets it
    only when leadership really moves."""

    TYPE: ClassVar[str] = "PartitionChange"
    VERSION: ClassVar[int] = 1
    topic_id: UUID
    partition: int
    leader: int | None = None
    isr: tuple[int, ...] | None = None
    replicas: tuple[int, ...] | None = None
    adding_replicas: tuple[int, ...] | None = None
    removing_replicas: tuple[int, ...] | None = None


@dataclass(frozen=True, slots=True)
class RemoveTopic:
    """Removes a topic with its configs and partitions."""

    TYPE: ClassVar[str] = "RemoveTopic"
    VERSION: ClassVar[int] = 1
    topic_id: UUID


# --- authorization: ACLs and client quotas ---------------------------------------------------
# (Kafka's AccessControlEntryRecord / RemoveAccessControlEntryRecord / ClientQuotaRecord.)


@dataclass(frozen=True, slots=True, kw_only=True)
class AccessControlEntry(AclBinding):
    """An ACL (its fields are AclBinding's) with the id the controller gave it at random;
    deleting an ACL removes it by id, so a delete and a re-create never get mixed up. The
    fields are inherited, not nested, so the record encodes as flat fields as it always has."""

    TYPE: ClassVar[str] = "AccessControlEntry"
    VERSION: ClassVar[int] = 1
    acl_id: UUID

    @classmethod
    def of(cls, acl_id: UUID, acl: AclBinding) -> AccessControlEntry:
        return cls(**acl.acl_fields(), acl_id=acl_id)

    def binding(self) -> AclBinding:
        """The ACL without its id (equal for equal ACLs, whatever their ids)."""
        return AclBinding(**AclBinding.acl_fields(self))


@dataclass(frozen=True, slots=True)
class RemoveAccessControlEntry:
    TYPE: ClassVar[str] = "RemoveAccessControlEntry"
    VERSION: ClassVar[int] = 1
    acl_id: UUID


@dataclass(frozen=True, slots=True)
class ClientQuota:
    """Sets (``value``, a float's repr) or removes (None) one quota key of an entity. The
    entity is its types (``user``, ``client-id``) with their names; a None name is the
    type's default entity."""

    TYPE: ClassVar[str] = "ClientQuota"
    VERSION: ClassVar[int] = 1
    entity_types: tuple[str, ...]
    entity_names: tuple[str | None, ...]
    key: str
    value: str | None


@dataclass(frozen=True, slots=True)
class BrokerDynamicConfig:
    """Sets (``value``) or removes (None) one dynamic broker config (Kafka's ConfigRecord
    for a BROKER resource): ``broker`` is a node id, or "" for the cluster-wide default
    (Kafka's ``<default>`` entity). Only the keys Sluice can change at run time
    (controller.broker_config_admin) are ever written."""

    TYPE: ClassVar[str] = "BrokerDynamicConfig"
    VERSION: ClassVar[int] = 1
    broker: str
    key: str
    value: str | None


# --- authentication: SCRAM credentials (KIP-554) ---------------------------------------------
# In the metadata log so every broker, also one started later or after a controller
# failover, checks SCRAM logins against the same credentials. Never a password: the salted
# keys of RFC 5802 (base64), from which a password cannot be recovered.


@dataclass(frozen=True, slots=True)
class UserScramCredential:
    """Sets (or replaces) one user's credential for one mechanism."""

    TYPE: ClassVar[str] = "UserScramCredential"
    VERSION: ClassVar[int] = 1
    name: str
    mechanism: str  # SCRAM-SHA-256 | SCRAM-SHA-512
    salt: str  # base64
    stored_key: str  # base64
    server_key: str  # base64
    iterations: int


@dataclass(frozen=True, slots=True)
class RemoveUserScramCredential:
    TYPE: ClassVar[str] = "RemoveUserScramCredential"
    VERSION: ClassVar[int] = 1
    name: str
    mechanism: str


# --- end of authentication records ------------------------------------------------------------


# --- tiered storage of classic topics: KIP-950 disablement ------------------------------------
# A topic's tiering state, so that disabling tiered storage (remote.storage.enable=false)
# survives controller failover: the DISABLING state and the partitions done are in the log,
# and a new active controller asks the leaders of the partitions not done again.


@dataclass(frozen=True, slots=True)
class TopicTiering:
    """Sets a topic's tiering state: ENABLED (a new tiering period, ``generation`` one more
    than the last), DISABLING (remote data being retained read-only or deleted per
    ``policy``), DISABLED (every partition done). DISABLING and DISABLED keep the
    generation of the period they end, so a completion from an older period never counts."""

    TYPE: ClassVar[str] = "TopicTiering"
    VERSION: ClassVar[int] = 1
    topic_id: UUID
    state: str  # ENABLED | DISABLING | DISABLED
    generation: int
    policy: str = "retain"  # retain | delete: what disabling does with the remote data


@dataclass(frozen=True, slots=True)
class TieringPartitionDisabled:
    """One partition's leader finished the disablement of ``generation`` (stopped copying;
    deleted the remote data under the delete policy)."""

    TYPE: ClassVar[str] = "TieringPartitionDisabled"
    VERSION: ClassVar[int] = 1
    topic_id: UUID
    partition: int
    generation: int


# --- end of tiered storage records -------------------------------------------------------------


# --- topic migration between classic and diskless (issue 18) --------------------------------
# A migration's state is in the log, so a new active controller, and a new partition leader,
# resume it: the partitions without a PartitionSealed are still to be sealed by their leader.


@dataclass(frozen=True, slots=True)
class TopicMigration:
    """Sets a topic's migration: SEALING (the leaders seal their partitions at a boundary
    offset) or MIGRATED (every partition sealed; the topic is now of the ``direction``'s
    kind). ``generation`` counts the topic's migrations, so a late report of an older one
    never counts."""

    TYPE: ClassVar[str] = "TopicMigration"
    VERSION: ClassVar[int] = 1
    topic_id: UUID
    direction: str  # TO_DISKLESS | TO_CLASSIC
    state: str  # SEALING | MIGRATED
    generation: int


@dataclass(frozen=True, slots=True)
class PartitionSealed:
    """A partition's leader sealed its old log at ``boundary``: offsets from there on are in
    the new kind's log (which starts there, with the old producer states), older ones stay
    in the old log. ``old_bytes``: the old log's size at the seal."""

    TYPE: ClassVar[str] = "PartitionSealed"
    VERSION: ClassVar[int] = 1
    topic_id: UUID
    partition: int
    generation: int
    boundary: int
    old_bytes: int = 0
    # The old log's start at the seal (diskless → classic: the diskless log's start; below
    # it the topic's older classic log serves, if it was classic before). -1: unknown.
    old_start: int = -1


@dataclass(frozen=True, slots=True)
class SealedLogSize:
    """The partition's leader reports what is left of its sealed classic log (a topic
    migrated to diskless): retention and tiering shrink it, so "bytes still classic" is
    live for DescribeConfigs and the controller's metrics. Only a change is recorded, and
    only while bytes are left, so it is rare (a segment deleted)."""

    TYPE: ClassVar[str] = "SealedLogSize"
    VERSION: ClassVar[int] = 1
    topic_id: UUID
    partition: int
    generation: int
    old_bytes: int


# --- end of migration records -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class FeatureLevel:
    """A feature's finalized level (Kafka's FeatureLevelRecord, written by UpdateFeatures).
    Level 0 is kept too: it means the feature is disabled, which overrides the brokers'
    configured default (common/features.py)."""

    TYPE: ClassVar[str] = "FeatureLevel"
    VERSION: ClassVar[int] = 1
    name: str
    level: int


Record = Union[  # noqa: UP007 - a runtime alias, also used by isinstance checks
    RegisterBroker,
    UnregisterBroker,
    FenceBroker,
    UnfenceBroker,
    BrokerEpochCounter,
    Topic,
    TopicConfig,
    Partition,
    PartitionChange,
    RemoveTopic,
    AccessControlEntry,
    RemoveAccessControlEntry,
    ClientQuota,
    BrokerDynamicConfig,
    UserScramCredential,
    RemoveUserScramCredential,
    TopicTiering,
    TieringPartitionDisabled,
    TopicMigration,
    PartitionSealed,
    SealedLogSize,
    FeatureLevel,
]

RECORD_TYPES: dict[str, type] = {cls.TYPE: cls for cls in typing.get_args(Record)}


# --- encoding -------------------------------------------------------------------------------


def _to_json(value: Any) -> Any:
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, tuple):
        return [_to_json(v) for v in value]
    return value


def _from_json(hint: Any, value: Any, where: str) -> Any:
    """Converts ``value`` to the annotated type, checking it (a corrupt or hostile entry must
    fail here, not leave a wrongly typed field in the image)."""
    origin = typing.get_origin(hint)
    if origin in (Union, types.UnionType):
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _from_json(inner, value, where)
    if origin is tuple:
        if not isinstance(value, list):
            raise DecodeError(f"{where}: expected a list, got {value!r}")
        (item, _ellipsis) = typing.get_args(hint)
        return tuple(_from_json(item, v, where) for v in value)
    if hint is UUID:
        if not isinstance(value, str):
            raise DecodeError(f"{where}: expected a UUID string, got {value!r}")
        try:
            return UUID(value)
        except ValueError as exc:
            raise DecodeError(f"{where}: bad UUID {value!r}") from exc
    if hint is bool:
        if not isinstance(value, bool):
            raise DecodeError(f"{where}: expected a boolean, got {value!r}")
        return value
    if hint is int:
        if not isinstance(value, int) or isinstance(value, bool):
            raise DecodeError(f"{where}: expected an integer, got {value!r}")
        return value
    if hint is str:
        if not isinstance(value, str):
            raise DecodeError(f"{where}: expected a string, got {value!r}")
        return value
    raise DecodeError(f"{where}: unsupported field type {hint!r}")  # pragma: no cover


_HINTS: dict[type, dict[str, Any]] = {
    cls: typing.get_type_hints(cls) for cls in RECORD_TYPES.values()
}


def record_to_dict(record: Record) -> dict[str, Any]:
    out: dict[str, Any] = {"t": record.TYPE, "v": record.VERSION}
    for f in dataclasses.fields(record):
        out[f.name] = _to_json(getattr(record, f.name))
    return out


def record_from_dict(data: Any) -> Record:
    if not isinstance(data, dict):
        raise DecodeError(f"a record must be an object, got {data!r}")
    tag = data.get("t")
    cls = RECORD_TYPES.get(tag) if isinstance(tag, str) else None
    if cls is None:
        raise DecodeError(f"unknown record type {tag!r}")
    version = data.get("v")
    if not isinstance(version, int) or not 1 <= version <= cls.VERSION:
        raise DecodeError(
            f"{tag}: unsupported version {version!r} (this reader knows 1..{cls.VERSION})"
        )
    hints = _HINTS[cls]
    kwargs: dict[str, Any] = {}
    for f in dataclasses.fields(cls):
        if f.name in data:
            kwargs[f.name] = _from_json(hints[f.name], data[f.name], f"{tag}.{f.name}")
        elif f.default is dataclasses.MISSING:
            raise DecodeError(f"{tag}: missing field {f.name!r}")
    return cls(**kwargs)


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _loads(data: bytes) -> Any:
    try:
        return json.loads(data)
    except (ValueError, UnicodeDecodeError) as exc:
        raise DecodeError(f"not JSON: {exc}") from exc


def encode(record: Record) -> bytes:
    return _dumps(record_to_dict(record))


def decode(data: bytes) -> Record:
    return record_from_dict(_loads(data))


def encode_batch(records: typing.Iterable[Record]) -> bytes:
    """The payload of one Raft entry (or of a snapshot): records applied in order, together."""
    return _dumps({"v": BATCH_VERSION, "records": [record_to_dict(r) for r in records]})


def decode_batch(data: bytes) -> list[Record]:
    obj = _loads(data)
    if not isinstance(obj, dict) or obj.get("v") != BATCH_VERSION:
        raise DecodeError("not a version 1 record batch")
    items = obj.get("records")
    if not isinstance(items, list):
        raise DecodeError("a record batch needs a list of records")
    return [record_from_dict(item) for item in items]
