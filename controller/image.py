"""The metadata image: cluster state built by applying metadata records in log order.

Voters build it from committed entries; brokers build the same one by following the log.
``apply`` decides nothing (see ``controller.records``), so equal record sequences give
equal images. It checks a record against the image first and raises ``ImageError`` without
changing anything when the record does not fit (a controller bug, or records computed on a
stale image): the caller may stop, or log and skip — either way every node does the same.

Brokers without a rack are grouped under the rack ``None``: to placement they are one rack
(see ``controller.placement``).
"""

from __future__ import annotations

from base64 import b64decode, b64encode
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field, replace
from uuid import UUID

from .records import (
    NO_LEADER,
    AccessControlEntry,
    BrokerDynamicConfig,
    BrokerEpochCounter,
    ClientQuota,
    FeatureLevel,
    FenceBroker,
    Partition,
    PartitionChange,
    PartitionSealed,
    Record,
    RegisterBroker,
    RemoveAccessControlEntry,
    RemoveTopic,
    RemoveUserScramCredential,
    SealedLogSize,
    TieringPartitionDisabled,
    Topic,
    TopicConfig,
    TopicMigration,
    TopicTiering,
    UnfenceBroker,
    UnregisterBroker,
    UserScramCredential,
)
from .tiering_state import (
    TIERING_DISABLING,
    TIERING_ENABLED,
    TIERING_MOVES,
    TIERING_POLICIES,
    TIERING_STATES,
    TieringState,
)

DISKLESS_ENABLE = "diskless.enable"


class ImageError(ValueError):
    """A record that does not fit the image it is applied to."""


@dataclass(frozen=True, slots=True)
class BrokerRegistration:
    node_id: int
    incarnation_id: UUID
    broker_epoch: int
    host: str
    port: int
    rack: str | None
    fenced: bool
    listeners: tuple[str, ...] = ()  # "NAME://host:port"


@dataclass(frozen=True, slots=True)
class ScramEntry:
    """One SCRAM credential: salted keys only (RFC 5802), never a password."""

    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int


@dataclass(frozen=True, slots=True)
class PartitionState:
    replicas: tuple[int, ...]
    isr: tuple[int, ...]
    leader: int
    leader_epoch: int = 0
    partition_epoch: int = 0
    adding_replicas: tuple[int, ...] = ()
    removing_replicas: tuple[int, ...] = ()

    @property
    def reassigning(self) -> bool:
        return bool(self.adding_replicas or self.removing_replicas)

    @property
    def original_replicas(self) -> tuple[int, ...]:
        """The replicas before the reassignment in progress (all of them if none is)."""
        return tuple(r for r in self.replicas if r not in self.adding_replicas)

    @property
    def target_replicas(self) -> tuple[int, ...]:
        """The replicas once the reassignment in progress completes."""
        return tuple(r for r in self.replicas if r not in self.removing_replicas)


@dataclass(slots=True)
class TopicImage:
    name: str
    topic_id: UUID
    configs: dict[str, str] = field(default_factory=dict)
    partitions: dict[int, PartitionState] = field(default_factory=dict)
    # Tiered storage (see the block at the end): None until a TopicTiering record.
    tiering: TieringState | None = None
    # Migration between classic and diskless (see the block at the end): None until one.
    migration: MigrationState | None = None
    # Recorded at creation (records.Topic; None until known for a topic from an older log,
    # see _partition): the RF assigned then, and whether the old RF=1 rule created it.
    replication_factor: int | None = None
    legacy: bool | None = None

    @property
    def diskless(self) -> bool:
        # Diskless is the default: only an explicit "false" makes a classic topic.
        return self.configs.get(DISKLESS_ENABLE, "true").lower() != "false"

    def copy(self) -> TopicImage:
        # PartitionState is immutable: copying the dicts is a full copy.
        return TopicImage(
            self.name,
            self.topic_id,
            dict(self.configs),
            dict(self.partitions),
            self.tiering,
            self.migration,
            self.replication_factor,
            self.legacy,
        )


