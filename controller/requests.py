"""Requests to the controller logic and its answers, as plain data.

The broker-facing adapters (Kafka APIs 62/63, CreateTopics, ...) convert kio requests into
these and the results back; the logic itself never sees the wire format.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Generic, TypeVar
from uuid import UUID

from kio.schema.errors import ErrorCode

from .records import Record

T = TypeVar("T")


@dataclass
class Outcome(Generic[T]):
    """What a request produced: ``records`` to propose as one Raft entry (possibly none),
    and the ``response``, true once (and only if) those records are committed."""

    records: list[Record]
    response: T


@dataclass(frozen=True)
class BrokerRegistrationRequest:
    node_id: int
    incarnation_id: UUID
    host: str
    port: int
    rack: str | None = None
    cluster_id: str | None = None
    listeners: tuple[str, ...] = ()  # "NAME://host:port" of every advertised listener


@dataclass(frozen=True)
class RegistrationResult:
    error_code: ErrorCode
    error_message: str | None = None
    broker_epoch: int = -1


@dataclass(frozen=True)
class HeartbeatResult:
    error_code: ErrorCode
    error_message: str | None = None
    is_fenced: bool = True
    should_shut_down: bool = False
    # KIP-950's DisableRemoteTopic for the partitions this broker leads, sent with every
    # answer until the broker acknowledges it (controller.tiering).
    disable_remote: tuple[DisableRemoteTopic, ...] = ()


@dataclass(frozen=True)
class DisableRemoteTopic:
    """KIP-950's controller-to-broker request, for one partition: its leader at
    ``leader_epoch`` stops tiering it (``policy`` retain) or deletes its tiered data
    (delete), then acknowledges (``DisableRemoteAck``)."""

    topic_id: UUID
    partition: int
    leader_epoch: int
    generation: int
    policy: str


@dataclass(frozen=True)
class DisableRemoteAck:
    """A leader's answer to ``DisableRemoteTopic``, carried by its next heartbeat; the
    controller records the partition done only from its current leader at its current
    leader epoch, with no error."""

    topic_id: UUID
    partition: int
    leader_epoch: int
    generation: int
    error_code: ErrorCode = ErrorCode.none


@dataclass(frozen=True)
class ErrorResult:
    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True)
class NewTopic:
    name: str
    num_partitions: int = -1  # -1: the controller's default
    replication_factor: int = -1  # -1 or 1: managed (one replica per rack)
    assignments: Mapping[int, Sequence[int]] | None = None  # refused: placement is managed
    configs: Mapping[str, str | None] = field(default_factory=dict)
    # Set by a broker that created the topic's logs in the batch coordinator before asking:
    # the topic then has logs from the moment it exists. None: the controller picks one.
    topic_id: UUID | None = None


@dataclass(frozen=True)
class CreateTopicResult:
    name: str
    error_code: ErrorCode
    error_message: str | None = None
    topic_id: UUID | None = None
    num_partitions: int = -1
    replication_factor: int = -1
    configs: Mapping[str, str] = field(default_factory=dict)  # the explicit overrides


@dataclass(frozen=True)
class DeleteTopicResult:
    name: str | None
    topic_id: UUID | None
    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True)
class NewPartitions:
    name: str
    count: int  # the new total
    assignments: Sequence[Sequence[int]] | None = None  # refused: placement is managed


@dataclass(frozen=True)
class TopicResult:
    name: str
    error_code: ErrorCode
    error_message: str | None = None


class OpType(IntEnum):
    """IncrementalAlterConfigs operations (Kafka's AlterConfigOp.OpType ids)."""

    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True)
class ConfigOp:
    key: str
    op: int
    value: str | None = None


@dataclass(frozen=True)
class AlterTopicConfigs:
    name: str
    ops: Sequence[ConfigOp]


@dataclass(frozen=True)
class Reassignment:
    topic: str
    partition: int
    replicas: Sequence[int] | None  # None cancels the reassignment in progress


@dataclass(frozen=True)
class LeaderElection:
    """ElectLeaders: ``partitions`` None means every partition of the cluster."""

    election_type: int  # 0 preferred, 1 unclean (Kafka's ElectionType)
    partitions: Sequence[tuple[str, int]] | None


@dataclass(frozen=True)
class ElectionResult:
    topic: str
    partition: int
    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True)
class ReassignmentResult:
    topic: str
    partition: int
    error_code: ErrorCode
    error_message: str | None = None


@dataclass(frozen=True)
class OngoingReassignment:
    topic: str
    partition: int
    replicas: tuple[int, ...]
    adding_replicas: tuple[int, ...]
    removing_replicas: tuple[int, ...]


# --- AlterPartition (classic partitions' ISR changes, from their leaders) -------------------


@dataclass(frozen=True)
class IsrChange:
    """One partition of an AlterPartition request: the leader's view (its leader epoch and
    the partition epoch it last saw) and the ISR it wants."""

    topic_id: UUID
    partition: int
    leader_epoch: int
    partition_epoch: int
    new_isr: tuple[int, ...]


@dataclass(frozen=True)
class IsrChangeResult:
    """The partition's state once the request's records are committed (or as it is, on an
    error), so the leader can carry on without waiting for the metadata log."""

    topic_id: UUID
    partition: int
    error_code: ErrorCode
    error_message: str | None = None
    leader: int = -1
    leader_epoch: int = -1
    isr: tuple[int, ...] = ()
    partition_epoch: int = -1


@dataclass(frozen=True)
class AlterPartitionResult:
    error_code: ErrorCode  # STALE_BROKER_EPOCH for the whole request, else NONE
    partitions: list[IsrChangeResult] = field(default_factory=list)


# --- authentication: SCRAM credentials (KIP-554) ---------------------------------------------


@dataclass(frozen=True)
class ScramUpsertion:
    """A credential as the broker derived it from AlterUserScramCredentials: salted keys,
    never the password (nor the salted password)."""

    name: str
    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True)
class ScramDeletion:
    name: str
    mechanism: str


@dataclass(frozen=True)
class ScramResult:
    user: str
    error_code: ErrorCode
    error_message: str | None = None
