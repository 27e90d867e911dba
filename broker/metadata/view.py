"""What handlers and components read of this broker's view of its cluster, as Protocols:
each module names the services it uses instead of taking the whole ``Broker``
(broker/node.py), which provides them all. A module that needs more declares its own
Protocol beside it, extending these."""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from broker.security.access import Authorizing

if TYPE_CHECKING:
    from uuid import UUID

    from broker.config import BrokerConfig
    from broker.metadata.controller_catalog import ControllerCatalog
    from broker.metadata.membership import BrokerEndpoint
    from broker.metadata.topics import TopicRegistry
    from storage.catalog import Topic


class ClusterView(Protocol):
    """The metadata view: this broker's settings, its topics, the controllers' image (in
    controller mode) and the live brokers, leaders and epochs derived from them."""

    @property
    def config(self) -> BrokerConfig: ...

    @property
    def topics(self) -> TopicRegistry: ...

    @property
    def controller(self) -> ControllerCatalog | None: ...

    @property
    def cluster_id(self) -> str: ...

    @property
    def controller_id(self) -> int: ...

    def endpoints(self) -> list[BrokerEndpoint]: ...

    def endpoints_on(self, listener: str) -> list[BrokerEndpoint]: ...

    def leader_for(self, topic: Topic, partition: int) -> int: ...

    def leader_epoch(self, topic_id: UUID, partition: int) -> int: ...

    def replication_factor(self, topic: Topic) -> int: ...


class HandlerView(ClusterView, Authorizing, Protocol):
    """What most handlers use: the metadata view and the access checks."""
