"""A broker process: storage backends, the append and fetch paths, the TCP server."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import logging
import os
import random
import time
import uuid
from collections.abc import Sequence

from kio.schema.api_versions.v3.request import ApiVersionsRequest

from broker.config import BrokerConfig
from broker.fetch.fetch_sessions import FetchSessionCache
from broker.groups.held_groups import GroupConfig
from broker.groups.lag import LATEST_OFFSET, group_lags, lag_loop
from broker.groups.service import GroupService
from broker.groups.share.group_configs import ShareConfig
from broker.groups.share.service import ShareService
from broker.logs.classic.classic_markers import ClassicMarkerSender
from broker.logs.classic.kafka_client import KafkaConnection
from broker.logs.classic.replica_manager import ReplicaManager
from broker.logs.diskless.diskless_append import Appender
from broker.logs.diskless.diskless_read import LEADER_EPOCH, Fetcher
from broker.logs.engines import log_router
from broker.logs.fetch_slots import CommitWatch
from broker.logs.migration.sealer import MigrationSealer
from broker.logs.partition_log import PartitionLog
from broker.logs.router import Purpose
from broker.logs.tiered.manager import TieringManager
from broker.metadata.client_az import ClientBytes
from broker.metadata.controller_catalog import ControllerCatalog
from broker.metadata.controller_client import ControllerRefused
from broker.metadata.membership import (
    BrokerEndpoint,
    ControllerMembership,
    Membership,
    RegistryMembership,
    StaticMembership,
)
from broker.metadata.peer_probe import PeerProbe
from broker.metadata.topics import TopicRegistry
from broker.metadata.transformer import set_hash_mode
from broker.security.authorizer import Authorizer, parse_super_users
from broker.security.listeners import ListenerPlan, listener_plan
from broker.security.sasl import SaslAuthenticator
from broker.security.scram import ScramCredential
from broker.security.tls import server_context
from broker.server.api_table import build_api_table
from broker.server.client_quotas import ClientQuotas
from broker.server.connection import ListenerSecurity
from broker.server.connection_limits import ConnectionLimits, limit_settings
from broker.server.http_endpoint import HttpEndpoint
from broker.server.listener import KafkaServer
from broker.server.metrics import METRICS, GroupLag
from broker.transactions.producer_ids import ProducerIdAllocator
from broker.transactions.txn_coordinator import TransactionCoordinator
from broker.transactions.txn_marker_writer import MarkerWriter
from common.background import cancel_and_wait
from controller.metrics import replica_counts, under_replicated_led_by
from controller.placement import managed_replication_factor
from storage.catalog import Topic, TopicCatalog
from storage.coordinator import BatchCoordinator, RetentionPolicy
from storage.groups import GroupStore
from storage.objects import ObjectStore, is_data_key
from storage.objects.block_cache import BlockCache
from storage.objects.marker_objects import stored_keys
from storage.outage import OutageLog
from storage.partition_key import PartitionKey

log = logging.getLogger(__name__)
_NO_QUOTAS: dict[object, dict[str, float]] = {}


def now_ms() -> int:
    return int(time.time() * 1000)


class Broker:
    def __init__(
        self,
        config: BrokerConfig,
        store: ObjectStore,
        coordinator: BatchCoordinator,
        catalog: TopicCatalog,
        group_store: GroupStore | None = None,
    ) -> None:
        self.config = config
        set_hash_mode(config.diskless_transformer_hash)
        self.store = store
        self.coordinator = coordinator
        self.catalog = catalog
        # Controller mode (controller.quorum.bootstrap.servers): topics, leaders and live
        # brokers come from the metadata image this broker follows.
        self.controller = catalog if isinstance(catalog, ControllerCatalog) else None
        self.cache = BlockCache(store, config.fetch_cache_block_bytes, config.fetch_cache_max_bytes)
        METRICS.watch_cache(self.cache)
        if self.controller is not None:
            controller, me = self.controller, config.node_id
            changes = controller.follower.isr_changes
            METRICS.watch_replicas(
                lambda: under_replicated_led_by(controller.image, me),
                lambda: changes.shrinks[me],
                lambda: changes.expands[me],
            )
        self.topics = TopicRegistry(catalog, coordinator, config)
        self.watch = CommitWatch()
        self.appender = Appender(
            store,
            coordinator,
            self.cache,
            config.node_id,
            config.produce_commit_interval_ms,
            config.produce_buffer_max_bytes,
            self.watch.notify,
            commit_mode=config.produce_commit_mode,
            commit_min_ms=config.produce_commit_min_ms,
            objects_per_second_max=config.produce_objects_per_second,
        )
        self.fetcher = Fetcher(coordinator, self.cache)
        self.producer_ids = ProducerIdAllocator(coordinator)
        if group_store is None:
            from storage.backends import group_store as default_group_store

            group_store = default_group_store(config, coordinator)
        # Consumer groups: membership in memory, committed offsets in the group store.
        self.groups = GroupService(
            config.node_id,
            lambda: self._membership.live() if self._membership is not None else [],
            GroupConfig.from_broker(config),
            group_store,
        )
        # Share groups (KIP-932): membership in memory and, for the next coordinator,
        # in the coordinator database with the share-partition state (storage/share_groups).
        from storage.backends import share_state_store

        self.share = ShareService(
            ShareConfig.from_broker(config),
            share_state_store(config, coordinator),
            self._share_topics,
            owns=self.groups.coordinator.owns,
        )
        # One group id space: a classic or consumer group cannot take a share group's id.
        self.groups.coordinator.share_group = self.share.is_share_group
        # The group configs are one table: a consumer group's own session timeout and
        # heartbeat interval (KIP-848) are kept and cached with the share groups' configs.
        self.groups.consumer.group_timings = self.share.configs.consumer_timings
        # Transactions: all state in the coordinator database; diskless markers made from
        # their file's key by readers (no PUT), unless diskless.txn.marker.objects.
        marker_writer = MarkerWriter(
            store,
            coordinator,
            self.cache,
            config.node_id,
            self.watch.notify,
            upload=config.diskless_txn_marker_objects,
        )
        self.transactions = TransactionCoordinator(
            coordinator,
            marker_writer,
            config.node_id,
            lambda: self._membership.live() if self._membership is not None else [],
            config.transaction_max_timeout_ms,
            config.transaction_abort_timed_out_transaction_cleanup_interval_ms,
            config.transactional_id_expiration_ms,
        )
        self.authorizer = _make_authorizer(config, self.controller)
        # Client quotas come from the metadata image (none without a controller).
        controller = self.controller
        self.quotas = ClientQuotas(
            controller.quotas if controller is not None else lambda: _NO_QUOTAS,
            config.quota_window_num,
            config.quota_window_size_seconds,
        )
        # Which log serves a partition, for every handler and for the components below
        # that ask it (broker/logs/router.py); it reads the engines only when asked.
        self.router = log_router(self)
        # Produce and fetch count their record bytes by client AZ (labels kept until the
        # live brokers change: the membership says when, once it is made in start()).
        self.client_bytes = ClientBytes(self.endpoints, config.rack)
        # Classic topics (local logs, leader-follower replication) need the controllers'
        # leaders and epochs: controller mode only. Their tiered part is built with them.
        self._tiered: TieringManager | None = None
        self.classic = ReplicaManager(self, self._tiering) if self.controller is not None else None
        # Seals partitions of migrating topics this broker leads (broker/logs/migration); the
        # replica manager asks it about every replica it opens.
        self.migration_sealer = MigrationSealer(self) if self.classic is not None else None
        if self.classic is not None:
            controller = self.controller
            assert controller is not None
            marker_writer.classic = ClassicMarkerSender(
                self.classic,
                controller,
                self.router.markers_on_classic_leader,
            )
            classic, me = self.classic, config.node_id
            METRICS.watch_followers(classic.follower_lags)
            METRICS.watch_replica_counts(
                lambda: replica_counts(classic.image(), me), classic.max_fetcher_lag
            )
        METRICS.topics.names = self._topic_name
        self.cluster_id = ""
        # Checked here, before anything starts: a bad listener setting fails the start.
        self.listener_plan: ListenerPlan = listener_plan(config)
        self._security = {
            listener.name: ListenerSecurity(
                listener.name,
                server_context(config, listener.name) if listener.protocol.tls else None,
                SaslAuthenticator(config, listener.name, self.scram_credential)
                if listener.protocol.sasl
                else None,
            )
            for listener in self.listener_plan.bound
        }
        # KIP-227 incremental fetch sessions, in this broker's memory.
        self.fetch_sessions = FetchSessionCache(config.max_incremental_fetch_session_cache_slots)
        # Diskless clients are routed around peers this broker suspects (controller mode).
        self.peer_probe: PeerProbe | None = None
        self._servers: dict[str, KafkaServer] = {}
        self._server: KafkaServer | None = None  # the inter-broker listener's
        self._tasks: list[asyncio.Task[None]] = []
        self._membership: Membership | None = None
        self._http: HttpEndpoint | None = None
        self._stopping = False
        # True while the coordinator delivers other brokers' commits as notifications.
        self._notified = False

    def _tiering(self, replicas: ReplicaManager) -> TieringManager:
        """The tiered part (KIP-405) of the classic replicas: copies, remote retention,
        remote reads; its segments' metadata in the coordinator's database."""
        from storage.backends import remote_log_metadata

        metadata = remote_log_metadata(self.config, self.coordinator)
        self._tiered = TieringManager(replicas, metadata)  # type: ignore[arg-type]
        return self._tiered

    def _share_topics(self, names: Sequence[str]) -> dict[str, tuple[uuid.UUID, int]]:
        """The subscribed topics a share group's assignor sees: id and partition count."""
        found = {}
        for name in names:
            topic = self.topics.get(name)
            if topic is not None:
                found[name] = (topic.topic_id, topic.partitions)
        return found

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.port

    def endpoints(self) -> list[BrokerEndpoint]:
        """Live brokers, listed in Metadata. The seam the controller issue replaces."""
        assert self._membership is not None, "not started"
        return self._membership.live()

    def endpoints_on(self, listener: str) -> list[BrokerEndpoint]:
        """Live brokers at the addresses of ``listener`` (the one a client came in on)."""
        return [b.on_listener(listener) for b in self.endpoints()]

    def listener_port(self, name: str) -> int:
        """The port listener ``name`` is bound to (tests and tools; 0 in a setting
        means any free port)."""
        return self._servers[name.upper()].port

    def advertised_listeners(self) -> tuple[str, ...]:
        """ "NAME://host:port" of every listener, as registered with the controller."""
        out = []
        for name, listener in self.listener_plan.advertised.items():
            port = listener.port or self._servers[name].port
            host = f"[{listener.host}]" if ":" in listener.host else listener.host
            out.append(f"{name}://{host}:{port}")
        return tuple(out)

    def scram_credential(self, username: str, mechanism: str) -> ScramCredential | None:
        """A SCRAM user's keys from the metadata image (AlterUserScramCredentials)."""
        if self.controller is None:
            return None
        found = self.controller.image.scram_credentials.get((username, mechanism))
        if found is None:
            return None
        return ScramCredential(
            mechanism, found.salt, found.stored_key, found.server_key, found.iterations
        )

    @property
    def broker_epoch(self) -> int:
        """The epoch the controllers registered this broker with (-1: none yet), which its
        AlterPartition requests carry."""
        membership = self._membership
        return membership.broker_epoch if isinstance(membership, ControllerMembership) else -1

    @property
    def multi_broker(self) -> bool:
        return len(self.endpoints()) > 1

    def leader_for(self, topic: Topic, partition: int) -> int:
        """The broker clients should send a partition's produce and fetch to. Any
        broker can serve any partition; spreading leaders spreads the clients."""
        if self.controller is not None:
            state = self.controller.image.partition(topic.topic_id, partition)
            return state.leader if state is not None else -1
        brokers = self.endpoints()
        return brokers[(topic.topic_id.int + partition) % len(brokers)].node_id

    def replication_factor(self, topic: Topic) -> int:
        """Replicas per partition: one without a controller; with one, as placed (or, for
        a topic not created yet, what placement would give: one replica per rack)."""
        if self.controller is None:
            return 1
        image = self.controller.image
        state = image.partition(topic.topic_id, 0)
        return len(state.replicas) if state is not None else managed_replication_factor(image)

    async def group_lags(self) -> list[GroupLag]:
        """The consumer-group lag this broker exports (broker/groups/lag.py)."""
        logs = self.router

        def latest(topic_id: uuid.UUID, partition: int) -> PartitionLog:
            return logs.route(topic_id, partition, Purpose.LIST_OFFSETS, LATEST_OFFSET)

        return await group_lags(self.groups, self.topics.get_by_id, logs.latest_led_here, latest)

    def _topic_name(self, key: uuid.UUID | str) -> str | None:
        """A topic's current name by id or name, None when it does not exist (metrics)."""
        topic = self.topics.get_by_id(key) if isinstance(key, uuid.UUID) else self.topics.get(key)
        return topic.name if topic is not None else None

    def leader_epoch(self, topic_id: uuid.UUID, partition: int) -> int:
        """The partition's leader epoch: the controller's in controller mode, else the one
        epoch there is. Metadata, the fetch checks and fetched batches all use this."""
        if self.controller is not None:
            state = self.controller.image.partition(topic_id, partition)
            if state is not None:
                return state.leader_epoch
        return LEADER_EPOCH

    @property
    def controller_id(self) -> int:
        """What Metadata and DescribeCluster name as controller. Clients cannot talk to the
        Raft controllers (they have no Kafka listener), so, as Kafka does under KRaft, a
        live broker stands in: the lowest id, the same answer on every broker. A broker its
        peers stopped answering (``peer_probe``) is passed over at once, not only once the
        controller fences it: admin clients send controller-bound requests there and wait
        for it."""
        live = [b.node_id for b in self.endpoints()]
        suspects = self.peer_probe.suspects() if self.peer_probe is not None else frozenset()
        answering = [n for n in live if n not in suspects]
        return min(answering or live, default=self.config.node_id)

    async def start(self) -> None:
        os.makedirs(self.config.data_dir, exist_ok=True)
        await self.store.start()
        await self.coordinator.start()
        await self.catalog.start()
        await self.groups.start()
        await self.share.start()
        self.cluster_id = await self.coordinator.cluster_id(_proposed_cluster_id(self.config))
        if self.controller is not None:
            # Topics come from the image: follow the metadata log before serving.
            await self.controller.follower.start(BrokerStorageListener(self))
            if self.authorizer is not None:
                await self._catch_up_acls()
        await self.topics.load()
        if self.classic is not None:
            await self.classic.start()
            # Leaders seal their classic partitions of topics migrating to diskless.
            assert self.migration_sealer is not None
            self.migration_sealer.start()
            self.peer_probe = self._make_peer_probe()
        table = build_api_table(self)
        # One set of connection limits for all listeners (max.connections is per broker).
        limits = ConnectionLimits(limit_settings(self.config), self._ip_connection_rate)
        for number, listener in enumerate(self.listener_plan.bound):
            server = KafkaServer(
                table,
                listener.host,
                listener.port,
                self.config.socket_request_max_bytes,
                pending_bytes=self.config.connection_pending_max_bytes,
                security=self._security[listener.name],
                tune_process=number == 0,
                request_quota=self.quotas.request if self.controller is not None else None,
                limits=limits,
                exempt=listener.name == self.listener_plan.inter_broker,
            )
            self._servers[listener.name] = server
            # Bound now (registration advertises the ports), serving once unfenced.
            await server.start(serving=self.controller is None)
        self._server = self._servers[self.listener_plan.inter_broker]
        self._membership = self._make_membership()
        self._membership.watch(self.client_bytes.live_changed)
        if isinstance(self._membership, ControllerMembership) and self._tiered is not None:
            # KIP-950: the controller's DisableRemoteTopic requests ride the heartbeats.
            self._membership.requests = self._tiered
            self._tiered.heartbeat_soon = self._membership.beat_soon
        await self._membership.start()
        if isinstance(self._membership, ControllerMembership):
            # As Kafka's broker: no request is served before the controller unfenced this
            # one (a fenced broker took CreateTopics whose placement then left it out).
            await self._membership.wait_unfenced()
            for server in self._servers.values():
                await server.serve()
        if self.config.http_port >= 0:
            self._http = HttpEndpoint(
                self.config.host, self.config.http_port, METRICS.registry, self.not_ready_reason
            )
            await self._http.start()
        if self.controller is None:
            # A database catalog is polled; the controller's image is pushed (the follower
            # reloads the topic index on every change).
            self._tasks.append(asyncio.create_task(self._metadata_refresh_loop()))
        self._tasks.append(asyncio.create_task(self._watch_logs()))
        self._tasks.append(asyncio.create_task(self._retention_loop()))
        self._tasks.append(asyncio.create_task(self._cleaner_loop()))
        self._tasks.append(asyncio.create_task(self._orphan_loop()))
        if self.config.http_port >= 0 and self.config.consumer_lag_metrics_interval_ms > 0:
            # Only for a /metrics endpoint: a round reads every committed offset.
            interval = self.config.consumer_lag_metrics_interval_ms / 1000
            self._tasks.append(asyncio.create_task(lag_loop(self.group_lags, interval)))
        await self.transactions.start()
        if self.config.listeners:
            bound = ", ".join(
                f"{b.name} {b.protocol.value} on {b.host or '*'}:{self._servers[b.name].port}"
                for b in self.listener_plan.bound
            )
            log.info(
                "sluice broker %d listening: %s (cluster %s, data in %s)",
                self.config.node_id,
                bound,
                self.cluster_id,
                self.config.data_dir,
            )
        else:
            log.info(
                "sluice broker %d listening on %s:%d (cluster %s, data in %s)",
                self.config.node_id,
                self.config.host,
                self.port,
                self.cluster_id,
                self.config.data_dir,
            )

    def _make_peer_probe(self) -> PeerProbe:
        classic, controller = self.classic, self.controller
        assert classic is not None and controller is not None
        me = self.config.node_id

        def connect(node: int, host: str, port: int) -> KafkaConnection:
            return KafkaConnection(host, port, f"sluice-peer-probe-{me}", classic.security)

        def peers() -> list[tuple[int, str, int]]:
            return [
                (b.node_id, b.host, b.port)
                for b in controller.image.brokers.values()
                if not b.fenced
            ]

        probe = PeerProbe(
            me,
            connect,
            ApiVersionsRequest(
                client_software_name="sluice-peer-probe", client_software_version="1"
            ),
            self.config.diskless_peer_probe_interval_ms,
            self.config.diskless_peer_suspect_ms,
        )
        probe.start(peers)
        return probe

    async def stop(self) -> None:
        # Order matters: stop admitting requests, flush what was admitted so every
        # producer waiting on it is answered, then disconnect and close storage.
        self._stopping = True
        for server in self._servers.values():
            server.stop_accepting()
        self.groups.resign_all()  # answers JoinGroup/SyncGroup waiting on a rebalance
        if self.classic is not None:
            self.classic.stop_serving()
        await self.appender.close()
        for server in self._servers.values():
            await server.close()
        await cancel_and_wait(self._tasks)
        if self.peer_probe is not None:
            self.peer_probe.close()
        if self.migration_sealer is not None:
            await self.migration_sealer.stop()
        if self.classic is not None:
            await self.classic.stop()
        await self.transactions.stop()
        if self._membership is not None:
            await self._membership.stop()
        if self._http is not None:
            await self._http.close()
        await self.groups.close()
        await self.share.close()
        await self.catalog.close()
        await self.coordinator.close()
        await self.store.close()

    async def _catch_up_acls(self) -> None:
        """Before serving, read the log up to the active controller's end: the follower's
        first answer may come from a controller that lags, and enforcing an older ACL set
        (an ALLOW since revoked) would be a hole, not just staleness."""
        assert self.controller is not None
        try:
            await self.controller.follower.catch_up()
        except ControllerRefused as exc:
            log.warning("ACLs may lag until the active controller answers: %s", exc.message)

    def not_ready_reason(self) -> str | None:
        """None when this broker should get Kafka traffic (see http_endpoint)."""
        if self._stopping:
            return "shutting down"
        if self._server is None or self._membership is None:
            return "starting"
        return self._membership.problem()

    @property
    def http_port(self) -> int | None:
        return self._http.port if self._http is not None else None

    def _ip_connection_rate(self, host: str) -> float | None:
        """KIP-612: the connection_creation_rate quota of ``host`` (else the default ip
        entity's) from the metadata image; None without one."""
        if self.controller is None:
            return None
        quotas = self.controller.image.quotas
        for entity in ((("ip", host),), (("ip", None),)):
            rate = quotas.get(entity, {}).get("connection_creation_rate")
            if rate is not None:
                return rate
        return None

    def _make_membership(self) -> Membership:
        inter = self.listener_plan.advertised[self.listener_plan.inter_broker]
        me = BrokerEndpoint(
            self.config.node_id,
            inter.host,
            inter.port or self.port,
            self.config.rack,
            # Only with listeners set: a default broker registers exactly as before.
            self.advertised_listeners() if self.config.listeners else (),
        )
        if self.controller is not None:
            return ControllerMembership(
                self.controller.client,
                self.controller.follower,
                me,
                self.config.broker_heartbeat_interval_ms,
                self.config.broker_session_timeout_ms,
                self.cluster_id,
            )
        static = self.config.static_brokers()
        if not static:
            return RegistryMembership(
                self.coordinator,
                me,
                self.config.broker_heartbeat_interval_ms,
                self.config.broker_session_timeout_ms,
            )
        endpoints = [BrokerEndpoint(*entry) for entry in static]
        if me.node_id not in {e.node_id for e in endpoints}:
            raise ValueError(f"cluster.brokers does not list this broker (node.id {me.node_id})")
        return StaticMembership(endpoints)

    @property
    def remote_poll_seconds(self) -> float | None:
        """How long a long poll may wait before asking the coordinator again: other
        brokers' commits wake local waiters only through the coordinator's notifications,
        and those are best effort (a safety re-check stays)."""
        if not self.multi_broker:
            return None
        if self._notified:
            return max(self.config.remote_poll_interval_ms / 1000, 1.0)
        return self.config.remote_poll_interval_ms / 1000

    async def _watch_logs(self) -> None:
        def changed(keys: list[PartitionKey] | None) -> None:
            self._notified = True
            self.watch.wake(None if keys is None else [(k.topic_id, k.partition) for k in keys])

        try:
            await self.coordinator.watch_logs(changed)
        finally:
            self._notified = False

    async def _metadata_refresh_loop(self) -> None:
        interval = self.config.metadata_refresh_interval_ms / 1000
        outage = OutageLog("refreshing topics", log)
        while True:
            await asyncio.sleep(interval)
            with outage:
                await self.topics.load()

    async def enforce_retention(self) -> None:
        policies = [
            RetentionPolicy(
                topic.topic_id,
                partition,
                self.topics.int_config(topic, "retention.ms"),
                self.topics.int_config(topic, "retention.bytes"),
            )
            for topic in self.topics.all()
            # Classic logs are local: broker/logs/classic enforces their retention (the diskless
            # part of a topic migrated to classic is the coordinator's).
            if self.router.coordinator_retains(topic.topic_id)
            for partition in range(topic.partitions)
        ]
        if policies:
            await self.coordinator.enforce_retention(policies, now_ms())

    async def delete_marked_files(self) -> int:
        files = await self.coordinator.files_to_delete(
            now_ms() - self.config.file_delete_delay_ms, 1000
        )
        if not files:
            return 0
        keys = [f.object_key for f in files]
        # Marker objects (storage/objects/marker_objects.py) were never uploaded.
        await self.store.delete_many(stored_keys(keys))
        await self.coordinator.forget_files(keys)
        return len(keys)

    async def delete_orphans(self) -> int:
        """Delete objects older than the grace period that no file row names."""
        cutoff = now_ms() - self.config.orphan_grace_ms
        deleted = 0
        async for page in self.store.list_objects():
            old = [o.key for o in page if o.modified_ms < cutoff and is_data_key(o.key)]
            if not old:
                continue
            orphans = await self.coordinator.unknown_objects(old)
            if orphans:
                log.warning("deleting %d orphaned objects, e.g. %s", len(orphans), orphans[0])
                await self.store.delete_many(orphans)
                deleted += len(orphans)
        return deleted

    async def _retention_loop(self) -> None:
        interval = self.config.retention_check_interval_ms / 1000
        outage = OutageLog("retention enforcement", log)
        while True:
            # Jitter spreads the work of several brokers sharing one coordinator.
            await asyncio.sleep(interval * random.uniform(0.5, 1.5))
            with outage:
                await self.enforce_retention()

    async def _cleaner_loop(self) -> None:
        interval = max(self.config.file_delete_delay_ms / 1000 / 2, 1.0)
        outage = OutageLog("deleting files marked for deletion", log)
        while True:
            await asyncio.sleep(interval * random.uniform(0.5, 1.5))
            with outage:
                await self.delete_marked_files()

    async def _orphan_loop(self) -> None:
        interval = self.config.orphan_check_interval_ms / 1000
        outage = OutageLog("deleting orphaned objects", log)
        while True:
            await asyncio.sleep(interval * random.uniform(0.5, 1.5))
            with outage:
                await self.delete_orphans()