def _check_partition(where: str, p: PartitionState) -> None:
    """Structural invariants every partition keeps after every record."""
    if not p.replicas:
        raise ImageError(f"{where}: no replicas")
    if len(set(p.replicas)) != len(p.replicas):
        raise ImageError(f"{where}: duplicate replicas {p.replicas}")
    if any(r < 0 for r in p.replicas):
        raise ImageError(f"{where}: negative replica id in {p.replicas}")
    if len(set(p.isr)) != len(p.isr) or not set(p.isr) <= set(p.replicas):
        raise ImageError(f"{where}: ISR {p.isr} is not a subset of replicas {p.replicas}")
    if p.leader != NO_LEADER and p.leader not in p.isr:
        raise ImageError(f"{where}: leader {p.leader} not in ISR {p.isr}")
    if not set(p.adding_replicas) <= set(p.replicas) or not set(p.removing_replicas) <= set(
        p.replicas
    ):
        raise ImageError(f"{where}: adding/removing replicas not among replicas {p.replicas}")
    if set(p.adding_replicas) & set(p.removing_replicas):
        raise ImageError(f"{where}: a replica both added and removed")
    if p.removing_replicas and set(p.replicas) == set(p.removing_replicas):
        raise ImageError(f"{where}: a reassignment removing every replica")


