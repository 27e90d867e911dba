"""JSON forms of the controller's requests and results (controller/requests.py), for its HTTP API.

The HTTP API (controller/http_api.py) and the broker's client (broker/metadata/controller_client.py)
both use these two functions, so a field added to a request dataclass travels without further
code. UUIDs travel as strings, error codes as ints, Raft entries as base64.

Endpoints (all JSON; ``X-Sluice-Secret`` header when the controller has a secret):

* any controller — ``GET /v1/metadata?after=<index>&wait_ms=<ms>``: committed metadata after
  ``index`` as ``{"applied", "leader", "snapshot": b64|null, "entries": [{"index", "data"}]}``;
  waits up to ``wait_ms`` for something new. ``snapshot`` is set when ``after`` is older than
  what the controller retains; its records rebuild the image as of ``snapshot_index``.
* the active controller (others answer 421 ``{"leader", "leader_url"}``):
  ``POST /v1/brokers/register`` BrokerRegistrationRequest → RegistrationResult,
  ``POST /v1/brokers/heartbeat`` {node_id, broker_epoch, want_fence, want_shutdown,
  disabled_remote} → HeartbeatResult, ``POST /v1/brokers/unregister`` {node_id} → ErrorResult,
  ``POST /v1/topics/create`` {topics: [NewTopic], validate_only} → {results: [CreateTopicResult]},
  ``POST /v1/topics/delete`` {topics: [name], ids: [id]} → {results: [DeleteTopicResult]},
  ``POST /v1/topics/partitions`` {topics: [NewPartitions], validate_only} → {results},
  ``POST /v1/topics/configs`` {topics: [AlterTopicConfigs], validate_only} → {results},
  ``POST /v1/reassignments`` {reassignments: [Reassignment]} → {results},
  ``GET /v1/reassignments`` → {results},
  ``POST /v1/scram`` {deletions: [ScramDeletion], upsertions: [ScramUpsertion]} → {results:
  [ScramResult]} (salted keys only, base64; controller/scram_admin.py).
  Authorization (controller/acl_admin.py): ``POST /v1/acls/create`` {creations:
  [AclBinding]} → {results: [AclCreationResult]}, ``POST /v1/acls/delete`` {filters:
  [AclFilter]} → {results: [AclDeletionResult]} (AclBinding and AclFilter are
  common/acl.py's), ``POST /v1/quotas/alter`` {entries: [QuotaAlteration],
  validate_only} → {results: [QuotaResult]}.
  Classic partitions (controller/alter_partition.py): ``POST /v1/partitions/isr`` {broker_id,
  broker_epoch, changes: [IsrChange]} → AlterPartitionResult (AlterPartition: a leader's ISR
  shrink or expand).
  Tiered storage (controller/tiering.py): the heartbeat carries KIP-950's DisableRemoteTopic
  both ways: its body's ``disabled_remote`` [DisableRemoteAck] answers earlier requests, its
  answer's ``disable_remote`` [DisableRemoteTopic] lists the partitions the broker leads that
  it has yet to disable.
  Every write answer carries ``applied``: the metadata index that includes it, so a broker can
  wait until its own copy of the image has caught up before answering its client.
"""

from __future__ import annotations

import base64
import dataclasses
import enum
import types
import typing
from collections.abc import Mapping, Sequence
from typing import Any, TypeVar
from uuid import UUID

T = TypeVar("T")


def to_json(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_json(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, UUID):
        return str(value)
    if isinstance(value, bytes):
        return base64.b64encode(value).decode()
    if isinstance(value, Mapping):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_json(v) for v in value]
    return value


def from_json(cls: type[T], data: Any) -> T:
    """Build ``cls`` (a dataclass of controller/requests.py) from its JSON form."""
    return typing.cast(T, _convert(cls, data))


def _convert(tp: Any, data: Any) -> Any:
    if data is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        return _convert(options[0], data) if len(options) == 1 else data
    if dataclasses.is_dataclass(tp):
        hints = typing.get_type_hints(tp)
        kwargs = {
            f.name: _convert(hints[f.name], data[f.name])
            for f in dataclasses.fields(tp)
            if f.name in data
        }
        return tp(**kwargs)
    if isinstance(tp, type) and issubclass(tp, enum.Enum):
        return tp(data)
    if tp is UUID:
        return UUID(data)
    if tp is bytes:
        return base64.b64decode(data)
    if origin is not None and isinstance(origin, type) and issubclass(origin, Mapping):
        key_type, value_type = typing.get_args(tp)
        return {_convert(key_type, k): _convert(value_type, v) for k, v in data.items()}
    if origin is not None and isinstance(origin, type) and issubclass(origin, Sequence):
        (item_type, *_) = typing.get_args(tp) or (Any,)
        return [_convert(item_type, v) for v in data]
    if tp is int and isinstance(data, str):
        return int(data)  # JSON object keys (partition numbers) are strings
    return data
