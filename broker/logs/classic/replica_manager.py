"""Which classic partitions this broker hosts, and in which role, from the metadata image.

- ``reconcile`` runs on every image change: a replica of a classic partition gets its log
  opened (``<data.dir>/<topic>-<partition>/``, created if new); the leader named by the
  image leads, the others follow it (one ``ReplicaFetcher`` per leader broker); replicas
  this broker no longer holds (deleted topic, reassigned away) are closed and deleted.
- A leader's ISR changes (a follower fell behind for ``replica.lag.time.max.ms``, or caught
  up) go to the controller as AlterPartition; the image then carries them back.
- Retention (``retention.ms`` / ``retention.bytes``, whole segments) runs in the background.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.logs.classic.partition import FOLLOWER, LEADER, ClassicPartition, now_ms
from broker.logs.classic.replica_fetcher import ReplicaFetcher
from broker.logs.classic.replication_quota import UNTHROTTLED, ReplicationQuota, throttled
from broker.metadata.view import ClusterView
from broker.security.inter_broker import PLAINTEXT, InterBrokerSecurity, inter_broker_security
from broker.server.metrics import FollowerLag
from common.background import cancel_and_wait
from controller.broker_config_admin import dynamic_value
from controller.election import keeps_classic_isr
from controller.image import MetadataImage
from controller.requests import IsrChange
from storage.catalog import Topic
from storage.classic import cleaner
from storage.classic.log import NO_LIMIT, Log, LogConfig

if TYPE_CHECKING:
    from broker.logs.classic.tiered_part import Tiering
    from broker.logs.fetch_slots import CommitWatch
    from broker.security.listeners import ListenerPlan
    from controller.image import TopicImage
    from storage.coordinator import BatchCoordinator
    from storage.objects import ObjectStore
    from storage.objects.block_cache import BlockCache

log = logging.getLogger(__name__)

FLUSH_CHECK_S = 1.0
ISR_RETRY_MS = 1000  # after a refused or failed AlterPartition
LEADER_RATE = "leader.replication.throttled.rate"
FOLLOWER_RATE = "follower.replication.throttled.rate"
LEADER_REPLICAS = "leader.replication.throttled.replicas"
FOLLOWER_REPLICAS = "follower.replication.throttled.replicas"
TOPIC_ID_FILE = "partition.metadata"  # Kafka's name: the topic id a log directory belongs to


class Sealing(Protocol):
    """The migration sealer (broker/logs/migration), told of every replica opened."""

    def on_replica(self, p: ClassicPartition, topic: TopicImage) -> None: ...


class MigrationRules(Protocol):
    """What the log router (broker/logs/router.py) says of migrating topics' classic logs."""

    def sealed_boundary(self, topic_id: UUID, partition: int) -> int | None: ...

    def hosted_classic(self, image: MetadataImage, classic: set[UUID]) -> set[UUID]: ...


class ClassicHost(ClusterView, Protocol):
    """What the classic engine (its tiered part too) reads of its broker: the metadata
    view, the batch coordinator (tiered metadata, seals), the object store and its block
    cache (remote segments), the commit watch long polls wait on, the inter-broker
    listener, the broker epoch it is registered with, its own replica manager (the
    router's rules read it), the router's rules for migrating topics and the migration
    sealer."""

    @property
    def coordinator(self) -> BatchCoordinator: ...

    @property
    def store(self) -> ObjectStore: ...

    @property
    def cache(self) -> BlockCache: ...

    @property
    def watch(self) -> CommitWatch: ...

    @property
    def listener_plan(self) -> ListenerPlan: ...

    @property
    def broker_epoch(self) -> int: ...

    @property
    def classic(self) -> ReplicaManager | None: ...

    @property
    def router(self) -> MigrationRules: ...

    @property
    def migration_sealer(self) -> Sealing | None: ...