class MetadataImage:
    def __init__(self) -> None:
        self.brokers: dict[int, BrokerRegistration] = {}
        self.topics: dict[UUID, TopicImage] = {}
        self._names: dict[str, UUID] = {}
        # Largest broker epoch ever handed out; new registrations get a larger one.
        self.last_broker_epoch = 0
        # Authorization (see the block at the end): replaced, never mutated, on a change.
        self.acls: dict[UUID, AccessControlEntry] = {}
        self.quotas: dict[QuotaEntity, dict[str, float]] = {}
        # Dynamic broker configs by broker ("" = the cluster default): replaced on a change.
        self.broker_configs: dict[str, dict[str, str]] = {}
        # SCRAM credentials by (user, mechanism): authentication (UserScramCredential).
        self.scram_credentials: dict[tuple[str, str], ScramEntry] = {}
        # Finalized feature levels written by UpdateFeatures (FeatureLevel; 0: disabled);
        # a feature not here is at the brokers' configured level. Replaced on a change.
        self.features: dict[str, int] = {}

    # --- queries (used by the controller and by brokers) ---------------------------------

    def topic(self, name: str) -> TopicImage | None:
        topic_id = self._names.get(name)
        return None if topic_id is None else self.topics[topic_id]

    def topic_by_id(self, topic_id: UUID) -> TopicImage | None:
        return self.topics.get(topic_id)

    def partition(self, topic_id: UUID, partition: int) -> PartitionState | None:
        topic = self.topics.get(topic_id)
        return None if topic is None else topic.partitions.get(partition)

    def is_alive(self, node_id: int) -> bool:
        """Registered and not fenced: may lead and is in the ISR of its diskless partitions."""
        broker = self.brokers.get(node_id)
        return broker is not None and not broker.fenced

    def alive_brokers(self) -> set[int]:
        return {b.node_id for b in self.brokers.values() if not b.fenced}

    def racks(self) -> set[str | None]:
        """Distinct racks of the registered brokers (None: brokers without a rack)."""
        return {b.rack for b in self.brokers.values()}

    def offline_replicas(self, p: PartitionState) -> list[int]:
        """Replicas not alive (Metadata's offline_replicas; what under-replicated means here)."""
        return [r for r in p.replicas if not self.is_alive(r)]

    def iter_partitions(self) -> Iterator[tuple[TopicImage, int, PartitionState]]:
        """Every partition, by topic name then index: equal images iterate alike, so the
        controller's decisions do not depend on the order records happened to arrive in."""
        for topic in sorted(self.topics.values(), key=lambda t: t.name):
            for index in sorted(topic.partitions):
                yield topic, index, topic.partitions[index]

    # --- applying records -----------------------------------------------------------------

    def apply(self, record: Record) -> None:
        """Applies one record, or raises ImageError leaving the image unchanged."""
        handler = _HANDLERS.get(type(record))
        if handler is None:
            raise ImageError(f"not a metadata record: {record!r}")
        handler(self, record)

    def apply_all(self, records: Iterable[Record]) -> None:
        """Applies records in order, stopping at the first that does not fit (the ones
        before it stay applied). For one Raft entry use ``apply_batch``."""
        for record in records:
            self.apply(record)

    def apply_batch(self, records: Iterable[Record]) -> None:
        """Applies the records of one entry all or none: if one does not fit, ImageError is
        raised with the image as it was before the batch."""
        saved_brokers: dict[int, BrokerRegistration | None] = {}
        saved_topics: dict[UUID, TopicImage | None] = {}
        saved_names: dict[str, UUID] | None = None  # copied at the first Topic/RemoveTopic
        saved_epoch = self.last_broker_epoch
        saved_acls, saved_quotas = self.acls, self.quotas
        saved_broker_configs = self.broker_configs
        saved_scram = dict(self.scram_credentials)
        saved_features = self.features
        try:
            for record in records:
                node_id = getattr(record, "node_id", None)
                if node_id is not None and node_id not in saved_brokers:
                    saved_brokers[node_id] = self.brokers.get(node_id)
                topic_id = getattr(record, "topic_id", None)
                if topic_id is not None and topic_id not in saved_topics:
                    old = self.topics.get(topic_id)
                    saved_topics[topic_id] = None if old is None else old.copy()
                if isinstance(record, Topic | RemoveTopic) and saved_names is None:
                    saved_names = dict(self._names)
                self.apply(record)
        except ImageError:
            for node_id, broker in saved_brokers.items():
                if broker is None:
                    self.brokers.pop(node_id, None)
                else:
                    self.brokers[node_id] = broker
            for topic_id, topic in saved_topics.items():
                if topic is None:
                    self.topics.pop(topic_id, None)
                else:
                    self.topics[topic_id] = topic
            if saved_names is not None:
                self._names = saved_names
            self.last_broker_epoch = saved_epoch
            self.acls, self.quotas = saved_acls, saved_quotas
            self.broker_configs = saved_broker_configs
            self.scram_credentials = saved_scram
            self.features = saved_features
            raise

    def _register(self, r: RegisterBroker) -> None:
        if r.node_id < 0:
            raise ImageError(f"broker id {r.node_id} is negative")
        self.brokers[r.node_id] = BrokerRegistration(
            r.node_id,
            r.incarnation_id,
            r.broker_epoch,
            r.host,
            r.port,
            r.rack,
            r.fenced,
            r.listeners,
        )
        self.last_broker_epoch = max(self.last_broker_epoch, r.broker_epoch)

    def _broker(self, node_id: int, epoch: int, what: str) -> BrokerRegistration:
        broker = self.brokers.get(node_id)
        if broker is None:
            raise ImageError(f"{what}: broker {node_id} is not registered")
        if broker.broker_epoch != epoch:
            raise ImageError(
                f"{what}: broker {node_id} has epoch {broker.broker_epoch}, record says {epoch}"
            )
        return broker

    def _unregister(self, r: UnregisterBroker) -> None:
        self._broker(r.node_id, r.broker_epoch, "UnregisterBroker")
        del self.brokers[r.node_id]

    def _fence(self, r: FenceBroker) -> None:
        broker = self._broker(r.node_id, r.broker_epoch, "FenceBroker")
        self.brokers[r.node_id] = replace(broker, fenced=True)

    def _unfence(self, r: UnfenceBroker) -> None:
        broker = self._broker(r.node_id, r.broker_epoch, "UnfenceBroker")
        self.brokers[r.node_id] = replace(broker, fenced=False)

    def _epoch_counter(self, r: BrokerEpochCounter) -> None:
        self.last_broker_epoch = max(self.last_broker_epoch, r.last_broker_epoch)

    def _topic(self, r: Topic) -> None:
        if r.name in self._names:
            raise ImageError(f"Topic: name {r.name!r} already exists")
        if r.topic_id in self.topics:
            raise ImageError(f"Topic: id {r.topic_id} already exists")
        self.topics[r.topic_id] = TopicImage(
            r.name, r.topic_id, replication_factor=r.replication_factor, legacy=r.legacy
        )
        self._names[r.name] = r.topic_id

    def _existing_topic(self, topic_id: UUID, what: str) -> TopicImage:
        topic = self.topics.get(topic_id)
        if topic is None:
            raise ImageError(f"{what}: unknown topic id {topic_id}")
        return topic

    def _config(self, r: TopicConfig) -> None:
        topic = self._existing_topic(r.topic_id, "TopicConfig")
        if r.value is None:
            topic.configs.pop(r.key, None)
        else:
            topic.configs[r.key] = r.value

    def _partition(self, r: Partition) -> None:
        topic = self._existing_topic(r.topic_id, "Partition")
        if r.partition < 0 or r.partition in topic.partitions:
            raise ImageError(f"Partition: {topic.name}-{r.partition} exists or is negative")
        state = PartitionState(
            r.replicas,
            r.isr,
            r.leader,
            r.leader_epoch,
            r.partition_epoch,
            r.adding_replicas,
            r.removing_replicas,
        )
        _check_partition(f"Partition {topic.name}-{r.partition}", state)
        topic.partitions[r.partition] = state
        if topic.replication_factor is None or topic.legacy is None:
            self._infer_creation(topic, state)

    def _infer_creation(self, topic: TopicImage, first: PartitionState) -> None:
        """A Topic record from before its creation fields (records.Topic): they come from
        its first partition, as the log has it right after the creation. Deterministic in
        the log, so every node infers alike; snapshots then carry the values."""
        rf = len(first.original_replicas)
        if topic.replication_factor is None:
            topic.replication_factor = rf
        if topic.legacy is None:
            topic.legacy = topic.diskless and rf == 1 and len(self.racks()) > 1

    def _partition_change(self, r: PartitionChange) -> None:
        topic = self._existing_topic(r.topic_id, "PartitionChange")
        old = topic.partitions.get(r.partition)
        if old is None:
            raise ImageError(f"PartitionChange: unknown partition {topic.name}-{r.partition}")
        new = PartitionState(
            replicas=old.replicas if r.replicas is None else r.replicas,
            isr=old.isr if r.isr is None else r.isr,
            leader=old.leader if r.leader is None else r.leader,
            leader_epoch=old.leader_epoch + (0 if r.leader is None else 1),
            partition_epoch=old.partition_epoch + 1,
            adding_replicas=old.adding_replicas if r.adding_replicas is None else r.adding_replicas,
            removing_replicas=old.removing_replicas
            if r.removing_replicas is None
            else r.removing_replicas,
        )
        _check_partition(f"PartitionChange {topic.name}-{r.partition}", new)
        topic.partitions[r.partition] = new

    def _remove_topic(self, r: RemoveTopic) -> None:
        topic = self._existing_topic(r.topic_id, "RemoveTopic")
        del self.topics[r.topic_id]
        del self._names[topic.name]

    # --- authentication: SCRAM credentials -------------------------------------------------

    def _scram_credential(self, r: UserScramCredential) -> None:
        try:
            entry = ScramEntry(
                b64decode(r.salt, validate=True),
                b64decode(r.stored_key, validate=True),
                b64decode(r.server_key, validate=True),
                r.iterations,
            )
        except ValueError as exc:
            raise ImageError(f"UserScramCredential {r.name}: bad base64") from exc
        self.scram_credentials[(r.name, r.mechanism)] = entry

    def _remove_scram_credential(self, r: RemoveUserScramCredential) -> None:
        self.scram_credentials.pop((r.name, r.mechanism), None)

    def _scram_snapshot(self) -> list[Record]:
        return [
            UserScramCredential(
                name,
                mechanism,
                b64encode(e.salt).decode(),
                b64encode(e.stored_key).decode(),
                b64encode(e.server_key).decode(),
                e.iterations,
            )
            for (name, mechanism), e in sorted(self.scram_credentials.items())
        ]

    # --- snapshots, copies, equality --------------------------------------------------------

    def snapshot(self) -> list[Record]:
        """Records that rebuild this image in an empty one (``from_records``), in a canonical
        order: equal images give equal snapshots (and equal bytes with ``encode_batch``)."""
        out: list[Record] = [BrokerEpochCounter(self.last_broker_epoch)]
        for b in sorted(self.brokers.values(), key=lambda b: b.node_id):
            out.append(
                RegisterBroker(
                    b.node_id,
                    b.incarnation_id,
                    b.broker_epoch,
                    b.host,
                    b.port,
                    b.rack,
                    b.fenced,
                    b.listeners,
                )
            )
        for topic in sorted(self.topics.values(), key=lambda t: t.name):
            out.append(Topic(topic.name, topic.topic_id, topic.replication_factor, topic.legacy))
            out.extend(
                TopicConfig(topic.topic_id, key, value)
                for key, value in sorted(topic.configs.items())
            )
            for index in sorted(topic.partitions):
                p = topic.partitions[index]
                out.append(
                    Partition(
                        topic.topic_id,
                        index,
                        p.replicas,
                        p.isr,
                        p.leader,
                        p.leader_epoch,
                        p.partition_epoch,
                        p.adding_replicas,
                        p.removing_replicas,
                    )
                )
            out.extend(_tiering_snapshot(topic))
            out.extend(_migration_snapshot(topic))
        out.extend(_authorization_snapshot(self))
        out.extend(self._scram_snapshot())
        out.extend(FeatureLevel(name, level) for name, level in sorted(self.features.items()))
        return out

    @classmethod
    def from_records(cls, records: Iterable[Record]) -> MetadataImage:
        image = cls()
        image.apply_all(records)
        return image

    def copy(self) -> MetadataImage:
        """An independent copy, e.g. a speculative image that already holds the records the
        active controller proposed but that are not committed yet."""
        other = MetadataImage()
        other.brokers = dict(self.brokers)
        other.topics = {tid: t.copy() for tid, t in self.topics.items()}
        other._names = dict(self._names)
        other.last_broker_epoch = self.last_broker_epoch
        other.acls, other.quotas = self.acls, self.quotas  # immutable: shared
        other.broker_configs = self.broker_configs  # immutable: shared
        other.scram_credentials = dict(self.scram_credentials)
        other.features = self.features  # immutable: shared
        return other

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, MetadataImage):
            return NotImplemented
        return (
            self.brokers == other.brokers
            and self.topics == other.topics
            and self.last_broker_epoch == other.last_broker_epoch
            and self.acls == other.acls
            and self.quotas == other.quotas
            and self.broker_configs == other.broker_configs
            and self.scram_credentials == other.scram_credentials
            and self.features == other.features
        )

    __hash__ = None  # type: ignore[assignment]  # mutable

    def __repr__(self) -> str:
        return (
            f"MetadataImage(brokers={len(self.brokers)}, topics={len(self.topics)}, "
            f"last_broker_epoch={self.last_broker_epoch})"
        )


