"""Metadata: brokers and topic/partition leadership, with auto-creation."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from broker.metadata.client_az import client_az
from broker.metadata.controller_client import ControllerRefused
from broker.metadata.topics import InvalidTopic
from broker.metadata.transformer import DECISIONS, Routing, route, route_without_replicas
from broker.metadata.view import HandlerView
from broker.security import access
from broker.security.authorized_operations import NOT_REQUESTED
from broker.server.metrics import METRICS
from common.acl import CLUSTER_NAME, AclOperation
from common.topic_names import topic_name_error
from storage.catalog import Topic, TopicExists

if TYPE_CHECKING:
    from broker.metadata.peer_probe import PeerProbe
    from broker.security.request_context import RequestContext
    from controller.image import TopicImage


class ClientRouting(Protocol):
    """Where Metadata may send a client, as the log router (broker/logs/router.py) says."""

    def az_routed(self, topic: TopicImage) -> bool: ...

    def serves_any_broker(self, topic: TopicImage, partition: int) -> bool: ...


class MetadataView(HandlerView, Protocol):
    @property
    def router(self) -> ClientRouting: ...

    @property
    def peer_probe(self) -> PeerProbe | None: ...  # brokers not answering their peers


def topic_entry(
    broker: MetadataView,
    topic: Topic,
    routing: Routing | None = None,
    operations: int = NOT_REQUESTED,
) -> dict[str, Any]:
    return {
        "error_code": 0,
        "name": topic.name,
        "topic_id": topic.topic_id,
        "is_internal": False,
        "partitions": [partition_entry(broker, topic, p, routing) for p in range(topic.partitions)],
        "topic_authorized_operations": operations,
    }


def partition_entry(
    broker: MetadataView, topic: Topic, partition: int, routing: Routing | None = None
) -> dict[str, Any]:
    if broker.controller is not None:
        return _controller_partition_entry(broker, topic, partition, routing)
    leader = broker.leader_for(topic, partition)
    if routing is not None and routing.client_az is not None:
        # No replica sets without a controller: any live broker of the client's AZ.
        leader = route_without_replicas(
            topic.topic_id, partition, routing.alive, routing.client_az, leader
        )
    return {
        "error_code": 0,
        "partition_index": partition,
        "leader_id": leader,
        "leader_epoch": broker.leader_epoch(topic.topic_id, partition),
        "replica_nodes": [leader],
        "isr_nodes": [leader],
        "offline_replicas": [],
    }


def _controller_partition_entry(
    broker: MetadataView, topic: Topic, partition: int, routing: Routing | None = None
) -> dict[str, Any]:
    """The partition as the controller placed it: real replicas, leader, epoch and ISR;
    for diskless topics, as the transformer routes this client (broker/metadata/transformer.py)."""
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
    topic_image = image.topic_by_id(topic.topic_id)
    if routing is not None and topic_image is not None and broker.router.az_routed(topic_image):
        r = route(
            topic.topic_id,
            partition,
            state.replicas,
            state.isr,
            state.leader,
            routing.alive,
            routing.client_az,
            # A sealed classic log with records: to its replicas, across AZs if need be.
            routing.local_fallback and broker.router.serves_any_broker(topic_image, partition),
        )
        if r.hash_fallback:
            METRICS.transformer_fallbacks.inc()
        if r.routed_around:
            METRICS.transformer_routed_around.inc()
            DECISIONS.note(topic.name, partition, topic.topic_id, r)
        return {
            "error_code": int(ErrorCode.leader_not_available) if r.leader < 0 else 0,
            "partition_index": partition,
            "leader_id": r.leader,
            "leader_epoch": state.leader_epoch,
            "replica_nodes": list(r.replicas),
            "isr_nodes": list(r.isr),
            "offline_replicas": list(r.offline),
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


def request_routing(broker: MetadataView, ctx: RequestContext, request: Any) -> Routing:
    """The transformer's per-request view, and the client AZ hit/miss/unaware count."""
    # A peer this broker suspects (its probes go unanswered) counts as offline for diskless
    # routing at once, long before the controller's session timeout fences it.
    suspects = broker.peer_probe.suspects() if broker.peer_probe is not None else frozenset()
    routing = Routing(
        {b.node_id: b.rack for b in broker.endpoints() if b.node_id not in suspects},
        client_az(ctx.header.client_id, request),
        broker.config.diskless_transformer_az_local_fallback,
    )
    result = "unaware" if routing.client_az is None else "hit" if routing.az_has_broker else "miss"
    METRICS.client_az_requests.labels(result).inc()
    return routing