class ReplicaManager:
    def __init__(self, broker: ClassicHost, tiering: Callable[[ReplicaManager], Tiering]) -> None:
        self.broker = broker
        self.me = broker.config.node_id
        self.partitions: dict[tuple[UUID, int], ClassicPartition] = {}
        self._classic: set[UUID] = set()
        self._fetchers: dict[int, ReplicaFetcher] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self.stopping = False
        # Replication throttling (reassignments' --throttle): the rates are dynamic broker
        # configs, read at each check (broker.logs.classic.replication_quota).
        self.leader_quota = ReplicationQuota(lambda: self._throttle_rate(LEADER_RATE))
        self.follower_quota = ReplicationQuota(lambda: self._throttle_rate(FOLLOWER_RATE))
        # How followers reach their leaders (the inter-broker listener's TLS/SASL).
        self.security: InterBrokerSecurity = PLAINTEXT
        self.security_error: str | None = None
        # Tiered storage (KIP-405): copies, remote retention, remote reads.
        self.tiering = tiering(self)

    # ---------------------------------------------------------------- queries

    def _throttle_rate(self, key: str) -> int:
        controller = self.broker.controller
        if controller is None:
            return UNTHROTTLED
        return dynamic_value(controller.image, self.me, key)[0]

    def throttles(self, p: ClassicPartition, replica: int, as_leader: bool) -> bool:
        """Whether replication of ``p`` to ``replica`` (a follower of it; this broker is
        the leader when ``as_leader``, else ``replica`` is this broker) is throttled: the
        replica is out of the ISR and the topic's throttled-replicas list names ``p`` on
        this broker."""
        if replica in p.isr:
            return False
        topic = self.broker.topics.get_by_id(p.topic_id)
        if topic is None:
            return False
        key = LEADER_REPLICAS if as_leader else FOLLOWER_REPLICAS
        return throttled(topic.configs.get(key), p.index, self.me)

    def is_classic(self, topic_id: UUID) -> bool:
        """Whether the topic is one this manager hosts as classic (its last reconcile):
        the router's answer for a topic's kind on a broker without a metadata image. With
        one, the router reads the kind from the image itself (``read_topic``)."""
        return topic_id in self._classic

    def get(self, topic_id: UUID, partition: int) -> ClassicPartition | None:
        return self.partitions.get((topic_id, partition))

    def leader_partition(
        self, topic_id: UUID, partition: int
    ) -> tuple[ClassicPartition | None, int]:
        """(the partition, 0) when this broker leads it, else (None, Kafka error)."""
        p = self.partitions.get((topic_id, partition))
        if p is None or p.role != LEADER or self.stopping:
            return None, int(ErrorCode.not_leader_or_follower)
        return p, 0

    def max_fetcher_lag(self) -> int:
        """The largest lag of a partition this broker follows (Kafka's MaxLag)."""
        return max(
            (p.fetcher_lag for p in list(self.partitions.values()) if p.role == FOLLOWER),
            default=0,
        )

    def follower_lags(self) -> list[FollowerLag]:
        """The replication lag of each follower of the partitions this broker leads."""
        now = now_ms()
        out = []
        for p in list(self.partitions.values()):
            state = p.leader_state
            if p.role != LEADER or state is None:
                continue
            for follower, (messages, seconds) in state.lag(p.log.log_end_offset, now).items():
                out.append(FollowerLag(p.topic, p.index, follower, messages, seconds))
        return out

    def image(self) -> MetadataImage:
        assert self.broker.controller is not None
        return self.broker.controller.image

    # ---------------------------------------------------------------- lifecycle

    async def start(self) -> None:
        try:
            self.security = inter_broker_security(self.broker.config, self.broker.listener_plan)
        except ValueError as exc:
            # Not fatal (a broker without classic topics needs none of this), but no
            # follower here can replicate until it is fixed.
            self.security_error = str(exc)
            log.warning("classic topics: followers cannot fetch from their leaders: %s", exc)
        await self.tiering.start()
        self.reconcile()
        # Before the listeners open: a fetch below a restarted replica's local log must find
        # the tiered part, not answer OFFSET_OUT_OF_RANGE (a consumer would reset).
        await self.tiering.refresh_all()
        self._tasks.append(asyncio.create_task(self._isr_loop()))
        self._tasks.append(asyncio.create_task(self._retention_loop()))
        self._tasks.append(asyncio.create_task(self._flush_loop()))
        if self.broker.config.log_cleaner_enable:
            self._tasks.append(asyncio.create_task(self._cleaner_loop()))

    def stop_serving(self) -> None:
        """Shutdown begins: produces waiting for acks=all are answered now (retriable
        NOT_LEADER_OR_FOLLOWER: the producer retries on the next leader) instead of holding
        the server's drain; no follower fetches any more, and fetches of other brokers'
        followers are refused at once so their connections go idle and can be closed."""
        self.stopping = True
        for fetcher in self._fetchers.values():
            fetcher.stop()
        for p in self.partitions.values():
            p.fail_waiters(ErrorCode.not_leader_or_follower)

    async def stop(self) -> None:
        self.stopping = True
        await cancel_and_wait(self._tasks)
        await self.tiering.stop()
        await cancel_and_wait([f.task for f in self._fetchers.values() if f.task is not None])
        for fetcher in self._fetchers.values():
            fetcher.close()
        self._fetchers.clear()
        for p in self.partitions.values():
            p.close()
        self.partitions.clear()

    # ---------------------------------------------------------------- the image

    def log_config(self, topic: Topic) -> LogConfig:
        ic = self.broker.topics.int_config
        configs = self.broker.topics.config(topic)
        policy = {p.strip() for p in configs.get("cleanup.policy", "delete").split(",")}
        try:
            ratio = float(configs.get("min.cleanable.dirty.ratio", "0.5"))
        except ValueError:
            ratio = 0.5
        retention_ms, retention_bytes = ic(topic, "retention.ms"), ic(topic, "retention.bytes")
        local_ms = ic(topic, "local.retention.ms")
        local_bytes = ic(topic, "local.retention.bytes")
        compact = "compact" in policy
        max_lag = ic(topic, "max.compaction.lag.ms")
        return LogConfig(
            cleanup_delete="delete" in policy,
            cleanup_compact=compact,
            min_cleanable_dirty_ratio=ratio,
            delete_retention_ms=ic(topic, "delete.retention.ms"),
            min_compaction_lag_ms=ic(topic, "min.compaction.lag.ms"),
            max_compaction_lag_ms=max_lag,
            min_insync_replicas=ic(topic, "min.insync.replicas"),
            segment_bytes=ic(topic, "segment.bytes"),
            segment_ms=ic(topic, "segment.ms"),
            index_interval_bytes=ic(topic, "index.interval.bytes"),
            flush_messages=ic(topic, "flush.messages"),
            flush_ms=ic(topic, "flush.ms"),
            retention_ms=retention_ms,
            retention_bytes=retention_bytes,
            remote_storage=(
                self.broker.config.remote_log_storage_system_enable
                and configs.get("remote.storage.enable", "false").strip().lower() == "true"
            ),
            # -2: the same as the whole log's (Kafka's meaning).
            local_retention_ms=retention_ms if local_ms == -2 else local_ms,
            local_retention_bytes=retention_bytes if local_bytes == -2 else local_bytes,
        )

    def reconcile(self) -> None:
        """Bring the hosted replicas and their roles in line with the image."""
        if self.broker.controller is None or self.stopping:
            # Shutting down: the image may still change (this broker leaving), but no log is
            # opened, moved or deleted any more.
            return
        image = self.image()
        classic = {tid for tid, t in image.topics.items() if not t.diskless}
        self._classic = classic
        wanted: set[tuple[UUID, int]] = set()
        changed: list[ClassicPartition] = []
        # Topics migrated to diskless keep their sealed classic logs (offsets below the
        # boundary) on their replicas; partitions sealed for classic start theirs
        # (broker/logs/migration).
        hosted = self.broker.router.hosted_classic(image, classic)
        sealer = self.broker.migration_sealer
        for tid in hosted:
            t = image.topics[tid]
            topic = self.broker.topics.get_by_id(tid) or Topic(
                t.name, tid, len(t.partitions), dict(t.configs)
            )
            config = self.log_config(topic)
            if t.diskless and config.remote_storage:
                # The sealed classic log of a topic migrated to diskless takes nothing more:
                # once a segment is tiered its local copy goes (the remote one serves).
                config = replace(config, local_retention_bytes=0)
            for index, state in t.partitions.items():
                if self.me not in state.replicas:
                    continue
                key = (tid, index)
                wanted.add(key)
                p = self.partitions.get(key)
                if p is None:
                    try:
                        p = self._open(tid, t.name, index, config)
                    except Exception:
                        log.exception("opening the log of %s-%d failed", t.name, index)
                        continue
                    self.partitions[key] = p
                elif p.log.config != config:
                    p.log.config = config
                if sealer is not None:
                    sealer.on_replica(p, t)  # before a leadership: the log's end matters
                p.apply(state, changed.append)
        for key in [k for k in self.partitions if k not in wanted]:
            p = self.partitions.pop(key)
            log.info("%s-%d: replica removed from this broker, deleting its log", p.topic, p.index)
            p.close()
            shutil.rmtree(p.log.dir, ignore_errors=True)
            if key[0] not in image.topics and key[0] in self.tiering.tiered_topics:
                # A deleted tiered topic: its remote segments go too.
                self._spawn(self._forget_remote(p))
        self._update_fetchers(image)
        for p in changed:
            self.broker.watch.wake([(p.topic_id, p.index)])
        if changed:
            self.tiering.wake()  # a new leader reconciles its lineage, copies what is missing

    def _open(self, topic_id: UUID, name: str, index: int, config: LogConfig) -> ClassicPartition:
        directory = os.path.join(self.broker.config.data_dir, f"{name}-{index}")
        marker = os.path.join(directory, TOPIC_ID_FILE)
        if os.path.exists(marker):
            owner = _owner(marker)
            if owner is not None and owner != str(topic_id):
                # A topic of the same name deleted while this broker was down.
                log.info("%s: left by an older topic %s, deleting it", directory, owner)
                shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory, exist_ok=True)
        if not os.path.exists(marker):
            with open(marker, "w") as f:
                f.write(f"version: 0\ntopic_id: {topic_id}\n")
        plog = Log(directory, config)
        return ClassicPartition(
            topic_id, name, index, plog, self.me, self.broker.config.replica_lag_time_max_ms
        )

    def _update_fetchers(self, image: MetadataImage) -> None:
        by_leader: dict[int, list[ClassicPartition]] = {}
        for p in self.partitions.values():
            if p.role != LEADER and p.leader >= 0 and p.leader != self.me:
                by_leader.setdefault(p.leader, []).append(p)
        if self.security_error is not None:
            by_leader.clear()  # logged at start: fetching would only fail at every backoff
        for leader_id, parts in by_leader.items():
            broker = image.brokers.get(leader_id)
            fetcher = self._fetchers.get(leader_id)
            if broker is None:
                continue
            if fetcher is None or (fetcher.host, fetcher.port) != (broker.host, broker.port):
                if fetcher is not None:
                    fetcher.stop()
                fetcher = ReplicaFetcher(self, leader_id, broker.host, broker.port, self.security)
                self._fetchers[leader_id] = fetcher
                fetcher.start()
            fetcher.set_partitions(parts)
        for leader_id in [i for i in self._fetchers if i not in by_leader]:
            self._fetchers.pop(leader_id).stop()

    # ---------------------------------------------------------------- ISR changes

    def check_isr(self, p: ClassicPartition) -> None:
        """Ask the controller for an ISR change if the leader's view calls for one."""
        ls = p.leader_state
        now = time.time() * 1000
        if p.topic_id not in self._classic and not self._classic_isr(p):
            return  # a sealed log of a migrated (now diskless) topic: its ISR is diskless's
        if ls is None or p.isr_change_pending or p.role != LEADER or now < p.isr_retry_at:
            return
        isr = set(p.isr)
        added = ls.to_add()
        if added and self.broker.controller is not None:
            # KIP-841: only a registered, unfenced broker may join (the controller refuses
            # the others, INELIGIBLE_REPLICA). A dead follower's last fetch still reaches a
            # high watermark that does not move (a sealed log): not asked again and again.
            alive = self.image().alive_brokers()
            added = {r for r in added if r in alive}
        new = (isr - ls.to_remove(now)) | added
        if new == isr:
            return
        p.isr_change_pending = True
        ordered = tuple(r for r in p.replicas if r in new)
        change = IsrChange(p.topic_id, p.index, p.leader_epoch, p.partition_epoch, ordered)
        task = asyncio.create_task(self._alter_isr(p, change))
        self._tasks.append(task)
        task.add_done_callback(lambda t: t in self._tasks and self._tasks.remove(t))

    def _classic_isr(self, p: ClassicPartition) -> bool:
        """The sealed classic log of a migrated topic that still has records, or whose
        replicas are moving: replicas join the ISR once they have fetched all of it
        (``election.keeps_classic_isr``)."""
        if self.broker.controller is None:
            return False
        topic = self.image().topics.get(p.topic_id)
        state = None if topic is None else topic.partitions.get(p.index)
        return topic is not None and state is not None and keeps_classic_isr(topic, p.index, state)

    async def _alter_isr(self, p: ClassicPartition, change: IsrChange) -> None:
        controller = self.broker.controller
        epoch = self.broker.broker_epoch
        try:
            assert controller is not None
            result, applied = await controller.client.alter_partition(self.me, epoch, [change])
            if result.error_code != ErrorCode.none:
                log.warning("AlterPartition refused: %s", result.error_code.name)
            for r in result.partitions:
                if r.error_code != ErrorCode.none:
                    # Refused (e.g. the follower is still fenced): not again at every fetch.
                    p.isr_retry_at = time.time() * 1000 + ISR_RETRY_MS
                    log.info(
                        "%s-%d: ISR change to %s refused: %s %s",
                        p.topic,
                        p.index,
                        list(change.new_isr),
                        r.error_code.name,
                        r.error_message or "",
                    )
                else:
                    log.info("%s-%d: ISR now %s", p.topic, p.index, list(r.isr))
            # The image brings the new ISR; until it has, this leader keeps the old one.
            await controller.follower.wait_for(applied, 5.0)
        except Exception as exc:
            log.warning("%s-%d: AlterPartition failed: %r", p.topic, p.index, exc)
            p.isr_retry_at = time.time() * 1000 + ISR_RETRY_MS
        finally:
            p.isr_change_pending = False
            self.reconcile_soon()

    def _spawn(self, coro: Any) -> None:
        task = asyncio.create_task(coro)
        self._tasks.append(task)
        task.add_done_callback(lambda t: t in self._tasks and self._tasks.remove(t))

    async def _forget_remote(self, p: ClassicPartition) -> None:
        try:
            deleted = await self.tiering.forget_partition(p.topic_id, p.index)
            log.info("%s-%d: deleted %d remote segments", p.topic, p.index, deleted)
        except Exception as exc:
            log.warning("%s-%d: deleting remote segments failed: %r", p.topic, p.index, exc)

    def reconcile_soon(self) -> None:
        with contextlib.suppress(Exception):
            self.reconcile()

    async def _isr_loop(self) -> None:
        # Kafka checks for lagging followers every replica.lag.time.max.ms / 2.
        interval = max(self.broker.config.replica_lag_time_max_ms / 2000, 0.05)
        while True:
            await asyncio.sleep(interval)
            for p in list(self.partitions.values()):
                try:
                    self.check_isr(p)
                except Exception:
                    log.exception("ISR check of %s-%d failed", p.topic, p.index)

    # ---------------------------------------------------------------- retention

    def enforce_retention(self) -> int:
        deleted = 0
        for p in list(self.partitions.values()):
            deleted += p.log.enforce_retention(p.remote.end + 1)
            p.txns.drop_before(p.log_start_offset)
            if p.role == LEADER and p.high_watermark < p.log.log_start_offset:
                p.high_watermark = p.log.log_start_offset
        return deleted

    async def _retention_loop(self) -> None:
        interval = self.broker.config.log_retention_check_interval_ms / 1000
        while True:
            await asyncio.sleep(interval)
            try:
                self.enforce_retention()
            except Exception:
                log.exception("retention of classic logs failed")

    # ---------------------------------------------------------------- compaction

    async def clean(self, p: ClassicPartition) -> int:
        """One cleaning of a compacted partition's log (any role: each replica cleans its
        own, as in Kafka); returns the segments rewritten."""
        config = p.log.config
        if not config.cleanup_compact:
            return 0
        plan = cleaner.plan(
            p.log.segments,
            p.log.dir,
            config.index_interval_bytes,
            p.last_stable_offset,
            int(time.time() * 1000),
            cleaner.CleanerConfig(
                config.min_cleanable_dirty_ratio,
                config.delete_retention_ms,
                config.min_compaction_lag_ms,
                config.max_compaction_lag_ms,
            ),
            list(p.txns.aborted),
            p.producers.last_batch_offsets(),
        )
        if plan is None:
            return 0
        # Record-level work: in a thread, never on the event loop.
        built = await asyncio.to_thread(cleaner.build, plan)
        if self.partitions.get((p.topic_id, p.index)) is not p or self.stopping:
            return 0  # closed (deleted, moved away) while it was cleaned
        swapped = cleaner.swap(built, p.log.segments, p.log.log_end_offset)
        if swapped:
            log.info(
                "%s-%d: cleaned %d segments below offset %d (%d records removed)",
                p.topic,
                p.index,
                swapped,
                plan.end,
                built.records_removed,
            )
        return swapped

    async def _cleaner_loop(self) -> None:
        interval = max(self.broker.config.log_cleaner_backoff_ms / 1000, 0.05)
        while True:
            await asyncio.sleep(interval)
            for p in list(self.partitions.values()):
                try:
                    await self.clean(p)
                except Exception:
                    log.exception("cleaning %s-%d failed", p.topic, p.index)

    def flush_due(self, now: float) -> int:
        """fsync logs whose ``flush.ms`` passed with records unflushed; returns how many."""
        flushed = 0
        for p in list(self.partitions.values()):
            plog = p.log
            if plog.config.flush_ms >= NO_LIMIT or not plog.unflushed:
                continue
            if (now - plog.last_flush) * 1000 >= plog.config.flush_ms:
                plog.flush()
                flushed += 1
        return flushed

    async def _flush_loop(self) -> None:
        # flush.ms holds without new appends too (Kafka's log.flush.scheduler.interval.ms);
        # off by default, so this usually finds nothing to do. High watermarks are
        # checkpointed here too (only those that moved).
        while True:
            await asyncio.sleep(FLUSH_CHECK_S)
            try:
                self.flush_due(time.time())
                for p in list(self.partitions.values()):
                    p.checkpoint_high_watermark()
            except Exception:
                log.exception("flushing classic logs failed")


def _owner(marker: str) -> str | None:
    """The topic id a ``partition.metadata`` file names (None if unreadable: then the
    directory is kept, never deleted on a guess)."""
    try:
        with open(marker) as f:
            for line in f:
                key, sep, value = line.partition(":")
                if sep and key.strip() == "topic_id":
                    return value.strip()
    except OSError:
        return None
    return None
