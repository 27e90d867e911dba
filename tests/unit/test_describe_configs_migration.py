"""DescribeConfigs while a topic migrates between classic and diskless: the value the
operator set is shown at once (as Kafka shows any altered config), the progress beside it."""

from __future__ import annotations

from typing import Any

from broker.admin import configs
from broker.config import BrokerConfig
from broker.metadata.controller_catalog import topic_of
from controller.image import MetadataImage
from controller.logic_config import ControllerConfig
from controller.requests import AlterTopicConfigs, ConfigOp, OpType
from tests.unit._handlers import decode_answer, request_and_context, settled
from tests.unit.controller.harness import Cluster, uuids

RACKS = {1: "a", 2: "b", 3: "c"}


class Controller:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image


class Topics:
    def __init__(self, image: MetadataImage) -> None:
        self.image = image

    async def ensure(self, wanted: Any) -> None:
        list(wanted)

    def get(self, name: str) -> Any:
        topic = self.image.topic(name)
        return None if topic is None else topic_of(topic)


class Broker:
    """What DescribeConfigs reads: the topics and the controller's image."""

    def __init__(self, image: MetadataImage) -> None:
        self.authorizer = None
        self.config = BrokerConfig()
        self.controller = Controller(image)
        self.topics = Topics(image)


async def describe(image: MetadataImage, topic: str) -> dict[str, str | None]:
    request, ctx = request_and_context(
        32,
        4,
        {"resources": [{"resource_type": 2, "resource_name": topic, "configuration_keys": None}]},
    )
    answer = decode_answer(
        await settled(await configs.describe_configs(Broker(image), ctx, request)), 32, 4
    )
    (result,) = answer.results
    assert result.error_code == 0
    return {c.name: c.value for c in result.configs}


def alter(c: Cluster, topic: str, value: str) -> None:
    ops = [ConfigOp("diskless.enable", OpType.SET, value)]
    (result,) = c.commit(c.logic.alter_configs(c.image, [AlterTopicConfigs(topic, ops)]))
    assert result.error_code == 0, result


async def test_diskless_enable_shows_the_migrations_target_at_once() -> None:
    c = Cluster(ControllerConfig(new_uuid=uuids(), classic_topics=True))
    c.start(RACKS)
    c.create("t", 2, replication_factor=3, configs={"diskless.enable": "false"})
    assert (await describe(c.image, "t"))["diskless.enable"] == "false"
    alter(c, "t", "true")
    # No partition sealed yet: the topic is still classic (routing reads the image's kind),
    # but DescribeConfigs answers what the operator set, and where the migration is.
    assert c.image.topic("t").diskless is False  # type: ignore[union-attr]
    shown = await describe(c.image, "t")
    assert shown["diskless.enable"] == "true"
    assert str(shown["diskless.migration.state"]).startswith("pending (to-diskless")


async def test_diskless_enable_shows_false_at_once_when_migrating_to_classic() -> None:
    c = Cluster(ControllerConfig(new_uuid=uuids(), classic_topics=True))
    c.start(RACKS)
    c.create("t", 1)
    alter(c, "t", "false")
    shown = await describe(c.image, "t")
    assert shown["diskless.enable"] == "false"
    assert str(shown["diskless.migration.state"]).startswith("pending (to-classic")
