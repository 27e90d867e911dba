"""The broker's view of topics: an in-memory index over the TopicCatalog.

Lookups on the produce and fetch paths are dict hits; changes go to the catalog
first and the index follows.
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from uuid import UUID

from broker.config import BrokerConfig
from broker.metadata import topic_config
from broker.metadata.controller_catalog import ControllerCatalog
from broker.metadata.controller_client import ControllerRefused, ControllerUnavailable
from common import topic_config_validation
from common.topic_names import topic_name_error
from storage.catalog import Topic, TopicCatalog, TopicExists, TopicNotFound
from storage.coordinator import BatchCoordinator
from storage.partition_key import PartitionKey

log = logging.getLogger(__name__)

MAX_PARTITIONS = 10_000


class InvalidTopic(ValueError):
    pass


class InvalidPartitions(ValueError):
    pass


def check_name(name: str) -> None:
    if (reason := topic_name_error(name)) is not None:
        raise InvalidTopic(reason)


class TopicRegistry:
    def __init__(
        self, catalog: TopicCatalog, coordinator: BatchCoordinator, config: BrokerConfig
    ) -> None:
        self._catalog = catalog
        self._coordinator = coordinator
        self._config = config
        self._by_name: dict[str, Topic] = {}
        self._by_id: dict[UUID, Topic] = {}
        self._loading: asyncio.Future[None] | None = None
        self._loading_started = 0.0
        # Controller mode: writes carry what only the controller decides (replication
        # factor, assignments) and validate_only goes to it too.
        self._controller: ControllerCatalog | None = (
            catalog if isinstance(catalog, ControllerCatalog) else None
        )

    async def load(self) -> None:
        topics = await self._catalog.list_topics()
        self._by_name = {t.name: t for t in topics}
        self._by_id = {t.topic_id: t for t in topics}

    async def ensure(self, wanted: Iterable[tuple[str | UUID, int | None]]) -> None:
        """Re-read the catalog if a request names a topic (by name or id) or a partition
        (None: any) this broker does not know: another broker may have made it since the
        last periodic refresh. Only a read that began after the request arrived can answer
        it; concurrent misses share such a read, so at most one runs at a time."""
        if all(self._knows(key, partition) for key, partition in wanted):
            return
        asked_at = time.monotonic()
        while True:
            load, started = self._loading, self._loading_started
            # A finished read is judged here, not by a done-callback: awaiting a future that
            # is already done does not yield to the loop, so a callback that was to clear
            # ``_loading`` would never run and this loop would spin forever.
            if load is None or (load.done() and started < asked_at):
                started = time.monotonic()
                load = asyncio.ensure_future(self.load())
                self._loading, self._loading_started = load, started
            try:
                await asyncio.shield(load)
            except Exception as exc:
                # The catalog is unreachable: answer from what is known (clients retry
                # unknown topics), as the periodic refresh does.
                log.warning("re-reading topics failed: %r", exc)
                return
            if started >= asked_at:
                return

    def _knows(self, key: str | UUID, partition: int | None) -> bool:
        topic = self._by_id.get(key) if isinstance(key, UUID) else self._by_name.get(key)
        return topic is not None and (partition is None or 0 <= partition < topic.partitions)

    def get(self, name: str) -> Topic | None:
        return self._by_name.get(name)

    def get_by_id(self, topic_id: UUID) -> Topic | None:
        return self._by_id.get(topic_id)

    def all(self) -> list[Topic]:
        return list(self._by_name.values())

    def config(self, topic: Topic) -> dict[str, str]:
        return topic_config.effective(self._config, topic.configs)

    def int_config(self, topic: Topic, name: str) -> int:
        return topic_config.int_config(self._config, topic.configs, name)

    def timestamp_bounds(self, topic: Topic) -> tuple[int, int]:
        return topic_config.timestamp_bounds(self._config, topic.configs)

    def _put(self, topic: Topic) -> None:
        self._by_name[topic.name] = topic
        self._by_id[topic.topic_id] = topic

    async def create(
        self,
        name: str,
        partitions: int,
        configs: Mapping[str, str],
        validate_only: bool = False,
        replication_factor: int = -1,
        assignments: Mapping[int, Sequence[int]] | None = None,
    ) -> Topic:
        """Raises InvalidTopic, InvalidPartitions, InvalidConfig or TopicExists (and, in
        controller mode, ControllerRefused). ``replication_factor`` and ``assignments``
        matter in controller mode only (elsewhere the handler refuses them first)."""
        check_name(name)
        if partitions == -1:
            # With a manual assignment the partitions are its entries (Kafka sends -1).
            partitions = len(assignments) if assignments else self._config.num_partitions
        if not 0 < partitions <= MAX_PARTITIONS:
            raise InvalidPartitions(f"Number of partitions must be 1..{MAX_PARTITIONS}")
        topic_config_validation.validate(configs)
        self._check_tiering(configs)
        if self._controller is None and str(configs.get("diskless.enable", "true")).lower() == (
            "false"
        ):
            # Classic topics need leaders, ISRs and epochs: the controllers' metadata.
            raise topic_config_validation.InvalidConfig(
                "diskless.enable=false needs controller mode (controller.quorum.bootstrap.servers)"
            )
        topic = Topic(
            name=name, topic_id=uuid.uuid4(), partitions=partitions, configs=dict(configs)
        )
        if self._controller is not None:
            return await self._create_by_controller(
                self._controller, topic, replication_factor, assignments, validate_only
            )
        if validate_only:
            if name in self._by_name:
                raise TopicExists(name)
            return topic
        # Logs first: a topic visible in the catalog always has its logs.
        await self._coordinator.create_logs(
            [PartitionKey(topic.topic_id, p) for p in range(partitions)]
        )
        await self._catalog.create_topic(topic)
        self._put(topic)
        return topic

    async def _create_by_controller(
        self,
        controller: ControllerCatalog,
        topic: Topic,
        replication_factor: int,
        assignments: Mapping[int, Sequence[int]] | None,
        validate_only: bool,
    ) -> Topic:
        keys = [PartitionKey(topic.topic_id, p) for p in range(topic.partitions)]
        if not validate_only:
            # Logs first, under the id the controller will record: a topic in the metadata
            # log always has its logs (followers create them too, idempotently).
            await self._coordinator.create_logs(keys)
        try:
            result = await controller.create(topic, replication_factor, assignments, validate_only)
        except ControllerUnavailable:
            raise  # the topic may exist: its logs stay
        except (TopicExists, ControllerRefused):
            if not validate_only:
                # Refused for sure: nobody will ever use these logs. Now is 0: nothing
                # was written to them, so no file waits for a delay.
                await self._coordinator.delete_logs([topic.topic_id], 0)
            raise
        if validate_only:
            # The configs the controller would record (the kind it resolved from the
            # cluster default among them), as Kafka's validate_only answer shows them.
            return replace(topic, configs=dict(result.configs or topic.configs))
        # The follower loaded the image that holds the topic; fall back to ours if it lags.
        known = self._by_id.get(topic.topic_id)
        if known is None:
            self._put(topic)
            return topic
        return known

    async def delete(self, name: str, now_ms: int) -> Topic:
        topic = await self._catalog.delete_topic(name)
        self._by_name.pop(topic.name, None)
        self._by_id.pop(topic.topic_id, None)
        await self._coordinator.delete_logs([topic.topic_id], now_ms)
        return topic

    async def add_partitions(
        self,
        name: str,
        count: int,
        validate_only: bool = False,
        assignments: Sequence[Sequence[int]] | None = None,
    ) -> Topic:
        await self.ensure([(name, None)])
        topic = self._by_name.get(name)
        if topic is None:
            raise TopicNotFound(name)
        if self._controller is not None:
            if not validate_only and topic.partitions < count <= MAX_PARTITIONS:
                await self._coordinator.create_logs(
                    [PartitionKey(topic.topic_id, p) for p in range(topic.partitions, count)]
                )
            topic = await self._controller.set_partitions(name, count, assignments, validate_only)
            if not validate_only:
                self._put(topic)
            return topic
        if count <= topic.partitions:
            raise InvalidPartitions(
                f"Topic currently has {topic.partitions} partitions, which is higher than "
                f"or equal to the requested {count}."
            )
        if count > MAX_PARTITIONS:
            raise InvalidPartitions(f"Number of partitions must be at most {MAX_PARTITIONS}")
        if validate_only:
            return topic
        await self._coordinator.create_logs(
            [PartitionKey(topic.topic_id, p) for p in range(topic.partitions, count)]
        )
        topic = await self._catalog.set_partitions(name, count)
        self._put(topic)
        return topic

    def _check_tiering(self, configs: Mapping[str, str | None]) -> None:
        """remote.storage.enable=true needs the broker's remote storage system (Kafka refuses
        it when remote.log.storage.system.enable=false) and a classic topic: without
        controllers every topic is diskless, already in object storage (the controllers
        refuse it on their diskless topics)."""
        if str(configs.get("remote.storage.enable") or "false").strip().lower() != "true":
            return
        if not self._config.remote_log_storage_system_enable:
            raise topic_config_validation.InvalidConfig(
                "Tiered Storage functionality is disabled in the broker. Topic cannot be "
                "configured with remote log storage."
            )
        if self._controller is None:
            raise topic_config_validation.InvalidConfig(
                "remote.storage.enable=true is not supported on a diskless topic: its data "
                "already lives in object storage"
            )

    async def alter_configs(
        self, name: str, changes: Mapping[str, str | None], validate_only: bool = False
    ) -> Topic:
        await self.ensure([(name, None)])
        topic = self._by_name.get(name)
        if topic is None:
            raise TopicNotFound(name)
        topic_config_validation.validate(changes, topic.configs)
        if changes.get("remote.storage.enable") is not None:
            self._check_tiering({**topic.configs, **changes})
        if self._controller is not None:
            topic = await self._controller.set_configs(name, changes, validate_only)
            if not validate_only:
                self._put(topic)
            return topic
        if validate_only:
            return topic
        topic = await self._catalog.set_configs(name, changes)
        self._put(topic)
        return topic