def _error_entry(name: str | None, topic_id: Any, error: ErrorCode) -> dict[str, Any]:
    return {
        "error_code": int(error),
        "name": name,
        "topic_id": topic_id,
        "partitions": [],
        "topic_authorized_operations": NOT_REQUESTED,
    }


async def handle(broker: MetadataView, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    requested = request.topics
    routing = request_routing(broker, ctx, request)
    topic_ops = bool(getattr(request, "include_topic_authorized_operations", False))
    checked = access.enabled(broker)

    def entry_of(topic: Topic) -> dict[str, Any]:
        ops = access.operations(broker, ctx, "topic", topic.name, topic_ops)
        return topic_entry(broker, topic, routing, ops)

    def may(operation: AclOperation, name: str) -> bool:
        return not checked or access.topic(broker, ctx, operation, name)

    if requested is None or (version == 0 and not requested):
        # Listing all topics: those the caller may not describe are left out.
        entries = [entry_of(t) for t in broker.topics.all() if may(AclOperation.DESCRIBE, t.name)]
    else:
        allow_auto = getattr(request, "allow_auto_topic_creation", True)
        entries = []
        # Topics another broker created since this one last read the catalog.
        await broker.topics.ensure(
            (item.name if item.name is not None else getattr(item, "topic_id", None), None)
            for item in requested
        )
        seen: set[str] = set()
        for item in requested:
            name = item.name
            topic_id = getattr(item, "topic_id", None)
            if name is not None:
                # A name asked twice is answered once (Kafka reads the names as a set).
                if name in seen:
                    continue
                seen.add(name)
            if name is None:
                topic = broker.topics.get_by_id(topic_id) if topic_id else None
                if topic is None:
                    entries.append(_error_entry(None, topic_id, ErrorCode.unknown_topic_id))
                elif not may(AclOperation.DESCRIBE, topic.name):
                    denied = ErrorCode.topic_authorization_failed
                    entries.append(_error_entry(None, topic_id, denied))
                else:
                    entries.append(entry_of(topic))
                continue
            if not may(AclOperation.DESCRIBE, name):
                entries.append(_error_entry(name, None, ErrorCode.topic_authorization_failed))
                continue
            topic = broker.topics.get(name)
            if (
                topic is None
                and allow_auto
                and broker.config.auto_create_topics_enable
                and checked
                and not (
                    access.cluster(broker, ctx, AclOperation.CREATE)
                    or may(AclOperation.CREATE, name)
                )
            ):
                # Auto-creation needs CREATE on the cluster or on the topic.
                entries.append(_error_entry(name, None, ErrorCode.topic_authorization_failed))
                continue
            if topic is None and allow_auto and broker.config.auto_create_topics_enable:
                topic, error = await auto_create(broker, name)
                if topic is None:
                    entries.append(_error_entry(name, None, error))
                    continue
            if topic is None:
                # No such topic: one that cannot exist is told apart, as Kafka does; both
                # still carry the caller's operations on that name when asked (Kafka
                # computes them for every topic the caller may describe).
                error = (
                    ErrorCode.unknown_topic_or_partition
                    if topic_name_error(name) is None
                    else ErrorCode.invalid_topic_exception
                )
                entry = _error_entry(name, None, error)
                entry["topic_authorized_operations"] = access.operations(
                    broker, ctx, "topic", name, topic_ops
                )
                entries.append(entry)
            else:
                entries.append(entry_of(topic))
    return ctx.respond(
        {
            "throttle_time": 0,
            "brokers": [
                {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in broker.endpoints_on(ctx.listener)
            ],
            "cluster_id": broker.cluster_id,
            "controller_id": broker.controller_id,
            "topics": entries,
            "cluster_authorized_operations": access.operations(
                broker,
                ctx,
                "cluster",
                CLUSTER_NAME,
                bool(getattr(request, "include_cluster_authorized_operations", False)),
            ),
            "error_code": 0,
        }
    )


async def auto_create(broker: MetadataView, name: str) -> tuple[Topic | None, ErrorCode]:
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
