"""Share groups' share-partition state (KIP-932), kept in the batch coordinator's database
next to the consumer groups' offsets: SQLite embedded, PostgreSQL in production.

Also each share group's membership (group epoch, members with their epochs and
assignments: Kafka's ShareGroupMetadata, member and assignment records), one row per
group, so a broker that becomes the group's coordinator goes on with the same members;
and the configs set on groups (``share.auto.offset.reset``, ...: Kafka's group configs,
which Kafka keeps in its metadata log).

One row per (group, topic id, partition): the state as text (JSON, written and read by
``broker.groups.share.partition_state``) and a version. Every broker serves share
fetches of diskless partitions, so two brokers may change one share-partition at once:
a write names the version it started from and happens only if the row still has it
(compare and set), so no two brokers ever acquire the same record. A write of many
partitions is one statement (one round trip on PostgreSQL).

Every backend passes one contract suite (tests/unit/test_share_store_contract.py).
"""

from __future__ import annotations

import secrets
from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import NamedTuple
from uuid import UUID


class ShareKey(NamedTuple):
    topic_id: UUID
    partition: int


class StoredState(NamedTuple):
    version: int  # 0: no row yet
    state: str


class StateWrite(NamedTuple):
    key: ShareKey
    expected_version: int  # the version read; 0 when there was no row
    state: str


def first_version() -> int:
    return secrets.randbits(48) + 1


class ShareStateStore(ABC):
    async def start(self) -> None:  # noqa: B027 - optional hook
        pass

    async def close(self) -> None:  # noqa: B027 - optional hook
        pass

    @abstractmethod
    async def load(self, group_id: str, keys: Sequence[ShareKey]) -> dict[ShareKey, StoredState]:
        """The stored state of these share-partitions (missing ones are left out)."""

    @abstractmethod
    async def write(self, group_id: str, writes: Sequence[StateWrite]) -> dict[ShareKey, int]:
        """Store each state whose row still has ``expected_version`` (or, for 0, does not
        exist); returns the keys written with their new versions. The others changed
        meanwhile: read them again. A new row starts at a random version (``first_version``),
        so a broker that read a row since deleted (DeleteShareGroupOffsets) cannot write
        over the one made again in its place."""

    @abstractmethod
    async def group_states(self, group_id: str) -> dict[ShareKey, StoredState]:
        """Every share-partition state of the group."""

    @abstractmethod
    async def groups(self) -> list[str]:
        """Every share group (with share-partition state or a stored membership), sorted."""

    @abstractmethod
    async def has_group(self, group_id: str) -> bool:
        """Whether the group is a share group (share-partition state or a membership)."""

    @abstractmethod
    async def store_membership(self, group_id: str, membership: str) -> None:
        """Replace the group's membership (epochs, members, assignments: JSON written and
        read by ``broker.groups.share.persistence``), one round trip."""

    @abstractmethod
    async def load_membership(self, group_id: str) -> str | None:
        """The group's stored membership, or None."""

    @abstractmethod
    async def delete_membership(self, group_id: str) -> None:
        """Forget the group's membership (DeleteGroups); its share-partitions stay."""

    @abstractmethod
    async def delete(self, group_id: str, keys: Sequence[ShareKey] | None) -> int:
        """Forget these share-partitions of the group (all of them for None); how many."""

    @abstractmethod
    async def delete_topics(self, topic_ids: Sequence[UUID]) -> None:
        """Forget every group's state of these (deleted) topics."""

    @abstractmethod
    async def group_configs(self, group_id: str) -> dict[str, str]:
        """The configs set on a group (IncrementalAlterConfigs on a GROUP resource)."""

    @abstractmethod
    async def alter_group_configs(self, group_id: str, changes: Mapping[str, str | None]) -> None:
        """Set (a value) or remove (None) configs of a group, all or nothing."""
