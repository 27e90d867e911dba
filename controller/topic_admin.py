"""CreateTopics, DeleteTopics, CreatePartitions, IncrementalAlterConfigs (topics), and the
expansion of legacy RF=1 diskless topics: the topic half of ``controller.logic``.

Validation follows Kafka's order and error codes: duplicates in the request (INVALID_REQUEST),
the name (INVALID_TOPIC_EXCEPTION), existence (TOPIC_ALREADY_EXISTS) and '.'/'_' collisions,
the managed replication factor (INVALID_REQUEST for manual assignments,
INVALID_REPLICATION_FACTOR for RF other than -1/1), partitions (INVALID_PARTITIONS), configs
(INVALID_CONFIG, through the validator the process passes in ``ControllerConfig``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from uuid import UUID

from kio.schema.errors import ErrorCode

from common.topic_names import topic_name_error

from .classic_placement import ClassicPlacementError, manual_assignment_error, place_classic
from .election import (
    UNCLEAN_LEADER_ELECTION,
    change_to,
    desired_state,
    keeps_classic_isr,
    unclean_allowed,
)
from .image import DISKLESS_ENABLE, TO_CLASSIC, MetadataImage, PartitionState, TopicImage
from .leader_election import unclean_leaders
from .logic_config import ControllerConfig
from .migration import migration_records
from .placement import (
    Load,
    PlacementError,
    managed_replication_factor,
    needs_expansion,
    place_partitions,
    plan_rf_expansion,
)
from .records import Partition, Record, RemoveTopic, Topic, TopicConfig, TopicMigration
from .requests import (
    AlterTopicConfigs,
    CreateTopicResult,
    DeleteTopicResult,
    NewPartitions,
    NewTopic,
    OpType,
    Outcome,
    TopicResult,
)
from .tiering import config_error as tiering_config_error
from .tiering import tiering_records

OK = ErrorCode.none


def _collision_key(name: str) -> str:
    # Kafka: '.' and '_' collide in metric names, so "a.b" and "a_b" cannot both exist.
    return name.replace(".", "_")


def replication_factor_error(
    replication_factor: int, assignments: object, racks: int
) -> tuple[ErrorCode, str] | None:
    """The refusal of a diskless CreateTopics entry that tries to choose its own replicas."""
    if assignments:
        return (
            ErrorCode.invalid_request,
            "Manual partition assignments are not supported for diskless topics: the "
            "controller places one replica per rack",
        )
    # -1 and 1 ask for the managed factor; so does naming it. Kafka's own tools ask for 3
    # by default (Connect's and MirrorMaker 2's internal topics, among others), which a
    # Kafka of three brokers grants and so must a Sluice cluster in three racks. Any other
    # factor would be silently changed, so it is refused.
    if replication_factor not in (-1, 1, racks):
        return (
            ErrorCode.invalid_replication_factor,
            f"Replication factor {replication_factor} is not supported for diskless topics: "
            f"it is managed by the controller, one replica per rack (now {racks} rack(s)); "
            f"use -1, 1 or {racks}",
        )
    return None


class TopicAdmin:
    """Mixed into ``ControllerLogic``, which provides ``config``."""

    config: ControllerConfig

    def create_topics(
        self, image: MetadataImage, topics: Sequence[NewTopic], validate_only: bool = False
    ) -> Outcome[list[CreateTopicResult]]:
        cfg = self.config
        counts = Counter(t.name for t in topics)
        taken = {_collision_key(t.name): t.name for t in image.topics.values()}
        racks = managed_replication_factor(image)
        alive = image.alive_brokers()
        load: Load | None = None
        records: list[Record] = []
        results: list[CreateTopicResult] = []

        def fail(t: NewTopic, code: ErrorCode, message: str) -> None:
            results.append(CreateTopicResult(t.name, code, message))

        for t in topics:
            if counts[t.name] > 1:
                fail(t, ErrorCode.invalid_request, "Duplicate topic name in the request.")
                continue
            if (reason := topic_name_error(t.name)) is not None:
                fail(t, ErrorCode.invalid_topic_exception, reason)
                continue
            if image.topic(t.name) is not None:
                fail(t, ErrorCode.topic_already_exists, f"Topic '{t.name}' already exists.")
                continue
            if (other := taken.get(_collision_key(t.name))) is not None:
                fail(
                    t,
                    ErrorCode.invalid_topic_exception,
                    f"Topic '{t.name}' collides with existing topic: {other}",
                )
                continue
            diskless = self._diskless(t.configs)
            if diskless and (
                refusal := replication_factor_error(t.replication_factor, t.assignments, racks)
            ):
                fail(t, *refusal)
                continue
            if not diskless and t.assignments:
                if t.num_partitions != -1 or t.replication_factor != -1:
                    fail(
                        t,
                        ErrorCode.invalid_request,
                        "Both numPartitions or replicationFactor and replicasAssignments "
                        "were set. Both cannot be used at the same time.",
                    )
                    continue
                partitions = len(t.assignments)
            else:
                partitions = cfg.default_partitions if t.num_partitions == -1 else t.num_partitions
            if not 0 < partitions <= cfg.max_partitions:
                fail(
                    t,
                    ErrorCode.invalid_partitions,
                    f"Number of partitions must be between 1 and {cfg.max_partitions}.",
                )
                continue
            if (config_error := self._config_error(t.configs, creating=True)) is not None:
                fail(t, ErrorCode.invalid_config, config_error)
                continue
            load = Load.of(image) if load is None else load
            try:
                if diskless:
                    assignment = place_partitions(image.brokers, load, partitions)
                else:
                    assignment = self._classic_assignment(image, load, t, partitions)
            except PlacementError as exc:
                fail(t, ErrorCode.invalid_replication_factor, f"Unable to place replicas: {exc}")
                continue
            except ClassicPlacementError as exc:
                fail(t, exc.code, str(exc))
                continue
            taken[_collision_key(t.name)] = t.name
            topic_id = t.topic_id or cfg.new_uuid()
            if image.topic_by_id(topic_id) is not None:
                fail(t, ErrorCode.invalid_request, f"Topic id {topic_id} is taken.")
                continue
            configs = {k: v for k, v in sorted(t.configs.items()) if v is not None}
            if not diskless:
                # Recorded explicitly: a topic's kind must not follow a default that another
                # node, or a later configuration, may see differently.
                configs[DISKLESS_ENABLE] = "false"
            # Static placement: the RF it gets now is recorded, and it is not legacy.
            records.append(Topic(t.name, topic_id, len(assignment[0]), legacy=False))
            records.extend(TopicConfig(topic_id, k, v) for k, v in configs.items())
            for index, replicas in enumerate(assignment):
                state = desired_state(PartitionState(replicas, (), -1), alive)
                records.append(Partition(topic_id, index, state.replicas, state.isr, state.leader))
            results.append(
                CreateTopicResult(
                    t.name,
                    OK,
                    None,
                    None if validate_only else topic_id,
                    partitions,
                    len(assignment[0]),
                    configs,
                )
            )
        return Outcome([] if validate_only else records, results)

    def _diskless(self, configs: Mapping[str, str | None]) -> bool:
        """The kind of a new topic: its own ``diskless.enable``, else the cluster default
        (``log.diskless.enable``)."""
        value = configs.get(DISKLESS_ENABLE)
        if value is None:
            return self.config.default_diskless
        return str(value).lower() != "false"

    def _classic_assignment(
        self, image: MetadataImage, load: Load, t: NewTopic, partitions: int
    ) -> list[tuple[int, ...]]:
        if t.assignments:
            if sorted(t.assignments) != list(range(len(t.assignments))):
                raise ClassicPlacementError(
                    ErrorCode.invalid_replica_assignment,
                    "Partitions should be a consecutive 0-based integer sequence.",
                )
            assignment = [tuple(t.assignments[i]) for i in range(len(t.assignments))]
            if (reason := manual_assignment_error(image.brokers, assignment)) is not None:
                raise ClassicPlacementError(ErrorCode.invalid_replica_assignment, reason)
            if not any(image.is_alive(r) for replicas in assignment for r in replicas):
                raise ClassicPlacementError(
                    ErrorCode.invalid_replica_assignment,
                    "All brokers specified in the manual partition assignment are fenced.",
                )
            for replicas in assignment:
                load.add(replicas)
            return assignment
        rf = (
            self.config.default_replication_factor
            if t.replication_factor == -1
            else t.replication_factor
        )
        return place_classic(image.brokers, load, partitions, rf)

    def _config_error(self, configs: Mapping[str, str | None], creating: bool) -> str | None:
        if creating:
            for key, value in configs.items():
                if value is None:
                    return f"Null value not supported for topic configs: {key}"
        try:
            self.config.validate_configs(configs)
        except ValueError as exc:
            return str(exc)
        if creating and not self.config.classic_topics and not self._diskless(configs):
            return (
                "diskless.enable=false is not supported yet: brokers do not serve classic "
                "topics, every topic is diskless with a replication factor managed by the "
                "controller"
            )
        if creating:
            present = {k: v for k, v in configs.items() if v is not None}
            return tiering_config_error(present, self._diskless(configs))
        return None

    def delete_topics(
        self, image: MetadataImage, topics: Sequence[str | UUID]
    ) -> Outcome[list[DeleteTopicResult]]:
        """Topics by name or by id. Their data is the brokers' business once RemoveTopic is
        committed."""

        def resolve(key: str | UUID) -> TopicImage | None:
            return image.topic_by_id(key) if isinstance(key, UUID) else image.topic(key)

        # A topic named twice, even once by name and once by id, is refused both times.
        counts = Counter(
            topic.topic_id if (topic := resolve(key)) is not None else key for key in topics
        )
        records: list[Record] = []
        results: list[DeleteTopicResult] = []
        for key in topics:
            by_id = isinstance(key, UUID)
            topic = resolve(key)
            name, topic_id = (None, key) if by_id else (key, None)
            if counts[topic.topic_id if topic is not None else key] > 1:
                results.append(
                    DeleteTopicResult(
                        name, topic_id, ErrorCode.invalid_request, "Duplicate topic in request."
                    )
                )
            elif topic is None:
                code = ErrorCode.unknown_topic_id if by_id else ErrorCode.unknown_topic_or_partition
                results.append(
                    DeleteTopicResult(name, topic_id, code, f"Topic {key} does not exist.")
                )
            else:
                records.append(RemoveTopic(topic.topic_id))
                results.append(DeleteTopicResult(topic.name, topic.topic_id, OK))
        return Outcome(records, results)

    def create_partitions(
        self, image: MetadataImage, requests: Sequence[NewPartitions], validate_only: bool = False
    ) -> Outcome[list[TopicResult]]:
        cfg = self.config
        counts = Counter(r.name for r in requests)
        alive = image.alive_brokers()
        load: Load | None = None
        records: list[Record] = []
        results: list[TopicResult] = []
        for r in requests:
            topic = image.topic(r.name)
            error: tuple[ErrorCode, str] | None = None
            if counts[r.name] > 1:
                error = (ErrorCode.invalid_request, "Duplicate topic name in the request.")
            elif topic is None:
                error = (
                    ErrorCode.unknown_topic_or_partition,
                    f"Topic '{r.name}' does not exist.",
                )
            elif r.assignments and topic.diskless:
                error = (
                    ErrorCode.invalid_request,
                    "Manual partition assignments are not supported for diskless topics: the "
                    "controller places one replica per rack",
                )
            elif r.count <= len(topic.partitions):
                error = (
                    ErrorCode.invalid_partitions,
                    f"Topic currently has {len(topic.partitions)} partitions, which is higher "
                    f"than or equal to the requested {r.count}.",
                )
            elif r.count > cfg.max_partitions:
                error = (
                    ErrorCode.invalid_partitions,
                    f"Number of partitions must be at most {cfg.max_partitions}.",
                )
            if error is not None or topic is None:
                results.append(TopicResult(r.name, *(error or (OK, None))))
                continue
            load = Load.of(image) if load is None else load
            first = len(topic.partitions)
            try:
                if topic.diskless:
                    # The topic's RF, not the rack count now (static placement).
                    assignment = place_partitions(
                        image.brokers, load, r.count - first, _topic_rf(topic)
                    )
                else:
                    assignment = self._classic_new_partitions(image, load, topic, r)
            except PlacementError as exc:
                results.append(
                    TopicResult(
                        r.name,
                        ErrorCode.invalid_replication_factor,
                        f"Unable to place replicas: {exc}",
                    )
                )
                continue
            except ClassicPlacementError as exc:
                results.append(TopicResult(r.name, exc.code, str(exc)))
                continue
            for offset, replicas in enumerate(assignment):
                state = desired_state(PartitionState(replicas, (), -1), alive)
                records.append(
                    Partition(
                        topic.topic_id, first + offset, state.replicas, state.isr, state.leader
                    )
                )
            results.append(TopicResult(r.name, OK))
        return Outcome([] if validate_only else records, results)

    @staticmethod
    def _classic_new_partitions(
        image: MetadataImage, load: Load, topic: TopicImage, r: NewPartitions
    ) -> list[tuple[int, ...]]:
        first = len(topic.partitions)
        rf = len(topic.partitions[0].target_replicas) if topic.partitions else 1
        if not r.assignments:
            return place_classic(image.brokers, load, r.count - first, rf, first)
        code = ErrorCode.invalid_replica_assignment
        if len(r.assignments) != r.count - first:
            raise ClassicPlacementError(
                code,
                f"Increasing the number of partitions by {r.count - first} but "
                f"{len(r.assignments)} assignments provided.",
            )
        assignment = [tuple(replicas) for replicas in r.assignments]
        if (reason := manual_assignment_error(image.brokers, assignment)) is not None:
            raise ClassicPlacementError(code, reason)
        if any(len(replicas) != rf for replicas in assignment):
            raise ClassicPlacementError(
                code,
                f"Inconsistent replication factor between partitions: the topic has {rf}, "
                f"the new assignment {[len(x) for x in assignment]}.",
            )
        for replicas in assignment:
            load.add(replicas)
        return assignment

    def alter_configs(
        self,
        image: MetadataImage,
        resources: Sequence[AlterTopicConfigs],
        validate_only: bool = False,
    ) -> Outcome[list[TopicResult]]:
        """IncrementalAlterConfigs on topics."""
        counts = Counter(r.name for r in resources)
        records: list[Record] = []
        results: list[TopicResult] = []
        for res in resources:
            topic = image.topic(res.name)
            if counts[res.name] > 1:
                results.append(
                    TopicResult(res.name, ErrorCode.invalid_request, "Duplicate resource.")
                )
                continue
            if topic is None:
                results.append(
                    TopicResult(
                        res.name,
                        ErrorCode.unknown_topic_or_partition,
                        f"Topic '{res.name}' does not exist.",
                    )
                )
                continue
            keys = Counter(op.key for op in res.ops)
            if any(n > 1 for n in keys.values()):
                results.append(
                    TopicResult(
                        res.name, ErrorCode.invalid_request, "Duplicate config keys in request."
                    )
                )
                continue
            try:
                changes = {
                    op.key: self._new_value(topic.configs, op.key, op.op, op.value)
                    for op in res.ops
                }
            except _BadOp as exc:
                results.append(TopicResult(res.name, exc.code, str(exc)))
                continue
            if (config_error := self._config_error(changes, creating=False)) is not None:
                results.append(TopicResult(res.name, ErrorCode.invalid_config, config_error))
                continue
            # diskless.enable changes by a migration (controller.migration), not directly.
            migration = migration_records(topic, changes, self.config.classic_topics)
            if isinstance(migration, str):
                results.append(TopicResult(res.name, ErrorCode.invalid_config, migration))
                continue
            if migration or topic.migration is not None:
                # The key flips when the migration completes (MIGRATED).
                changes = {k: v for k, v in changes.items() if k != DISKLESS_ENABLE}
            tiering = tiering_records(topic, changes)
            if isinstance(tiering, str):
                results.append(TopicResult(res.name, ErrorCode.invalid_config, tiering))
                continue
            for key, value in sorted(changes.items()):
                if topic.configs.get(key) != value:
                    records.append(TopicConfig(topic.topic_id, key, value))
            records += tiering
            records += migration
            if any(isinstance(r, TopicMigration) and r.direction == TO_CLASSIC for r in migration):
                records += _acting_leaders(topic, image.alive_brokers())
            # None removes the override (IncrementalAlterConfigs DELETE, or a key a legacy
            # AlterConfigs leaves out): back to the default, which elects nobody.
            if UNCLEAN_LEADER_ELECTION in changes and unclean_allowed(changes):
                records += unclean_leaders(topic, image.alive_brokers())
            results.append(TopicResult(res.name, OK))
        return Outcome([] if validate_only else records, results)

    def _new_value(
        self, current: Mapping[str, str], key: str, op: int, value: str | None
    ) -> str | None:
        if op == OpType.SET:
            if value is None:
                raise _BadOp(ErrorCode.invalid_config, f"Null value not supported for {key}")
            return value
        if op == OpType.DELETE:
            return None
        if op not in (OpType.APPEND, OpType.SUBTRACT):
            raise _BadOp(ErrorCode.invalid_request, f"Unknown config operation {op}")
        if key not in self.config.list_config_keys:
            raise _BadOp(
                ErrorCode.invalid_config,
                f"Config {key} is not a list: APPEND/SUBTRACT do not apply",
            )
        start = current.get(key, self.config.config_defaults.get(key, ""))
        items = [v for v in start.split(",") if v]
        given = [v for v in (value or "").split(",") if v]
        if op == OpType.APPEND:
            items += [v for v in given if v not in items]
        else:
            items = [v for v in items if v not in given]
        # An empty list removes the override, as the broker's own handler does.
        return ",".join(items) if items else None

    # --- legacy RF=1 diskless topics -----------------------------------------------------

    def expand_legacy_topics(
        self, image: MetadataImage, max_topics: int | None = None
    ) -> list[Record]:
        """Records expanding up to ``max_topics`` legacy single-replica diskless topics to one
        replica per rack (for the background task, off by default; one batch per call)."""
        load = Load.of(image)
        records: list[Record] = []
        todo = [
            t
            for t in sorted(image.topics.values(), key=lambda t: t.name)
            if needs_expansion(image, t.topic_id)
        ]
        for topic in todo[:max_topics]:
            records += plan_rf_expansion(image, topic.topic_id, load)
        return records


def _topic_rf(topic: TopicImage) -> int:
    """An existing topic's RF, which its new partitions get: partition 0's (its target
    replicas during a reassignment), as Kafka's CreatePartitions does; a topic without
    partitions, the RF recorded at its creation."""
    if 0 in topic.partitions:
        return len(topic.partitions[0].target_replicas)
    return topic.replication_factor or 1


def _acting_leaders(topic: TopicImage, alive: set[int]) -> list[Record]:
    """A migration to classic starts: each partition's leader seals its diskless log, so
    the partitions led by a lost broker (diskless leaders stay put when a broker is lost,
    ``controller.election``) get an alive leader now."""
    out: list[Record] = []
    for index in sorted(topic.partitions):
        p = topic.partitions[index]
        if keeps_classic_isr(topic, index, p):
            continue  # elected from its ISR already (a lost leader was replaced then)
        change = change_to(topic.topic_id, index, p, desired_state(p, alive, move_dead_leader=True))
        if change is not None:
            out.append(change)
    return out


class _BadOp(ValueError):
    def __init__(self, code: ErrorCode, message: str) -> None:
        super().__init__(message)
        self.code = code
