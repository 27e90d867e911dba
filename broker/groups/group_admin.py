"""ListGroups, DescribeGroups, DeleteGroups: what ``kafka-consumer-groups`` shows.

A group exists for these views when this broker has it in memory (it has or had
members since this broker became its coordinator) or when it has committed offsets in
the store; the latter alone show as Empty, with no protocol type (like a group of
consumers that only ever ``assign()``). Each broker answers for the groups it
coordinates; admin clients ask every broker and merge.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

from kio.schema.errors import ErrorCode

from broker.groups.consumer_coordinator import ConsumerCoordinator
from broker.groups.consumer_group import GROUP_TYPE as CONSUMER_GROUP_TYPE
from broker.groups.consumer_group import PROTOCOL_TYPE as CONSUMER_PROTOCOL_TYPE
from broker.groups.group import GroupState
from broker.groups.group_coordinator import GroupCoordinator
from broker.groups.offsets import store_error
from storage.groups import GroupStore

GROUP_TYPE = "classic"


def _stored_only(group_id: str) -> dict[str, Any]:
    return {
        "group_id": group_id,
        "group_state": GroupState.EMPTY.value,
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
    }


class GroupAdmin:
    def __init__(
        self, coordinator: GroupCoordinator, consumer: ConsumerCoordinator, store: GroupStore
    ) -> None:
        self._coordinator = coordinator
        self._consumer = consumer
        self._store = store

    async def list_groups(
        self, states: Collection[str], types: Collection[str]
    ) -> tuple[ErrorCode, list[dict[str, Any]]]:
        """Groups this broker coordinates, filtered by state and type names (case
        insensitive; empty filters keep everything)."""
        wanted_states = {s.lower() for s in states}
        wanted_types = {t.lower() for t in types} or {GROUP_TYPE, CONSUMER_GROUP_TYPE}
        self._coordinator.check_ownership()
        try:
            snapshots = await self._store.groups_with_snapshots()
        except Exception as exc:
            return store_error(exc, "listing groups"), []
        for group_id in snapshots:
            # Those coordinated here that no request brought back yet.
            if loaded := await self._coordinator.load(group_id):
                return loaded, []
        listed: dict[str, dict[str, Any]] = {}
        for consumer_group in list(self._consumer.groups.values()):
            listed[consumer_group.group_id] = {
                "group_id": consumer_group.group_id,
                "protocol_type": CONSUMER_PROTOCOL_TYPE,
                "group_state": consumer_group.state.value,
                "group_type": CONSUMER_GROUP_TYPE,
            }
        for group in list(self._coordinator.groups.values()):
            listed[group.group_id] = {
                "group_id": group.group_id,
                "protocol_type": group.protocol_type or "",
                "group_state": group.state.value,
                "group_type": GROUP_TYPE,
            }
        try:
            stored = await self._store.groups_with_offsets()
        except Exception as exc:
            return store_error(exc, "listing groups"), []
        for group_id in stored:
            if group_id not in listed and self._coordinator.owns(group_id):
                listed[group_id] = {
                    "group_id": group_id,
                    "protocol_type": "",
                    "group_state": GroupState.EMPTY.value,
                    "group_type": GROUP_TYPE,
                }
        out = [
            entry
            for _, entry in sorted(listed.items())
            if (not wanted_states or entry["group_state"].lower() in wanted_states)
            and entry["group_type"] in wanted_types
        ]
        return ErrorCode.none, out

    async def describe_groups(self, group_ids: Sequence[str]) -> list[dict[str, Any]]:
        """One DescribeGroups entry per id, in order. An unknown group is Dead with
        GROUP_ID_NOT_FOUND (older versions of the answer show only the Dead state)."""
        entries: dict[str, dict[str, Any]] = {}
        lookup: list[str] = []
        for group_id in group_ids:
            if group_id in entries:
                continue
            if not self._coordinator.owns(group_id):
                entries[group_id] = _error_entry(group_id, ErrorCode.not_coordinator)
                continue
            if loaded := await self._coordinator.load(group_id):
                entries[group_id] = _error_entry(group_id, loaded)
                continue
            group = self._coordinator.groups.get(group_id)
            if group is not None:
                entries[group_id] = {"error_code": 0, **group.describe()}
            elif group_id in self._consumer.groups:
                # Kafka 4: DescribeGroups describes classic groups only (v6+ says so;
                # before, a Dead state); ConsumerGroupDescribe describes this one.
                entries[group_id] = _error_entry(group_id, ErrorCode.group_id_not_found)
                entries[group_id]["error_message"] = f"Group {group_id} is not a classic group."
            else:
                lookup.append(group_id)
        if lookup:
            try:
                stored = set(await self._store.groups_with_offsets(lookup))
            except Exception as exc:
                error = store_error(exc, "describing groups")
                for group_id in lookup:
                    entries[group_id] = _error_entry(group_id, error)
            else:
                for group_id in lookup:
                    if group_id in stored:
                        entries[group_id] = {"error_code": 0, **_stored_only(group_id)}
                    else:
                        entries[group_id] = _error_entry(group_id, ErrorCode.group_id_not_found)
        return [entries[group_id] for group_id in group_ids]

    async def delete_groups(self, group_ids: Sequence[str]) -> list[tuple[str, ErrorCode]]:
        """Delete groups with nobody in them, offsets included."""
        errors: dict[str, ErrorCode] = {}
        deletable: list[str] = []
        for group_id in dict.fromkeys(group_ids):
            if not self._coordinator.owns(group_id):
                errors[group_id] = ErrorCode.not_coordinator
                continue
            if loaded := await self._coordinator.load(group_id):
                errors[group_id] = loaded
                continue
            group = self._coordinator.groups.get(group_id)
            if group is not None and not group.is_(GroupState.EMPTY):
                errors[group_id] = ErrorCode.non_empty_group
                continue
            consumer_group = self._consumer.groups.get(group_id)
            if consumer_group is not None and consumer_group.members:
                errors[group_id] = ErrorCode.non_empty_group
                continue
            deletable.append(group_id)
        if deletable:
            try:
                had_offsets = set(await self._store.delete_groups(deletable))
            except Exception as exc:
                error = store_error(exc, "deleting groups")
                errors.update((g, error) for g in deletable)
            else:
                for group_id in deletable:
                    group = self._coordinator.groups.get(group_id)
                    was_consumer_group = group_id in self._consumer.groups
                    if was_consumer_group:
                        self._consumer.remove_if_empty(group_id)
                    if group is None and was_consumer_group:
                        errors[group_id] = ErrorCode.none
                    elif group is not None and group.is_(GroupState.EMPTY):
                        self._coordinator.remove_group(group)
                        errors[group_id] = ErrorCode.none
                    elif group_id in had_offsets:
                        errors[group_id] = ErrorCode.none
                    else:
                        errors[group_id] = ErrorCode.group_id_not_found
        return [(group_id, errors[group_id]) for group_id in group_ids]


def _error_entry(group_id: str, error: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": int(error),
        "group_id": group_id,
        "group_state": GroupState.DEAD.value,
        "protocol_type": "",
        "protocol_data": "",
        "members": [],
    }
