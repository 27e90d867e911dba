"""The single-voter controller ``sluice dev`` runs inside the broker's process.

The embedded default keeps the same architecture as a cluster (brokers follow a Raft metadata
log), with one voter, a data directory under the broker's, and its HTTP API on a loopback port
only this process is told about.

Data directories from before the controller existed kept topics in ``catalog.db``; the first
start with an empty metadata log carries them over (same topic ids, partitions and configs,
replicated on this broker), so their records stay reachable.
"""

from __future__ import annotations

import logging
import os
import secrets
from pathlib import Path

from .records import Partition, Record, Topic, TopicConfig, encode_batch
from .service import ControllerService, ControllerSettings

log = logging.getLogger(__name__)


class EmbeddedController:
    """Takes the few broker settings it mirrors as arguments: the controller does not know
    the broker's config (``sluice.cli`` passes them, and points the broker at ``bootstrap``
    with ``secret`` once started)."""

    def __init__(
        self,
        *,
        node_id: int,
        data_dir: str | Path,
        session_timeout_ms: int,
        default_partitions: int,
        default_diskless: bool,
        default_replication_factor: int,
    ) -> None:
        self._node_id = node_id
        self._data_dir = Path(data_dir)
        self.secret = secrets.token_urlsafe(16)
        self.service = ControllerService(
            ControllerSettings(
                node_id=node_id,
                voters={node_id: ("127.0.0.1", 0)},
                host="127.0.0.1",
                http_port=0,
                data_dir=self._data_dir / "controller",
                secret=self.secret,
                session_timeout_ms=session_timeout_ms,
                default_partitions=default_partitions,
                default_diskless=default_diskless,
                default_replication_factor=default_replication_factor,
            )
        )

    @property
    def bootstrap(self) -> str:
        """The controller's API for the broker's ``controller.quorum.bootstrap.servers``
        (once started). http:// always: it is loopback-only, whatever TLS the broker has."""
        return f"http://127.0.0.1:{self.service.http_port}"

    async def start(self) -> None:
        await self.service.start()
        await self.service.fence_all()
        await self._import_legacy_catalog()

    async def stop(self) -> None:
        await self.service.stop()

    async def _import_legacy_catalog(self) -> None:
        path = os.path.join(self._data_dir, "catalog.db")
        if not os.path.exists(path):
            return
        # A single voter leads at once; wait for that before reading or writing the log.
        await self.service.wait_active()
        if self.service.state.image.topics:
            return
        from storage.catalog.sqlite import SqliteCatalog

        catalog = SqliteCatalog(path)
        await catalog.start()
        try:
            topics = await catalog.list_topics()
        finally:
            await catalog.close()
        if not topics:
            return
        node = self._node_id
        records: list[Record] = []
        for t in topics:
            # Created by a binary that faked RF=1: legacy (seed 000), expandable.
            records.append(Topic(t.name, t.topic_id, 1, legacy=True))
            records.extend(TopicConfig(t.topic_id, k, v) for k, v in t.configs.items())
            records.extend(
                Partition(t.topic_id, p, (node,), (node,), node) for p in range(t.partitions)
            )
        await self.service.node.propose(encode_batch(records), timeout=30)
        log.info("carried %d topics over from %s into the metadata log", len(topics), path)