class BrokerStorageListener:
    """A broker's reactions: logs in its batch coordinator, group offsets, its topic index."""

    def __init__(self, broker: Broker) -> None:
        self._broker = broker

    async def logs_needed(self, keys: list[PartitionKey]) -> None:
        await self._broker.coordinator.create_logs(keys)

    async def topics_removed(self, topic_ids: list[uuid.UUID]) -> None:
        # As DeleteTopics does without a controller (broker/admin/topics_admin.py).
        await self._broker.coordinator.delete_logs(topic_ids, int(time.time() * 1000))
        await self._broker.groups.offsets.topics_deleted(topic_ids)
        await self._broker.share.topics_deleted(topic_ids)

    async def image_changed(self) -> None:
        await self._broker.topics.load()
        if self._broker.classic is not None:
            # Leaders, followers, ISRs and epochs of the classic replicas hosted here.
            self._broker.classic.reconcile()


def _make_authorizer(
    config: BrokerConfig, controller: ControllerCatalog | None
) -> Authorizer | None:
    """The ACL authorizer ``authorizer.class.name`` asks for, reading the ACLs of the
    metadata image this broker follows; None (everything allowed) without one."""
    if not config.authorizer_class_name:
        return None
    if controller is None:
        raise ValueError(
            "authorizer.class.name needs controller mode: ACLs are kept in the controllers' "
            "metadata log (controller.quorum.bootstrap.servers)"
        )
    return Authorizer(
        lambda: controller.image.acls,
        parse_super_users(config.super_users),
        config.allow_everyone_if_no_acl_found,
    )


def _proposed_cluster_id(config: BrokerConfig) -> str:
    """The id this broker proposes if the cluster has none yet: the one a data dir from
    before the coordinator kept ids, or a new one (Kafka's 22-character base64 form)."""
    with (
        contextlib.suppress(FileNotFoundError),
        open(os.path.join(config.data_dir, "cluster.id")) as f,
    ):
        return f.read().strip()
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
