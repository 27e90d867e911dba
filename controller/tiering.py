"""Tiered storage of classic topics, the controller's side: the topic configs and the
KIP-950 disablement state machine (records ``TopicTiering`` / ``TieringPartitionDisabled``,
applied in ``controller.image``).

    remote.storage.enable=true ──► ENABLED (generation g)
    remote.storage.enable=false ──► DISABLING (g, policy)
        ── every partition's leader reported done ──► DISABLED (g)
    remote.storage.enable=true again (from DISABLED only) ──► ENABLED (g + 1)

Policy when disabling: ``remote.log.disable.policy=retain|delete`` (KIP-950; retain, the
default, stops copying and keeps the remote data readable until retention deletes it;
delete deletes it), or Kafka 3.9's spelling ``remote.log.delete.on.disable=true`` (delete).
Kafka 3.9's ``remote.log.copy.disable=true`` (tiering on, copying off, remote data
readable) is a plain config: no state change. Re-enabling is refused while DISABLING (the
remote data would be both deleted and copied to), as KIP-950 says.

The controller drives the disablement, as KIP-950 chose (its rejected alternative #1 is a
broker reporting completion on its own): it sends DisableRemoteTopic (partition, leader
epoch, generation, policy) to each DISABLING partition's leader in every heartbeat answer
(KRaft's controller-to-broker channel) until that leader acknowledges it in a heartbeat
(``tiering_heartbeat``); only an acknowledgement from the partition's current leader at its
current leader epoch, for the current generation, records the partition done. What to send
is rebuilt from the image on every heartbeat (``tiering_pending``), so a new active
controller (after a failover) or a new leader (after the old one died mid-way) is sent the
request again from the metadata log, as Kafka's controller does for topic deletion.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from uuid import UUID

from kio.schema.errors import ErrorCode

from .image import TO_DISKLESS, MetadataImage, TopicImage
from .records import Record, TieringPartitionDisabled, TopicTiering
from .requests import DisableRemoteAck, DisableRemoteTopic, HeartbeatResult, Outcome
from .tiering_state import TIERING_DISABLED, TIERING_DISABLING, TIERING_ENABLED

log = logging.getLogger(__name__)

REMOTE_STORAGE_ENABLE = "remote.storage.enable"
DISABLE_POLICY = "remote.log.disable.policy"
DELETE_ON_DISABLE = "remote.log.delete.on.disable"  # Kafka 3.9
COPY_DISABLE = "remote.log.copy.disable"  # Kafka 3.9
LOCAL_RETENTION_MS = "local.retention.ms"
LOCAL_RETENTION_BYTES = "local.retention.bytes"
# Kafka's defaults, for checks of keys a topic does not override.
_DEFAULTS = {
    "retention.ms": "604800000",
    "retention.bytes": "-1",
    LOCAL_RETENTION_MS: "-2",
    LOCAL_RETENTION_BYTES: "-2",
    "cleanup.policy": "delete",
}
_TIERING_KEYS = (
    REMOTE_STORAGE_ENABLE,
    DISABLE_POLICY,
    DELETE_ON_DISABLE,
    COPY_DISABLE,
    LOCAL_RETENTION_MS,
    LOCAL_RETENTION_BYTES,
)


def _true(value: str | None) -> bool:
    return value is not None and value.strip().lower() == "true"


def tiering_enabled(topic: TopicImage) -> bool:
    """Whether the topic tiers now (copying may still be off: remote.log.copy.disable)."""
    if topic.tiering is not None:
        return topic.tiering.state == TIERING_ENABLED
    return _true(topic.configs.get(REMOTE_STORAGE_ENABLE))


def config_error(configs: Mapping[str, str | None], diskless: bool) -> str | None:
    """Checks of the tiering keys of a topic's whole configuration (its overrides after the
    change); None when they are fine."""
    if not any(k in configs for k in _TIERING_KEYS):
        return None

    def get(key: str) -> str:
        value = configs.get(key)
        return _DEFAULTS.get(key, "") if value is None else value

    policy = configs.get(DISABLE_POLICY)
    if policy is not None and policy.strip().lower() not in ("retain", "delete"):
        return f"Invalid value {policy} for configuration {DISABLE_POLICY}: retain or delete"
    if (
        policy is not None
        and policy.strip().lower() == "retain"
        and _true(configs.get(DELETE_ON_DISABLE))
    ):
        return f"{DISABLE_POLICY}=retain contradicts {DELETE_ON_DISABLE}=true"
    if not _true(configs.get(REMOTE_STORAGE_ENABLE)):
        return None
    if diskless:
        return (
            "remote.storage.enable=true is not supported on a diskless topic: its data already "
            "lives in object storage"
        )
    if "compact" in get("cleanup.policy"):
        return "Remote log storage is unsupported for the compacted topics"
    # Kafka's checks: the local part of the log cannot outlive the whole log (-2: the same
    # as the whole, -1: unlimited, only if the whole is unlimited too).
    for local_key, whole_key in (
        (LOCAL_RETENTION_MS, "retention.ms"),
        (LOCAL_RETENTION_BYTES, "retention.bytes"),
    ):
        try:
            local, whole = int(get(local_key)), int(get(whole_key))
        except ValueError:
            return f"{local_key} and {whole_key} must be integers"
        if local == -2:
            continue
        if local == -1 and whole != -1:
            return f"Value must not be -1 as {whole_key} value is set as {whole}."
        if whole != -1 and local > whole:
            return f"Value must not be more than {whole_key} property value: {whole}"
    return None


def disable_policy(configs: Mapping[str, str | None]) -> str:
    policy = (configs.get(DISABLE_POLICY) or "retain").strip().lower()
    return "delete" if policy == "delete" or _true(configs.get(DELETE_ON_DISABLE)) else policy


def tiering_records(topic: TopicImage, changes: Mapping[str, str | None]) -> list[Record] | str:
    """The tiering records an IncrementalAlterConfigs of ``topic`` needs, or the reason it
    is refused (INVALID_CONFIG)."""
    after = {**topic.configs, **changes}
    configs = {k: v for k, v in after.items() if v is not None}
    # A topic migrated to diskless keeps tiering its sealed classic log (controller.migration).
    sealed_classic = topic.migration is not None and topic.migration.direction == TO_DISKLESS
    if (error := config_error(configs, topic.diskless and not sealed_classic)) is not None:
        return error
    state = topic.tiering
    was = tiering_enabled(topic)
    now = _true(configs.get(REMOTE_STORAGE_ENABLE))
    disabling = state is not None and state.state == TIERING_DISABLING
    if disabling and any(
        k in changes and changes[k] != topic.configs.get(k)
        for k in (REMOTE_STORAGE_ENABLE, DISABLE_POLICY, DELETE_ON_DISABLE)
    ):
        return (
            "Tiered storage is being disabled on this topic: remote.storage.enable and the "
            "disable policy cannot change until it is done"
        )
    if was and not now:
        generation = 0 if state is None else state.generation
        return [
            TopicTiering(topic.topic_id, TIERING_DISABLING, generation, disable_policy(configs))
        ]
    if now and not was:
        if state is None:
            return [TopicTiering(topic.topic_id, TIERING_ENABLED, 0)]
        return [TopicTiering(topic.topic_id, TIERING_ENABLED, state.generation + 1)]
    return []


@dataclass(frozen=True, slots=True)
class PendingDisable:
    """A partition whose leader has yet to finish a disablement: what the active controller
    sends (and resends after a failover or a leader change) until it is acknowledged."""

    topic_id: UUID
    partition: int
    leader: int
    generation: int
    policy: str
    leader_epoch: int = -1


class TieringAdmin:
    """The controller's tiering methods (a mixin of ControllerLogic)."""

    def with_disables(
        self,
        image: MetadataImage,
        node_id: int,
        heartbeat: Outcome[HeartbeatResult],
        acks: Sequence[DisableRemoteAck],
    ) -> Outcome[HeartbeatResult]:
        """A broker heartbeat's outcome (``broker_heartbeat``) with KIP-950's exchange added:
        the records its acknowledgements make and the requests its answer carries. Nothing
        for a refused heartbeat (unknown broker or stale broker epoch)."""
        if heartbeat.response.error_code != ErrorCode.none:
            return heartbeat
        tiering = self.tiering_heartbeat(image, node_id, acks)
        return Outcome(
            [*heartbeat.records, *tiering.records],
            replace(heartbeat.response, disable_remote=tiering.response),
        )

    def tiering_heartbeat(
        self, image: MetadataImage, node_id: int, acks: Sequence[DisableRemoteAck]
    ) -> Outcome[tuple[DisableRemoteTopic, ...]]:
        """A heartbeat of broker ``node_id`` (registered, at its broker epoch): the
        partitions its acknowledgements complete (a topic whose last partition is done
        becomes DISABLED in the same entry), and the DisableRemoteTopic requests for the
        partitions it leads that are still to do."""
        records: list[Record] = []
        done: dict[UUID, set[int]] = {}
        for ack in acks:
            problem = self.disable_ack_problem(image, node_id, ack)
            if problem is None and ack.partition not in done.get(ack.topic_id, set()):
                done.setdefault(ack.topic_id, set()).add(ack.partition)
                records.append(
                    TieringPartitionDisabled(ack.topic_id, ack.partition, ack.generation)
                )
            elif problem:
                log.info(
                    "DisableRemoteTopic answer of broker %d for %s-%d ignored: %s",
                    node_id,
                    ack.topic_id,
                    ack.partition,
                    problem,
                )
        for topic_id, partitions in done.items():
            topic = image.topic_by_id(topic_id)
            assert topic is not None and topic.tiering is not None
            t = topic.tiering
            if set(topic.partitions) <= t.done | partitions:
                records.append(TopicTiering(topic_id, TIERING_DISABLED, t.generation, t.policy))
        requests = tuple(
            DisableRemoteTopic(d.topic_id, d.partition, d.leader_epoch, d.generation, d.policy)
            for d in self.tiering_pending(image)
            if d.leader == node_id and d.partition not in done.get(d.topic_id, set())
        )
        return Outcome(records, requests)

    def disable_ack_problem(
        self, image: MetadataImage, node_id: int, ack: DisableRemoteAck
    ) -> str | None:
        """Why ``ack`` does not complete its partition ("" for a repeat of one that did,
        which needs no record); None when it does."""
        topic = image.topic_by_id(ack.topic_id)
        p = None if topic is None else topic.partitions.get(ack.partition)
        if topic is None or p is None:
            return "unknown topic or partition"
        t = topic.tiering
        if t is None or t.generation != ack.generation:
            return f"not disabling generation {ack.generation}"
        if t.state == TIERING_DISABLED or (
            t.state == TIERING_DISABLING and ack.partition in t.done
        ):
            return ""
        if t.state != TIERING_DISABLING:
            return "tiering is not disabling"
        if ack.error_code != ErrorCode.none:
            return f"the broker answered {ErrorCode(ack.error_code).name}"
        if p.leader != node_id:
            return f"broker {node_id} does not lead it (broker {p.leader} does)"
        if p.leader_epoch != ack.leader_epoch:
            return f"leader epoch {ack.leader_epoch} is not the current {p.leader_epoch}"
        return None

    def tiering_pending(self, image: MetadataImage) -> list[PendingDisable]:
        """Every partition of a DISABLING topic not done yet, with its leader now: rebuilt
        from the image alone, so a new active controller resumes where the old one was."""
        out = []
        # Asked on every heartbeat: only the DISABLING topics' partitions are looked at.
        disabling = [
            topic
            for topic in image.topics.values()
            if topic.tiering is not None and topic.tiering.state == TIERING_DISABLING
        ]
        for topic in sorted(disabling, key=lambda topic: topic.name):
            t = topic.tiering
            assert t is not None
            for index in sorted(topic.partitions):
                if index not in t.done:
                    p = topic.partitions[index]
                    out.append(
                        PendingDisable(
                            topic.topic_id, index, p.leader, t.generation, t.policy, p.leader_epoch
                        )
                    )
        return out
