"""Committed offsets of consumer groups, kept in the batch coordinator's database.

Committed offsets must survive everything, so they live here, next to the batches
they point into: SQLite embedded, PostgreSQL in production. Every backend passes one
contract suite (tests/unit/test_group_store_contract.py).

Membership lives in the coordinator's memory, with a snapshot here (Kafka's
GroupMetadata record): written when a generation's assignment is set, removed when the
group becomes empty or is deleted. A broker that becomes a group's coordinator loads
it, so the members keep their ids, generation and assignment across the change.

Offsets are keyed by topic id, not name: deleting a topic removes its offsets, and a
topic created again under the same name starts without any.

Each method is one transaction (one round trip on PostgreSQL), so an OffsetCommit or
OffsetFetch request costs one database call whatever its size.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from uuid import UUID


@dataclass(frozen=True, slots=True)
class OffsetKey:
    topic_id: UUID
    partition: int


@dataclass(frozen=True, slots=True)
class CommittedOffset:
    topic_id: UUID
    partition: int
    offset: int
    leader_epoch: int  # -1 when the client did not say
    metadata: str  # "" when the client sent none (Kafka's NO_METADATA)
    commit_timestamp: int  # ms since the epoch, the broker's clock at commit

    @property
    def key(self) -> OffsetKey:
        return OffsetKey(self.topic_id, self.partition)


@dataclass(frozen=True, slots=True)
class MemberSnapshot:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes  # the member's metadata for the group's chosen protocol
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    """A group's membership as of its last assignment (members in join order)."""

    group_id: str
    generation_id: int
    protocol_type: str
    protocol_name: str
    leader_id: str
    state_since_ms: int  # when the generation's assignment was set
    written_ms: int
    members: tuple[MemberSnapshot, ...]


class GroupStore(ABC):
    async def start(self) -> None:  # noqa: B027 - optional hook
        pass

    async def close(self) -> None:  # noqa: B027 - optional hook
        pass

    @abstractmethod
    async def commit_offsets(self, group_id: str, offsets: Sequence[CommittedOffset]) -> None:
        """Insert or replace these offsets of ``group_id`` (last one wins for a key given
        twice), all or nothing."""

    @abstractmethod
    async def fetch_offsets(
        self, requests: Mapping[str, Sequence[OffsetKey] | None]
    ) -> dict[str, list[CommittedOffset]]:
        """Committed offsets per group: of the given partitions, or every one of the
        group's when None. Partitions without an offset are left out; so is a group
        without any (the answer may lack a requested group)."""

    @abstractmethod
    async def groups_with_offsets(self, group_ids: Sequence[str] | None = None) -> list[str]:
        """Which of ``group_ids`` (every group when None) have committed offsets, sorted."""

    @abstractmethod
    async def delete_offsets(self, group_id: str, keys: Sequence[OffsetKey]) -> None:
        """Forget these offsets of one group (OffsetDelete); missing ones are ignored."""

    @abstractmethod
    async def delete_groups(self, group_ids: Sequence[str]) -> list[str]:
        """Forget every offset and the membership snapshot of these groups; returns those
        that had either, sorted."""

    @abstractmethod
    async def delete_topics(self, topic_ids: Sequence[UUID]) -> None:
        """Forget every group's offsets of these (deleted) topics."""

    @abstractmethod
    async def groups_committed_before(self, cutoff_ms: int) -> list[str]:
        """Groups that have an offset committed before ``cutoff_ms``, sorted: the
        candidates for expiry."""

    @abstractmethod
    async def expire_offsets(self, group_ids: Sequence[str], cutoff_ms: int) -> int:
        """Delete the offsets of these groups committed before ``cutoff_ms``; returns how
        many. An offset committed again since is newer and stays."""

    @abstractmethod
    async def store_group(self, snapshot: GroupSnapshot) -> None:
        """Replace the group's membership snapshot, members included, all or nothing
        (one round trip)."""

    @abstractmethod
    async def load_group(self, group_id: str) -> GroupSnapshot | None:
        """The group's membership snapshot, or None."""

    @abstractmethod
    async def delete_group_snapshots(self, group_ids: Sequence[str]) -> None:
        """Forget the membership snapshots of these groups (they became empty or are
        gone); offsets stay."""

    @abstractmethod
    async def groups_with_snapshots(self) -> list[str]:
        """Every group with a membership snapshot, sorted."""
