"""Topic migration between classic and diskless (issue 18), the controller's side: the
state machine in the metadata log (records ``TopicMigration`` / ``PartitionSealed``,
applied in ``controller.image``).

    IncrementalAlterConfigs diskless.enable=true on a classic topic
        ──► SEALING (generation g): each partition's leader seals its classic log at a
            boundary offset and reports it (``partition_sealed``) ──► PartitionSealed
        ── every partition sealed ──► MIGRATED + diskless.enable=true + a reassignment to
            one replica per rack (seed 000's placement; current replicas kept where they
            are), staged as a classic one: the added replicas fetch the sealed classic log
            and join the ISR before the removed ones leave (``election.stages_classic``)

The controller decides nothing per offset: the leader picks the boundary (its high
watermark once every in-sync replica has everything and no transaction is open), seeds
the diskless log there in the batch coordinator (log start = boundary, producer states
of the classic log), then reports. A report is accepted only from the partition's
current leader at its current leader epoch, so a deposed leader's seal never counts; a
partition already sealed answers OK again (leaders retry until they hear back), so the
migration is idempotent per partition. The state is in the log: a new active controller,
or a new leader after a SIGKILL, carries on from the partitions not sealed yet.

The reverse (``diskless.enable=false`` on a diskless topic) uses the same records with
direction TO_CLASSIC: the leader seals the diskless log in the batch coordinator at its
high watermark and reports the boundary and the diskless log's start; the last seal flips
the kind (the replicas stay: one per rack, each starting its classic log at the boundary).
A topic migrated back to classic cannot go to diskless again yet (its diskless log is
sealed below the later boundary).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from uuid import UUID

from kio.schema.errors import ErrorCode

from .classic_election import classic_desired_state
from .election import change_to, desired_state, unclean_allowed
from .image import (
    DISKLESS_ENABLE,
    MIGRATION_MIGRATED,
    MIGRATION_SEALING,
    TIERING_DISABLING,
    TO_CLASSIC,
    TO_DISKLESS,
    MetadataImage,
    TopicImage,
)
from .placement import Load, least_loaded, order_after, racks_of
from .records import PartitionSealed, Record, SealedLogSize, TopicConfig, TopicMigration
from .requests import ErrorResult, Outcome

# Shown by DescribeConfigs (read-only, like Kafka's synthetic entries) and the metrics.
STATE_KEY = "diskless.migration.state"
BOUNDARIES_KEY = "diskless.migration.boundaries"
CLASSIC_BYTES_KEY = "diskless.migration.classic.bytes"
DISKLESS_BYTES_KEY = "diskless.migration.diskless.bytes"
PENDING = "pending"
SEALING = "sealing"
MIGRATED = "migrated"


def _wants_diskless(value: str | None) -> bool:
    return str(value or "true").lower() != "false"


def migration_records(
    topic: TopicImage, changes: Mapping[str, str | None], classic_allowed: bool = True
) -> list[Record] | str:
    """The records an IncrementalAlterConfigs of ``topic`` needs for a change of
    ``diskless.enable``, or why it is refused (INVALID_CONFIG). The config key itself is not
    changed here: it flips with MIGRATED, once every partition is sealed.
    ``classic_allowed``: brokers serve classic topics (ControllerConfig.classic_topics)."""
    if DISKLESS_ENABLE not in changes:
        return []
    wanted = _wants_diskless(changes[DISKLESS_ENABLE])
    m = topic.migration
    if m is not None and m.state != MIGRATION_MIGRATED:
        target = m.direction == TO_DISKLESS
        if wanted == target:
            return []  # asked again while it runs: nothing new
        return (
            f"Topic {topic.name} is being migrated "
            f"{'to diskless' if target else 'to classic'}: diskless.enable cannot change "
            "until that is done"
        )
    if wanted == topic.diskless:
        return []
    generation = 0 if m is None else m.generation + 1
    if not wanted:
        if not classic_allowed:
            return "diskless.enable=false is not supported: brokers do not serve classic topics"
        return [TopicMigration(topic.topic_id, TO_CLASSIC, MIGRATION_SEALING, generation)]
    if m is not None and m.direction == TO_CLASSIC:
        # Its diskless log is sealed at the last boundary and holds the offsets below it:
        # a diskless log cannot start again at a later boundary (docs/migration.md, Limits).
        return "A topic migrated back to classic cannot migrate to diskless again yet"
    if topic.tiering is not None and topic.tiering.state == TIERING_DISABLING:
        # Its leaders act on the disablement: one partition-wide change at a time.
        return "Tiered storage is being disabled on this topic: migrate once that is done"
    return [TopicMigration(topic.topic_id, TO_DISKLESS, MIGRATION_SEALING, generation)]


def one_per_rack(image: MetadataImage, replicas: tuple[int, ...], leader: int) -> tuple[int, ...]:
    """Seed 000's placement for a migrated partition: one replica per rack, keeping the
    leader first and, in every other rack, a current replica if there is one (it already
    holds the classic log below the boundary), else the least loaded broker there."""
    groups = racks_of(image.brokers.values())
    if not groups:
        return replicas
    first = leader if leader in image.brokers else replicas[0]
    if first not in image.brokers:
        return replicas
    load = Load.of(image)
    target: tuple[int, ...] = (first,)
    for rack in order_after(list(groups), image.brokers[first].rack)[1:]:
        here = [r for r in replicas if r in image.brokers and image.brokers[r].rack == rack]
        target += (here[0] if here else least_loaded(groups[rack], load, target).node_id,)
    return target


def _finish(
    image: MetadataImage, topic: TopicImage, direction: str, generation: int
) -> list[Record]:
    """MIGRATED, the kind's config, and (to diskless) the move to the replicas of the new
    kind, staged as a classic reassignment. To
    classic the replicas stay: one per rack, each already real (seed 000), and each starts
    its classic log empty at the boundary, so all of them are in sync from the start."""
    out: list[Record] = [
        TopicMigration(topic.topic_id, direction, MIGRATION_MIGRATED, generation),
        TopicConfig(
            topic.topic_id, DISKLESS_ENABLE, "true" if direction == TO_DISKLESS else "false"
        ),
    ]
    if direction == TO_CLASSIC:
        return out
    alive = image.alive_brokers()
    unclean = unclean_allowed(topic.configs)
    for index in sorted(topic.partitions):
        p = topic.partitions[index]
        if p.reassigning:
            continue  # an operator's reassignment in progress: left to finish
        target = one_per_rack(image, p.replicas, p.leader)
        if set(target) == set(p.replicas):
            continue
        # A staged reassignment of the sealed classic log (``election.stages_classic``):
        # the added replicas fetch it from the leader and join the ISR, and only then do
        # the removed ones leave. At once if nothing is added and the targets are in sync.
        removing = tuple(r for r in p.replicas if r not in target)
        proposed = replace(
            p,
            replicas=target + removing,
            adding_replicas=tuple(r for r in target if r not in p.replicas),
            removing_replicas=removing,
        )
        change = change_to(
            topic.topic_id, index, p, classic_desired_state(proposed, alive, unclean)
        )
        if change is not None:
            out.append(change)
    return out


@dataclass(frozen=True)
class SealReport:
    """A leader's report: ``partition`` of ``topic_id`` sealed at ``boundary`` in migration
    ``generation``, by ``broker_id`` leading at ``leader_epoch``."""

    broker_id: int
    topic_id: UUID
    partition: int
    generation: int
    leader_epoch: int
    boundary: int
    old_bytes: int = 0
    old_start: int = -1


class MigrationAdmin:
    """The controller's migration methods (a mixin of ControllerLogic)."""

    def partition_sealed(self, image: MetadataImage, r: SealReport) -> Outcome[ErrorResult]:
        topic = image.topic_by_id(r.topic_id)
        p = None if topic is None else topic.partitions.get(r.partition)
        if topic is None or p is None:
            return Outcome([], ErrorResult(ErrorCode.unknown_topic_or_partition))
        m = topic.migration
        if m is None or m.generation != r.generation:
            return Outcome(
                [], ErrorResult(ErrorCode.invalid_request, "not migrating that generation")
            )
        if (known := m.boundary(r.partition)) is not None or m.state == MIGRATION_MIGRATED:
            # A repeat (the leader did not hear the first answer): fine if it agrees.
            if known is not None and known != r.boundary:
                return Outcome(
                    [],
                    ErrorResult(
                        ErrorCode.invalid_request, f"sealed at {known}, not at {r.boundary}"
                    ),
                )
            return Outcome(self._size_change(image, topic, r), ErrorResult(ErrorCode.none))
        if p.leader != r.broker_id:
            return Outcome([], ErrorResult(ErrorCode.not_leader_or_follower))
        if p.leader_epoch != r.leader_epoch:
            return Outcome([], ErrorResult(ErrorCode.fenced_leader_epoch))
        if r.boundary < 0:
            return Outcome([], ErrorResult(ErrorCode.invalid_request, "negative boundary"))
        records: list[Record] = [
            PartitionSealed(
                r.topic_id, r.partition, r.generation, r.boundary, r.old_bytes, r.old_start
            )
        ]
        if set(topic.partitions) <= {i for i, _ in m.sealed} | {r.partition}:
            records += _finish(image, topic, m.direction, r.generation)
        return Outcome(records, ErrorResult(ErrorCode.none))

    @staticmethod
    def _size_change(image: MetadataImage, topic: TopicImage, r: SealReport) -> list[Record]:
        """A sealed partition's current leader reporting again with the size its sealed
        classic log has now (``broker.logs.migration.sealer``: what retention and tiering left):
        recorded when it changed, so "bytes still classic" is live everywhere."""
        m, p = topic.migration, topic.partitions.get(r.partition)
        s = None if m is None else m.sealed_partition(r.partition)
        if (
            m is None
            or p is None
            or s is None
            or m.direction != TO_DISKLESS
            or (p.leader, p.leader_epoch) != (r.broker_id, r.leader_epoch)
            or r.old_bytes < 0
            or r.old_bytes == s.old_bytes
        ):
            return []
        out: list[Record] = [SealedLogSize(r.topic_id, r.partition, r.generation, r.old_bytes)]
        if r.old_bytes == 0 and not p.reassigning:
            # No record left below the boundary: the diskless rule again (ISR = replicas,
            # ``election.holds_sealed_classic``), at once rather than at the next election.
            change = change_to(
                topic.topic_id, r.partition, p, desired_state(p, image.alive_brokers())
            )
            if change is not None:
                out.append(change)
        return out


