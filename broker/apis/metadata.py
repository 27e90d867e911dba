"""Metadata: brokers and topic/partition leadership, with auto-creation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from storage.catalog import Topic, TopicExists

from ..controller_client import ControllerRefused
from ..topics import InvalidTopic

if TYPE_CHECKING:
    from ..node import Broker
    from ..server import RequestContext

UNKNOWN_OPERATIONS = -(2**31)


def topic_entry(broker: Broker, topic: Topic) -> dict[str, Any]:
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": False,
        "partitions": [partition_entry(broker, topic, p) for p in range(topic.partitions)],
        "topic_authorized_operations": UNKNOWN_OPERATIONS,
    }


def partition_entry(broker: Broker, topic: Topic, partition: int) -> dict[str, Any]:
    if broker.controller is not None:
        return _controller_partition_entry(broker, topic, partition)
    leader = broker.leader_for(topic, partition)
    return {
        "error_code": 0,
        "partition_index": partition,
        "leader_id": leader,
        "leader_epoch": broker.leader_epoch(topic.topic_id, partition),
        "replica_nodes": [leader],
        "isr_nodes": [leader],
        "offline_replicas": [],
    }


def _controller_partition_entry(broker: Broker, topic: Topic, partition: int) -> dict[str, Any]:
    """The partition as the controller placed it: real replicas, leader, epoch and ISR."""
    assert broker.controller is not None
    image = broker.controller.image
    state = image.partition(topic.topic_id, partition)
    if state is None:  # the registry is a moment behind the image
        return {
            "error_code": int(ErrorCode.leader_not_available),
            "partition_index": partition,
            "leader_id": -1,
            "leader_epoch": -1,
            "replica_nodes": [],
            "isr_nodes": [],
            "offline_replicas": [],
        }
    return {
        # No alive replica: clients wait and ask again (retriable).
        "error_code": int(ErrorCode.leader_not_available) if state.leader < 0 else 0,
        "partition_index": partition,
        "leader_id": state.leader,
        "leader_epoch": state.leader_epoch,
        "replica_nodes": list(state.replicas),
        "isr_nodes": list(state.isr),
        "offline_replicas": image.offline_replicas(state),
    }


def _error_entry(name: str | None, topic_id: Any, error: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": int(error),
        "name": name,
        "topic_id": topic_id,
        "partitions": [],
        "topic_authorized_operations": UNKNOWN_OPERATIONS,
    }


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    requested = request.topics
    if requested is None or (version == 0 and not requested):
        entries = [topic_entry(broker, t) for t in broker.topics.all()]
    else:
        allow_auto = getattr(request, "allow_auto_topic_creation", True)
        entries = []
        # Topics another broker created since this one last read the catalog.
        await broker.topics.ensure(
            (item.name if item.name is not None else getattr(item, "topic_id", None), None)
            for item in requested
        )
        for item in requested:
            name = item.name
            topic_id = getattr(item, "topic_id", None)
            if name is None:
                topic = broker.topics.get_by_id(topic_id) if topic_id else None
                entries.append(
                    topic_entry(broker, topic)
                    if topic
                    else _error_entry(None, topic_id, ErrorCode.unknown_topic_id)
                )
                continue
            topic = broker.topics.get(name)
            if topic is None and allow_auto and broker.config.auto_create_topics_enable:
                topic, error = await auto_create(broker, name)
                if topic is None:
                    entries.append(_error_entry(name, None, error))
                    continue
            if topic is None:
                entries.append(_error_entry(name, None, ErrorCode.unknown_topic_or_partition))
            else:
                entries.append(topic_entry(broker, topic))
    return ctx.respond(
        {
            "throttle_time": 0,
            "brokers": [
                {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in broker.endpoints()
            ],
            "cluster_id": broker.cluster_id,
            "controller_id": broker.controller_id,
            "topics": entries,
            "cluster_authorized_operations": UNKNOWN_OPERATIONS,
            "error_code": 0,
        }
    )


async def auto_create(broker: Broker, name: str) -> tuple[Topic | None, ErrorCode]:
    try:
        return await broker.topics.create(name, -1, {}), ErrorCode.none
    except InvalidTopic:
        return None, ErrorCode.invalid_topic_exception
    except ControllerRefused as exc:
        return None, exc.code
    except TopicExists:
        # Created concurrently, by another request or another broker: use it.
        await broker.topics.load()
        topic = broker.topics.get(name)
        return topic, ErrorCode.none if topic else ErrorCode.unknown_topic_or_partition