_HANDLERS = {
    RegisterBroker: MetadataImage._register,
    UnregisterBroker: MetadataImage._unregister,
    FenceBroker: MetadataImage._fence,
    UnfenceBroker: MetadataImage._unfence,
    BrokerEpochCounter: MetadataImage._epoch_counter,
    Topic: MetadataImage._topic,
    TopicConfig: MetadataImage._config,
    Partition: MetadataImage._partition,
    PartitionChange: MetadataImage._partition_change,
    RemoveTopic: MetadataImage._remove_topic,
    UserScramCredential: MetadataImage._scram_credential,
    RemoveUserScramCredential: MetadataImage._remove_scram_credential,
}


# --- authorization: ACLs and client quotas ---------------------------------------------------
# A quota entity: its (type, name) pairs sorted by type; a None name is the type's default.
QuotaEntity = tuple[tuple[str, str | None], ...]


def quota_entity(types: Iterable[str], names: Iterable[str | None]) -> QuotaEntity:
    return tuple(sorted(zip(types, names, strict=True), key=lambda pair: pair[0]))


def _apply_acl(image: MetadataImage, r: AccessControlEntry) -> None:
    if r.acl_id in image.acls:
        raise ImageError(f"AccessControlEntry: id {r.acl_id} already exists")
    image.acls = {**image.acls, r.acl_id: r}


