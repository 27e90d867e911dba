"""The single-voter controller ``sluice dev`` runs inside the broker's process.

The embedded default keeps the same architecture as a cluster (brokers follow a Raft metadata
log), with one voter, a data directory under the broker's, and its HTTP API on a loopback port
only this process is told about.

Data directories from before the controller existed kept topics in ``catalog.db``; the first
start with an empty metadata log carries them over (same topic ids, partitions and configs,
replicated on this broker), so their records stay reachable.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
from pathlib import Path

from broker.config import BrokerConfig

from .records import Partition, Record, Topic, TopicConfig, encode_batch
from .service import ControllerService, ControllerSettings

log = logging.getLogger(__name__)


class EmbeddedController:
    def __init__(self, config: BrokerConfig) -> None:
        self._broker_config = config
        self._secret = secrets.token_urlsafe(16)
        self.service = ControllerService(
            ControllerSettings(
                node_id=config.node_id,
                voters={config.node_id: ("127.0.0.1", 0)},
                host="127.0.0.1",
                http_port=0,
                data_dir=Path(config.data_dir) / "controller",
                secret=self._secret,
                session_timeout_ms=config.broker_session_timeout_ms,
                default_partitions=config.num_partitions,
                default_diskless=config.log_diskless_enable,
                default_replication_factor=config.default_replication_factor,
            )
        )

    async def start(self) -> BrokerConfig:
        """Start the controller; returns the broker config pointing at it."""
        await self.service.start()
        await self.service.fence_all()
        await self._import_legacy_catalog()
        return dataclasses.replace(
            self._broker_config,
            # http:// always: the embedded API is loopback-only, whatever TLS the broker has.
            controller_quorum_bootstrap_servers=f"http://127.0.0.1:{self.service.http_port}",
            controller_secret=self._secret,
        )

    async def stop(self) -> None:
        await self.service.stop()

    async def _import_legacy_catalog(self) -> None:
        path = os.path.join(self._broker_config.data_dir, "catalog.db")
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
        node = self._broker_config.node_id
        records: list[Record] = []
        for t in topics:
            records.append(Topic(t.name, t.topic_id))
            records.extend(TopicConfig(t.topic_id, k, v) for k, v in t.configs.items())
            records.extend(
                Partition(t.topic_id, p, (node,), (node,), node) for p in range(t.partitions)
            )
        await self.service.node.propose(encode_batch(records), timeout=30)
        log.info("carried %d topics over from %s into the metadata log", len(topics), path)
