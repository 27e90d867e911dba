"""The broker's topics as KIP-848 consumer groups resolve subscriptions against them
(:class:`broker.groups.consumer_group_heartbeat.TopicLookup`): by name, by regex (only
the topics the member may describe), and the racks of their partitions' replicas."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any
from uuid import UUID

from broker.groups.assignor_racks import PartitionRacks
from broker.groups.consumer_group import TopicInfo
from broker.groups.topic_regex import matching
from broker.logs.router import az_routed
from broker.security import access
from common.acl import AclOperation

if TYPE_CHECKING:
    from broker.groups.service import GroupsView
    from broker.security.request_context import RequestContext


class _RegexCache:
    """Regex subscriptions resolved against every topic name at most once a second per
    pattern: every heartbeat of every regex member would otherwise scan all topics (Kafka
    resolves them asynchronously, at most every 10 s unless topics appear)."""

    TTL_S = 1.0

    def __init__(self) -> None:
        self._resolved: dict[str, tuple[float, set[str]]] = {}

    def matching(self, pattern: str, registry: Any) -> set[str]:
        now = time.monotonic()
        hit = self._resolved.get(pattern)
        if hit is not None and now - hit[0] < self.TTL_S:
            return hit[1]
        if len(self._resolved) > 1024:
            self._resolved.clear()
        found = matching(pattern, (t.name for t in registry.all()))
        self._resolved[pattern] = (now, found)
        return found


_regex_cache = _RegexCache()


class BrokerTopics:
    """The broker's topics as the heartbeat resolves subscriptions against them."""

    def __init__(self, broker: GroupsView, ctx: RequestContext) -> None:
        self._broker = broker
        self._ctx = ctx
        self._registry = broker.topics

    def get(self, name: str) -> TopicInfo | None:
        topic = self._registry.get(name)
        if topic is None:
            return None
        return TopicInfo(topic.name, topic.topic_id, topic.partitions)

    def matching(self, pattern: str) -> set[str]:
        found = _regex_cache.matching(pattern, self._registry)
        if not access.enabled(self._broker):
            return found
        # Only the topics the member may describe, as Kafka resolves regexes.
        return {
            name
            for name in found
            if access.topic(self._broker, self._ctx, AclOperation.DESCRIBE, name)
        }

    def partition_racks(self, topic_id: UUID, partitions: int) -> Sequence[PartitionRacks]:
        """A classic partition is in its replicas' brokers' racks. A diskless one is in every
        rack: any broker serves it, and the AZ transformer sends each client to a broker
        of its own AZ (broker/metadata/transformer.py), so no member is far from it. Without
        a controller there are no replica sets and every topic is diskless."""
        everywhere: list[PartitionRacks] = [None] * partitions
        controller = self._broker.controller
        if controller is None:
            return everywhere
        image = controller.image
        topic = image.topic_by_id(topic_id)
        if topic is None or az_routed(topic):
            return everywhere
        out: list[PartitionRacks] = []
        for p in range(partitions):
            state = topic.partitions.get(p)
            if state is None:
                out.append(None)
                continue
            brokers = (image.brokers.get(r) for r in state.replicas)
            out.append(frozenset(b.rack for b in brokers if b is not None and b.rack))
        return out