def _remove_acl(image: MetadataImage, r: RemoveAccessControlEntry) -> None:
    if r.acl_id not in image.acls:
        raise ImageError(f"RemoveAccessControlEntry: unknown id {r.acl_id}")
    image.acls = {k: v for k, v in image.acls.items() if k != r.acl_id}


def _apply_quota(image: MetadataImage, r: ClientQuota) -> None:
    if len(r.entity_types) != len(r.entity_names) or not r.entity_types:
        raise ImageError("ClientQuota: entity types and names do not pair up")
    entity = quota_entity(r.entity_types, r.entity_names)
    values = dict(image.quotas.get(entity, {}))
    if r.value is None:
        values.pop(r.key, None)
    else:
        try:
            values[r.key] = float(r.value)
        except ValueError:
            raise ImageError(f"ClientQuota: {r.key} is not a number: {r.value!r}") from None
    quotas = dict(image.quotas)
    if values:
        quotas[entity] = values
    else:
        quotas.pop(entity, None)
    image.quotas = quotas


def _apply_broker_config(image: MetadataImage, r: BrokerDynamicConfig) -> None:
    if r.broker and not r.broker.isdigit():
        raise ImageError(f"BrokerDynamicConfig: broker {r.broker!r} is not a node id")
    values = dict(image.broker_configs.get(r.broker, {}))
    if r.value is None:
        values.pop(r.key, None)
    else:
        values[r.key] = r.value
    configs = dict(image.broker_configs)
    if values:
        configs[r.broker] = values
    else:
        configs.pop(r.broker, None)
    image.broker_configs = configs