def migration_state(topic: TopicImage) -> str | None:
    """pending (nothing sealed yet), sealing, migrated; None without a migration."""
    m = topic.migration
    if m is None:
        return None
    if m.state == MIGRATION_MIGRATED:
        return MIGRATED
    return SEALING if m.sealed else PENDING


def configured(topic: TopicImage) -> dict[str, str]:
    """The topic's overrides as the operator set them, for DescribeConfigs: while a
    migration runs, ``diskless.enable`` is its target (the image keeps the kind the topic
    still has until MIGRATED, which routing needs), as Kafka shows an altered config at
    once; the progress is in ``diskless.migration.state`` (``describe_entries``)."""
    m = topic.migration
    if m is None or m.state == MIGRATION_MIGRATED:
        return dict(topic.configs)
    target = "true" if m.direction == TO_DISKLESS else "false"
    return {**topic.configs, DISKLESS_ENABLE: target}


def describe_entries(topic: TopicImage) -> dict[str, str]:
    """The migration's read-only entries for DescribeConfigs, from the image, so every
    broker answers the same as the controller's metrics. To diskless, the sealed classic
    logs' bytes as their leaders last reported them (``SealedLogSize``: what retention and
    tiering left); to classic, the diskless logs' size at the seals."""
    m = topic.migration
    state = migration_state(topic)
    if m is None or state is None:
        return {}
    direction = "to-diskless" if m.direction == TO_DISKLESS else "to-classic"
    return {
        STATE_KEY: f"{state} ({direction}, generation {m.generation})",
        BOUNDARIES_KEY: ",".join(f"{i}:{s.boundary}" for i, s in m.sealed),
        CLASSIC_BYTES_KEY if m.direction == TO_DISKLESS else DISKLESS_BYTES_KEY: str(
            sum(s.old_bytes for _, s in m.sealed)
        ),
    }


STATE_VALUES = {PENDING: 0, SEALING: 1, MIGRATED: 2}


@dataclass(frozen=True)
class MigrationMetrics:
    """Per topic with a migration: its direction and state (0 pending, 1 sealing,
    2 migrated), each sealed partition's boundary, and the old logs' bytes (to diskless:
    what the leaders last reported left; to classic: the size at the seals)."""

    state: dict[tuple[str, str], int]  # (topic, direction) -> state value
    boundary: dict[tuple[str, int], int]
    old_bytes: dict[str, int]


def migration_metrics(image: MetadataImage) -> MigrationMetrics:
    state: dict[tuple[str, str], int] = {}
    boundary: dict[tuple[str, int], int] = {}
    old_bytes: dict[str, int] = {}
    for topic in image.topics.values():
        m, value = topic.migration, migration_state(topic)
        if m is None or value is None:
            continue
        direction = "to-diskless" if m.direction == TO_DISKLESS else "to-classic"
        state[(topic.name, direction)] = STATE_VALUES[value]
        for index, s in m.sealed:
            boundary[(topic.name, index)] = s.boundary
        old_bytes[topic.name] = sum(s.old_bytes for _, s in m.sealed)
    return MigrationMetrics(state, boundary, old_bytes)
