"""The tiered part of the classic engine's logs (KIP-405), as the classic engine uses it:
implemented by ``broker.logs.tiered.manager.TieringManager``, which the Broker builds for
its replica manager (broker/node.py), so the classic engine does not import the tiered
one that sits on top of it."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from uuid import UUID

    from broker.logs.classic.partition import ClassicPartition
    from storage.tiered.lineage import FollowerStart
    from storage.tiered.metadata import RemoteLogMetadataStore
    from storage.tiered.reader import RemoteReader


class Tiering(Protocol):
    @property
    def metadata(self) -> RemoteLogMetadataStore: ...  # the remote segments' metadata

    @property
    def reader(self) -> RemoteReader: ...  # ranged reads of remote segments

    @property
    def tiered_topics(self) -> set[UUID]: ...  # topics with remote segments

    async def start(self) -> None: ...

    async def stop(self) -> None: ...

    def wake(self) -> None:
        """Copy, expire and reconcile now (a new leader, a changed config)."""

    async def refresh_all(self) -> None: ...

    def tiers(self, p: ClassicPartition) -> bool:
        """Whether the partition's topic tiers or once did."""

    async def refresh(self, p: ClassicPartition) -> object:
        """Reload the replica's view of its tiered part from the remote metadata."""

    async def load_tiered_aborted(self, p: ClassicPartition) -> int: ...

    async def start_follower(self, p: ClassicPartition, start: FollowerStart) -> bool:
        """Restart a follower's log after the tiered part of its leader's lineage, at
        ``start`` (seeds/002); False when it already reaches there or nothing is tiered."""

    async def forget_partition(self, topic_id: UUID, partition: int) -> int: ...