def _apply_feature_level(image: MetadataImage, r: FeatureLevel) -> None:
    if not r.name or r.level < 0:
        raise ImageError(f"FeatureLevel: bad feature {r.name!r} level {r.level}")
    image.features = {**image.features, r.name: r.level}


_HANDLERS[FeatureLevel] = _apply_feature_level


def _authorization_snapshot(image: MetadataImage) -> list[Record]:
    out: list[Record] = [image.acls[k] for k in sorted(image.acls)]
    for entity in sorted(image.quotas, key=repr):
        types = tuple(t for t, _ in entity)
        names = tuple(n for _, n in entity)
        for key, value in sorted(image.quotas[entity].items()):
            out.append(ClientQuota(types, names, key, repr(value)))
    for broker in sorted(image.broker_configs):
        for key, value in sorted(image.broker_configs[broker].items()):
            out.append(BrokerDynamicConfig(broker, key, value))
    return out


_HANDLERS.update(
    {
        AccessControlEntry: _apply_acl,
        RemoveAccessControlEntry: _remove_acl,
        ClientQuota: _apply_quota,
        BrokerDynamicConfig: _apply_broker_config,
    }
)


# --- tiered storage of classic topics: KIP-950 disablement -------------------------------------
# (records.TopicTiering / TieringPartitionDisabled; decisions in controller.tiering.)
def _apply_topic_tiering(image: MetadataImage, r: TopicTiering) -> None:
    topic = image._existing_topic(r.topic_id, "TopicTiering")
    if r.state not in TIERING_STATES or r.policy not in TIERING_POLICIES:
        raise ImageError(f"TopicTiering: bad state {r.state!r} or policy {r.policy!r}")
    old = topic.tiering
    if old is not None:
        if r.state not in TIERING_MOVES[old.state]:
            raise ImageError(f"TopicTiering {topic.name}: {old.state} cannot become {r.state}")
        # A new period (ENABLED) has a newer generation; the end of one keeps its own.
        want = old.generation + 1 if r.state == TIERING_ENABLED else old.generation
        if r.generation != want:
            raise ImageError(f"TopicTiering {topic.name}: generation {r.generation}, not {want}")
    topic.tiering = TieringState(r.state, r.generation, r.policy)


