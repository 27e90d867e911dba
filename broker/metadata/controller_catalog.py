"""The TopicCatalog of controller mode: reads from the followed metadata image, writes
forwarded to the active controller.

Reads cost nothing (the image is local and kept current by ``MetadataFollower``). Each write
is one request to the active controller, which decides (names, managed replication factor,
placement, configs) and answers per topic; a refusal comes back as ``ControllerRefused``
with the controller's error code and message, for the Kafka handler to pass on. After a
write this broker waits until its image includes the controller's answer (``applied``)
before returning: a client that created a topic through this broker finds it in the next
Metadata answer of this broker (read-your-writes).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.config import BrokerConfig
from broker.metadata.controller_client import (
    ControllerClient,
    ControllerRefused,
    client_ssl_context,
)
from broker.metadata.metadata_follower import MetadataFollower
from controller.broker_config_admin import BrokerConfigAlteration
from controller.image import MetadataImage, TopicImage
from controller.requests import (
    AlterTopicConfigs,
    ConfigOp,
    CreateTopicResult,
    ElectionResult,
    LeaderElection,
    NewPartitions,
    NewTopic,
    OngoingReassignment,
    OpType,
    Reassignment,
    ReassignmentResult,
)
from storage.catalog import Topic, TopicCatalog, TopicExists, TopicNotFound

log = logging.getLogger(__name__)

OK = ErrorCode.none


def topic_of(topic: TopicImage) -> Topic:
    return Topic(topic.name, topic.topic_id, len(topic.partitions), dict(topic.configs))


class ControllerCatalog(TopicCatalog):
    def __init__(
        self,
        client: ControllerClient,
        follower: MetadataFollower,
        catch_up_timeout: float = 10.0,
    ) -> None:
        self.client = client
        self.follower = follower
        self._catch_up_timeout = catch_up_timeout

    @classmethod
    def from_config(cls, config: BrokerConfig) -> ControllerCatalog:
        client = ControllerClient(
            config.controller_servers(),
            config.controller_secret,
            ssl_context=client_ssl_context(
                config.controller_ssl_ca_location,
                config.controller_ssl_certificate_location,
                config.controller_ssl_key_location,
            ),
        )
        return cls(client, MetadataFollower(client))

    @property
    def image(self) -> MetadataImage:
        return self.follower.image

    def quotas(self) -> Mapping[Any, Mapping[str, float]]:
        """The client quotas of the current image (``ClientQuotas`` reads them on every
        request: one call here, not one through the Broker)."""
        return self.follower.image.quotas

    async def start(self) -> None:
        # The follower starts later, from the broker, once the storage it writes to is up.
        await self.client.start()

    async def close(self) -> None:
        await self.follower.stop()
        await self.client.close()

    async def _caught_up(self, applied: int) -> None:
        if not await self.follower.wait_for(applied, self._catch_up_timeout):
            log.warning(
                "metadata image still at %d, the controller answered at %d",
                self.follower.applied,
                applied,
            )

    async def caught_up(self, applied: int) -> None:
        """Wait (bounded) until this broker's image includes metadata index ``applied``."""
        await self._caught_up(applied)

    @staticmethod
    def _check(code: ErrorCode, message: str | None) -> None:
        if code != OK:
            raise ControllerRefused(code, message)

    # --- reads ---------------------------------------------------------------------------

    async def list_topics(self) -> list[Topic]:
        return [topic_of(t) for t in self.image.topics.values()]

    # --- topics --------------------------------------------------------------------------

    async def create_topic(self, topic: Topic) -> None:
        await self.create(topic)

    async def create(
        self,
        topic: Topic,
        replication_factor: int = -1,
        assignments: Mapping[int, Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> CreateTopicResult:
        """Creates ``topic`` with the id this broker chose (its logs exist already).
        Raises TopicExists or ControllerRefused."""
        request = NewTopic(
            topic.name,
            # A manual assignment says both itself: the controller wants -1 (as Kafka's).
            -1 if assignments else topic.partitions,
            replication_factor,
            assignments,
            dict(topic.configs),
            topic.topic_id,
        )
        results, applied = await self.client.create_topics([request], validate_only)
        (result,) = results
        if result.error_code == ErrorCode.topic_already_exists and not validate_only:
            # Our own create, retried after its answer was lost, finds the topic made.
            await self._caught_up(applied)
            mine = self.image.topic(topic.name)
            if mine is not None and mine.topic_id == topic.topic_id:
                return CreateTopicResult(
                    topic.name,
                    OK,
                    None,
                    topic.topic_id,
                    len(mine.partitions),
                    len(mine.partitions[0].replicas) if mine.partitions else -1,
                    dict(mine.configs),
                )
            raise TopicExists(topic.name)
        self._check(result.error_code, result.error_message)
        if not validate_only:
            await self._caught_up(applied)
        return result

    async def delete_topic(self, name: str) -> Topic:
        before = self.image.topic(name)
        results, applied = await self.client.delete_topics([name])
        (result,) = results
        if result.error_code == ErrorCode.unknown_topic_or_partition:
            raise TopicNotFound(name)
        self._check(result.error_code, result.error_message)
        await self._caught_up(applied)
        if before is not None and before.topic_id == result.topic_id:
            return topic_of(before)
        assert result.topic_id is not None
        return Topic(name, result.topic_id, 0, {})

    async def set_partitions(
        self,
        name: str,
        count: int,
        assignments: Sequence[Sequence[int]] | None = None,
        validate_only: bool = False,
    ) -> Topic:
        results, applied = await self.client.create_partitions(
            [NewPartitions(name, count, assignments)], validate_only
        )
        (result,) = results
        if result.error_code == ErrorCode.unknown_topic_or_partition:
            raise TopicNotFound(name)
        self._check(result.error_code, result.error_message)
        if not validate_only:
            await self._caught_up(applied)
        return self._topic(name)

    async def set_configs(
        self, name: str, configs: Mapping[str, str | None], validate_only: bool = False
    ) -> Topic:
        ops = [
            ConfigOp(key, OpType.DELETE) if value is None else ConfigOp(key, OpType.SET, value)
            for key, value in configs.items()
        ]
        results, applied = await self.client.alter_configs(
            [AlterTopicConfigs(name, ops)], validate_only
        )
        (result,) = results
        if result.error_code == ErrorCode.unknown_topic_or_partition:
            raise TopicNotFound(name)
        self._check(result.error_code, result.error_message)
        if not validate_only:
            await self._caught_up(applied)
        return self._topic(name)

    async def alter_broker_configs(
        self, broker: str, values: Mapping[str, str | None], replace: bool, validate_only: bool
    ) -> None:
        """Dynamic broker configs of ``broker`` (a node id, "" for the cluster default);
        ControllerRefused with Kafka's code when refused."""
        results, applied = await self.client.alter_broker_configs(
            [BrokerConfigAlteration(broker, dict(values), replace)], validate_only
        )
        (result,) = results
        self._check(result.error_code, result.error_message)
        if not validate_only:
            await self._caught_up(applied)

    def _topic(self, name: str) -> Topic:
        topic = self.image.topic(name)
        if topic is None:  # deleted meanwhile
            raise TopicNotFound(name)
        return topic_of(topic)

    # --- reassignments -------------------------------------------------------------------

    async def alter_reassignments(
        self, reassignments: Sequence[Reassignment]
    ) -> list[ReassignmentResult]:
        results, applied = await self.client.alter_reassignments(reassignments)
        await self._caught_up(applied)
        return results

    async def elect_leaders(self, election: LeaderElection) -> list[ElectionResult]:
        results, applied = await self.client.elect_leaders(election)
        await self._caught_up(applied)
        return results

    async def list_reassignments(
        self, topics: Mapping[str, Sequence[int]] | None = None
    ) -> list[OngoingReassignment]:
        ongoing = await self.client.list_reassignments()
        if topics is None:
            return ongoing
        return [o for o in ongoing if o.partition in topics.get(o.topic, ())]

    # --- partition state, for Metadata and the leader epoch checks ---------------------

    def topic_image(self, topic_id: UUID) -> TopicImage | None:
        return self.image.topic_by_id(topic_id)


class ImageCatalog(TopicCatalog):
    """The topics of the metadata log in a controller's data directory, read from disk at
    every listing (controller/offline.py), for readers that never change topics: the
    PySpark jobs on a ``sluice dev`` data directory. Every write is refused."""

    def __init__(self, controller_dir: str) -> None:
        self.controller_dir = controller_dir

    async def list_topics(self) -> list[Topic]:
        from controller.offline import read_image

        image = read_image(self.controller_dir)
        return [topic_of(t) for t in image.topics.values()]

    async def create_topic(self, topic: Topic) -> None:
        raise PermissionError("a metadata image read from disk is read-only")

    async def delete_topic(self, name: str) -> Topic:
        raise PermissionError("a metadata image read from disk is read-only")

    async def set_partitions(self, name: str, count: int) -> Topic:
        raise PermissionError("a metadata image read from disk is read-only")

    async def set_configs(self, name: str, configs: Mapping[str, str | None]) -> Topic:
        raise PermissionError("a metadata image read from disk is read-only")
