"""Committed offsets: checked against the group, kept in the :class:`GroupStore`.

Every OffsetCommit and OffsetFetch request is one store call. Offsets of groups with
nobody in them expire ``offsets.retention.minutes`` after their commit (and not before
the group has been empty that long, when this broker saw it empty), checked by a
background loop on each group's coordinator.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.groups.group import CONSUMER_PROTOCOL_TYPE, GroupState
from broker.groups.group_coordinator import GroupCoordinator
from broker.groups.held_groups import GroupConfig, wall_clock_ms
from broker.groups.store_errors import store_error
from common.background import cancel_and_wait
from storage.groups import CommittedOffset, GroupStore, OffsetKey
from storage.outage import OutageLog

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class OffsetToCommit:
    key: OffsetKey
    offset: int
    leader_epoch: int
    metadata: str | None


@dataclass(slots=True)
class FetchedGroup:
    error: ErrorCode
    offsets: dict[OffsetKey, CommittedOffset]


class GroupOffsets:
    def __init__(
        self,
        coordinator: GroupCoordinator,
        store: GroupStore,
        config: GroupConfig,
        wall_ms: Callable[[], int] = wall_clock_ms,
    ) -> None:
        self._coordinator = coordinator
        self.store = store
        self._config = config
        self._wall_ms = wall_ms
        self._expiry_task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._expiry_task = asyncio.create_task(self._expiry_loop())

    async def stop(self) -> None:
        await cancel_and_wait([self._expiry_task])
        self._expiry_task = None

    # ---------------------------------------------------------------- commit

    async def commit(
        self,
        group_id: str,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        offsets: Sequence[OffsetToCommit],
    ) -> list[ErrorCode]:
        """One error per offset, in order."""
        error = await self._coordinator.load(group_id) or self._coordinator.check_commit(
            group_id, member_id, group_instance_id, generation_id
        )
        if error == ErrorCode.none and await self._coordinator.is_share_group(group_id):
            # Kafka: "Group X is not a consumer group." A share group's position is its
            # share-partitions' state, never committed offsets.
            error = ErrorCode.group_id_not_found
        if error != ErrorCode.none:
            return [error] * len(offsets)
        now = self._wall_ms()
        limit = self._config.offset_metadata_max_bytes
        errors: list[ErrorCode] = []
        rows: list[CommittedOffset] = []
        for item in offsets:
            metadata = item.metadata or ""
            if len(metadata.encode("utf-8")) > limit:
                errors.append(ErrorCode.offset_metadata_too_large)
                continue
            errors.append(ErrorCode.none)
            rows.append(
                CommittedOffset(
                    item.key.topic_id,
                    item.key.partition,
                    item.offset,
                    item.leader_epoch,
                    metadata,
                    now,
                )
            )
        if rows:
            try:
                await self.store.commit_offsets(group_id, rows)
            except Exception as exc:
                failed = store_error(exc, f"committing offsets of group {group_id}")
                return [failed if e == ErrorCode.none else e for e in errors]
        return errors

    # ---------------------------------------------------------------- fetch

    async def fetch(
        self,
        requests: Mapping[str, Sequence[OffsetKey] | None],
        members: Mapping[str, tuple[str | None, int]] | None = None,
    ) -> dict[str, FetchedGroup]:
        """Committed offsets of several groups (one store call): of the given partitions,
        or all of a group's when None. ``members``: the member id and epoch each group's
        request names (OffsetFetch v9+), checked against consumer groups."""
        out: dict[str, FetchedGroup] = {}
        owned: dict[str, Sequence[OffsetKey] | None] = {}
        for group_id, keys in requests.items():
            if not self._coordinator.owns(group_id):
                out[group_id] = FetchedGroup(ErrorCode.not_coordinator, {})
                continue
            who = (members or {}).get(group_id)
            if who is not None and who[0] is not None:
                error = await self._coordinator.load(group_id) or self._coordinator.check_fetch(
                    group_id, *who
                )
                if error != ErrorCode.none:
                    out[group_id] = FetchedGroup(error, {})
                    continue
            owned[group_id] = keys
        if owned:
            try:
                found = await self.store.fetch_offsets(owned)
            except Exception as exc:
                error = store_error(exc, "fetching committed offsets")
                for group_id in owned:
                    out[group_id] = FetchedGroup(error, {})
            else:
                for group_id in owned:
                    offsets = {o.key: o for o in found.get(group_id, [])}
                    out[group_id] = FetchedGroup(ErrorCode.none, offsets)
        return out

    # ---------------------------------------------------------------- delete

    async def delete(
        self, group_id: str, partitions: Sequence[tuple[str, OffsetKey]]
    ) -> tuple[ErrorCode, list[ErrorCode]]:
        """OffsetDelete: (topic name, key) pairs. Offsets of topics a live consumer group
        subscribes to are refused with GROUP_SUBSCRIBED_TO_TOPIC."""
        if not group_id:
            return ErrorCode.invalid_group_id, []
        if not self._coordinator.owns(group_id):
            return ErrorCode.not_coordinator, []
        if loaded := await self._coordinator.load(group_id):
            return loaded, []
        if await self._coordinator.is_share_group(group_id):
            return ErrorCode.group_id_not_found, []  # as a commit (above)
        group = self._coordinator.groups.get(group_id)
        consumer_group = self._coordinator.consumer_groups.get(group_id)
        errors: list[ErrorCode] = []
        if consumer_group is not None:
            # Kafka: refused for the topics its members subscribe to.
            for topic, _key in partitions:
                subscribed = consumer_group.is_subscribed_to(topic)
                errors.append(ErrorCode.group_subscribed_to_topic if subscribed else ErrorCode.none)
        elif group is not None and not group.is_(GroupState.EMPTY):
            if group.protocol_type != CONSUMER_PROTOCOL_TYPE:
                # Members of another protocol: no telling which offsets are in use.
                return ErrorCode.non_empty_group, []
            for topic, _key in partitions:
                subscribed = group.is_subscribed_to(topic)
                errors.append(ErrorCode.group_subscribed_to_topic if subscribed else ErrorCode.none)
        else:
            errors = [ErrorCode.none] * len(partitions)
        try:
            if (
                group is None
                and consumer_group is None
                and not await self.store.groups_with_offsets([group_id])
            ):
                return ErrorCode.group_id_not_found, []
            deletable = [key for (_, key), e in zip(partitions, errors, strict=True) if not e]
            await self.store.delete_offsets(group_id, deletable)
        except Exception as exc:
            return store_error(exc, f"deleting offsets of group {group_id}"), []
        return ErrorCode.none, errors

    async def topics_deleted(self, topic_ids: Sequence[UUID]) -> None:
        """DeleteTopics: every group's offsets of these topics go with them. A failure is
        only logged: the topic is gone either way, and offsets keyed by its id can never
        be read again (they only take room)."""
        try:
            await self.store.delete_topics(topic_ids)
        except Exception:
            log.exception("removing committed offsets of deleted topics %s failed", topic_ids)

    # ---------------------------------------------------------------- expiry

    async def expire(self) -> int:
        """Expire the offsets past retention of the empty groups this broker
        coordinates; returns how many went. Empty groups left without offsets are
        forgotten too (joins that never completed leave such groups behind)."""
        await self._load_snapshots()
        await self._forget_empty_groups()
        cutoff = self._wall_ms() - self._config.offsets_retention_ms
        candidates = await self.store.groups_committed_before(cutoff)
        owned = [g for g in candidates if self._coordinator.owns(g)]
        for group_id in owned:
            # A group with members on another coordinator before is not expirable.
            if loaded := await self._coordinator.load(group_id):
                raise RuntimeError(f"loading group {group_id} failed ({loaded.name})")
        eligible = [g for g in owned if self._coordinator.expirable(g, cutoff)]
        if not eligible:
            return 0
        removed = await self.store.expire_offsets(eligible, cutoff)
        still = set(await self.store.groups_with_offsets(eligible))
        forgotten = []
        for group_id in eligible:
            group = self._coordinator.groups.get(group_id)
            if group_id not in still and (group is None or group.is_(GroupState.EMPTY)):
                # Nothing left of it: forget the group, as Kafka does.
                if group is not None:
                    self._coordinator.remove_group(group)
                # expirable() said a consumer group of that id is empty.
                self._coordinator.drop_consumer_group(group_id)
                forgotten.append(group_id)
        # An empty group has no snapshot; this only makes sure none survives it.
        await self.store.delete_group_snapshots(forgotten)
        if removed:
            log.info("expired %d committed offsets of %d groups", removed, len(eligible))
        return removed

    async def _forget_empty_groups(self) -> None:
        def idle() -> list[str]:
            classic = [
                g.group_id
                for g in self._coordinator.groups.values()
                if g.is_(GroupState.EMPTY) and not g.pending_members
            ]
            consumer = [
                g.group_id for g in self._coordinator.consumer_groups.values() if not g.members
            ]
            return classic + consumer

        candidates = idle()
        if not candidates:
            return
        stored = set(await self.store.groups_with_offsets(candidates))
        forgotten = sorted(set(idle()) & set(candidates) - stored)
        for group_id in forgotten:
            if group_id in self._coordinator.groups:
                self._coordinator.remove_group(self._coordinator.groups[group_id])
            self._coordinator.drop_consumer_group(group_id)
        await self.store.delete_group_snapshots(forgotten)

    async def _load_snapshots(self) -> None:
        """Snapshots of groups coordinated here that no request brought back (their
        members went away with the old coordinator): loaded, their members' sessions
        expire and the groups become empty, as on Kafka after a coordinator change."""
        for group_id in await self.store.groups_with_snapshots():
            # No-op for the groups held here and those coordinated elsewhere.
            await self._coordinator.load(group_id)

    async def _expiry_loop(self) -> None:
        interval = self._config.offsets_retention_check_interval_ms / 1000
        outage = OutageLog("expiring committed offsets", log)
        while True:
            # Jitter: brokers started together do not query the database together.
            await asyncio.sleep(interval * random.uniform(0.5, 1.5))
            with outage:
                await self.expire()