def _apply_partition_disabled(image: MetadataImage, r: TieringPartitionDisabled) -> None:
    topic = image._existing_topic(r.topic_id, "TieringPartitionDisabled")
    t = topic.tiering
    if r.partition not in topic.partitions:
        raise ImageError(f"TieringPartitionDisabled: unknown partition {topic.name}-{r.partition}")
    if t is None or t.state != TIERING_DISABLING or t.generation != r.generation:
        raise ImageError(
            f"TieringPartitionDisabled {topic.name}-{r.partition}: not disabling generation "
            f"{r.generation}"
        )
    topic.tiering = replace(t, done=t.done | {r.partition})


def _tiering_snapshot(topic: TopicImage) -> list[Record]:
    t = topic.tiering
    if t is None:
        return []
    out: list[Record] = [TopicTiering(topic.topic_id, t.state, t.generation, t.policy)]
    out.extend(TieringPartitionDisabled(topic.topic_id, p, t.generation) for p in sorted(t.done))
    return out


_HANDLERS.update(
    {
        TopicTiering: _apply_topic_tiering,
        TieringPartitionDisabled: _apply_partition_disabled,
    }
)


# --- topic migration between classic and diskless (issue 18) ---------------------------------
# (records.TopicMigration / PartitionSealed; decisions in controller.migration.)
TO_DISKLESS = "TO_DISKLESS"
TO_CLASSIC = "TO_CLASSIC"
MIGRATION_SEALING = "SEALING"
MIGRATION_MIGRATED = "MIGRATED"


@dataclass(frozen=True, slots=True)
class SealedPartition:
    boundary: int
    old_bytes: int = 0
    old_start: int = -1


@dataclass(frozen=True, slots=True)
class MigrationState:
    direction: str
    state: str
    generation: int
    # Partitions sealed in this migration: offsets >= boundary are in the new kind's log.
    sealed: tuple[tuple[int, SealedPartition], ...] = ()
    # The finished migration to diskless before this one (to classic): its sealed classic
    # logs still hold the offsets below its boundaries, also while this migration has not
    # sealed a partition yet (routing must not forget them then). None: there was none.
    earlier: MigrationState | None = None

    def boundary(self, partition: int) -> int | None:
        s = self.sealed_partition(partition)
        return None if s is None else s.boundary

    def sealed_partition(self, partition: int) -> SealedPartition | None:
        for index, s in self.sealed:
            if index == partition:
                return s
        return None

    @property
    def sealed_partitions(self) -> dict[int, SealedPartition]:
        return dict(self.sealed)

    def classic_seal_with_records(self, partition: int) -> SealedPartition | None:
        """The seal of the classic log below the partition's diskless part (this
        migration's, to diskless; the earlier one's, back to classic) while that sealed
        log still has records (its leader reports its size as retention and tiering shrink
        it); None when there is none or it is empty."""
        first = self if self.direction == TO_DISKLESS else self.earlier
        s = None if first is None else first.sealed_partition(partition)
        return s if s is not None and s.old_bytes != 0 else None


def _apply_topic_migration(image: MetadataImage, r: TopicMigration) -> None:
    topic = image._existing_topic(r.topic_id, "TopicMigration")
    if r.direction not in (TO_DISKLESS, TO_CLASSIC) or r.state not in (
        MIGRATION_SEALING,
        MIGRATION_MIGRATED,
    ):
        raise ImageError(f"TopicMigration: bad direction {r.direction!r} or state {r.state!r}")
    old = topic.migration
    if r.state == MIGRATION_SEALING:
        # A new migration: after the previous one finished (or the first one).
        if old is not None and old.state != MIGRATION_MIGRATED:
            raise ImageError(f"TopicMigration {topic.name}: a migration is in progress")
        # (Without one, any generation: a snapshot replays the current migration.)
        if old is not None and r.generation != old.generation + 1:
            raise ImageError(f"TopicMigration {topic.name}: generation {r.generation} is not next")
        earlier = old if old is not None and old.direction == TO_DISKLESS else None
        if earlier is not None:
            earlier = replace(earlier, earlier=None)  # one level: nothing older is read
        topic.migration = MigrationState(r.direction, r.state, r.generation, earlier=earlier)
        return
    if old is None or old.generation != r.generation or old.direction != r.direction:
        raise ImageError(f"TopicMigration {topic.name}: not migrating generation {r.generation}")
    topic.migration = replace(old, state=r.state)


def _apply_partition_sealed(image: MetadataImage, r: PartitionSealed) -> None:
    topic = image._existing_topic(r.topic_id, "PartitionSealed")
    m = topic.migration
    if r.partition not in topic.partitions:
        raise ImageError(f"PartitionSealed: unknown partition {topic.name}-{r.partition}")
    if m is None or m.generation != r.generation or r.boundary < 0:
        raise ImageError(
            f"PartitionSealed {topic.name}-{r.partition}: not migrating generation {r.generation}"
        )
    if m.boundary(r.partition) is not None:
        raise ImageError(f"PartitionSealed {topic.name}-{r.partition}: already sealed")
    sealed = tuple(
        sorted((*m.sealed, (r.partition, SealedPartition(r.boundary, r.old_bytes, r.old_start))))
    )
    topic.migration = replace(m, sealed=sealed)


def _apply_sealed_log_size(image: MetadataImage, r: SealedLogSize) -> None:
    topic = image._existing_topic(r.topic_id, "SealedLogSize")
    m = topic.migration
    s = None if m is None or m.generation != r.generation else m.sealed_partition(r.partition)
    if m is None or s is None or r.old_bytes < 0:
        raise ImageError(f"SealedLogSize {topic.name}-{r.partition}: not sealed in {r.generation}")
    sealed = tuple(
        (i, replace(x, old_bytes=r.old_bytes) if i == r.partition else x) for i, x in m.sealed
    )
    topic.migration = replace(m, sealed=sealed)


def _migration_snapshot(topic: TopicImage) -> list[Record]:
    m = topic.migration
    if m is None:
        return []
    # The earlier migration first (the next SEALING keeps it), then this one.
    out = [] if m.earlier is None else _one_migration(topic, m.earlier)
    return out + _one_migration(topic, m)


def _one_migration(topic: TopicImage, m: MigrationState) -> list[Record]:
    # SEALING first, the sealed partitions, then MIGRATED: replays the same moves.
    out: list[Record] = [
        TopicMigration(topic.topic_id, m.direction, MIGRATION_SEALING, m.generation)
    ]
    out.extend(
        PartitionSealed(topic.topic_id, index, m.generation, s.boundary, s.old_bytes, s.old_start)
        for index, s in m.sealed
    )
    if m.state == MIGRATION_MIGRATED:
        out.append(TopicMigration(topic.topic_id, m.direction, MIGRATION_MIGRATED, m.generation))
    return out


_HANDLERS.update(
    {
        TopicMigration: _apply_topic_migration,
        PartitionSealed: _apply_partition_sealed,
        SealedLogSize: _apply_sealed_log_size,
    }
)
