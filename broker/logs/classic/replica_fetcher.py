"""A follower's replication from one leader broker, with Kafka's own requests.

One task per leader broker, for every partition this broker follows there:

1. a partition that just became a follower (new leader or epoch) first asks the leader
   OffsetForLeaderEpoch for its latest epoch and cuts its log where the two histories part
   (KIP-101/279, ``storage.classic.epoch_cache``); a divergent tail disappears;
2. then Fetch with ``replica_id`` (v12) from its log end with ``current_leader_epoch``:
   the leader records the progress (and moves the high watermark), the answer's batches are
   appended as they are (``append_as_follower``), its high watermark kept.

Errors back off ``replica.fetch.backoff.ms``; a fenced or unknown epoch waits for the
metadata image, which brings the new leader (and a new fetcher if it is another broker).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Protocol

from kio.schema.errors import ErrorCode
from kio.schema.fetch.v12 import request as fetch_req
from kio.schema.list_offsets.v8 import request as offsets_req
from kio.schema.offset_for_leader_epoch.v4 import request as epoch_req
from kio.schema.types import BrokerId, TopicName
from kio.static.primitive import i8, i32, i64

from broker.logs.classic.kafka_client import AuthenticationFailed, ConnectionLost, KafkaConnection
from broker.logs.classic.partition import FOLLOWER, LATEST_TIERED_TIMESTAMP, ClassicPartition
from broker.security.inter_broker import PLAINTEXT, InterBrokerSecurity
from broker.server.metrics import METRICS
from storage.classic.epoch_cache import UNDEFINED_EPOCH
from storage.classic.log import NotContiguous
from storage.tiered.lineage import History, follower_start, history_floor

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.logs.classic.replication_quota import ReplicationQuota
    from broker.logs.classic.tiered_part import Tiering
    from broker.logs.fetch_slots import CommitWatch

log = logging.getLogger(__name__)


class _Broker(Protocol):
    @property
    def config(self) -> BrokerConfig: ...

    @property
    def watch(self) -> CommitWatch: ...  # woken as a follower's high watermark moves


class FetcherOwner(Protocol):
    """The replica manager (``ReplicaManager``), as its fetchers use it."""

    @property
    def me(self) -> int: ...  # this broker's id, the fetches' replica id

    @property
    def broker(self) -> _Broker: ...

    @property
    def tiering(self) -> Tiering: ...  # a follower starting above the tiered part

    @property
    def follower_quota(self) -> ReplicationQuota: ...  # follower.replication.throttled.rate

    def throttles(self, p: ClassicPartition, replica: int, as_leader: bool) -> bool:
        """Whether the partition's replication to or from ``replica`` is throttled."""


class ReplicaFetcher:
    def __init__(
        self,
        manager: FetcherOwner,
        leader_id: int,
        host: str,
        port: int,
        security: InterBrokerSecurity = PLAINTEXT,
    ) -> None:
        self.manager = manager
        self.leader_id = leader_id
        self.host, self.port = host, port
        self.config = manager.broker.config
        self._conn = KafkaConnection(host, port, f"sluice-replica-fetcher-{manager.me}", security)
        self._partitions: list[ClassicPartition] = []
        # Where the next Fetch starts in the partition list: the leader fills the answer
        # in request order up to replica.fetch.response.max.bytes, so a fixed order would
        # let the first partitions' backlog starve the others (Kafka rotates them too).
        self._rotation = 0
        self._changed = asyncio.Event()
        self.task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.task = asyncio.create_task(self._run())

    def stop(self) -> None:
        if self.task is not None:
            self.task.cancel()
        self.close()

    def close(self) -> None:
        self._conn.close()

    def set_partitions(self, partitions: list[ClassicPartition]) -> None:
        self._partitions = partitions
        self._changed.set()

    async def _run(self) -> None:
        backoff = self.config.replica_fetch_backoff_ms / 1000
        while True:
            try:
                parts = [
                    p for p in self._partitions if p.leader == self.leader_id and p.role == FOLLOWER
                ]
                if not parts:
                    self._changed.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._changed.wait(), 1.0)
                    continue
                truncating = [p for p in parts if p.needs_truncation]
                if truncating:
                    await self._truncate(truncating)
                    await self._start_after_tiered(
                        [p for p in truncating if not p.needs_truncation], moved=False
                    )
                ready = [p for p in parts if not p.needs_truncation]
                if ready:
                    if not await self._fetch(ready):
                        await asyncio.sleep(backoff)
                elif truncating:
                    # The leader refused (its metadata or ours lags): not in a tight loop.
                    await asyncio.sleep(backoff)
            except asyncio.CancelledError:
                raise
            except AuthenticationFailed as exc:
                # A credential or certificate problem: it will not fix itself quickly.
                log.warning("replica fetcher to broker %d: %s", self.leader_id, exc)
                await asyncio.sleep(max(backoff, 1.0))
            except ConnectionLost as exc:
                log.info("replica fetcher to broker %d: %s", self.leader_id, exc)
                await asyncio.sleep(backoff)
            except Exception:
                log.exception("replica fetcher to broker %d failed", self.leader_id)
                await asyncio.sleep(backoff)

    # ---------------------------------------------------------------- truncation

    async def _ask_epochs(
        self, asks: list[tuple[ClassicPartition, int]]
    ) -> dict[tuple[str, int], tuple[int, int, int]]:
        """OffsetForLeaderEpoch for (partition, epoch) pairs: (error, epoch, end offset)."""
        by_topic: dict[str, list[epoch_req.OffsetForLeaderPartition]] = {}
        for p, epoch in asks:
            by_topic.setdefault(p.topic, []).append(
                epoch_req.OffsetForLeaderPartition(
                    partition=i32(p.index),
                    current_leader_epoch=i32(p.leader_epoch),
                    leader_epoch=i32(epoch),
                )
            )
        request = epoch_req.OffsetForLeaderEpochRequest(
            replica_id=BrokerId(self.manager.me),
            topics=tuple(
                epoch_req.OffsetForLeaderTopic(topic=TopicName(t), partitions=tuple(ps))
                for t, ps in by_topic.items()
            ),
        )
        response = await self._conn.request(request, 30.0)
        return {
            (t.topic, int(r.partition)): (int(r.error_code), int(r.leader_epoch), int(r.end_offset))
            for t in response.topics
            for r in t.partitions
        }

    async def _truncate(self, parts: list[ClassicPartition]) -> None:
        """KIP-279: walk back through the epochs until both logs agree; cut there."""
        pending = {id(p): (p, p.log.epochs.latest_epoch) for p in parts}
        for _round in range(64):
            asks = [(p, e) for p, e in pending.values()]
            for p, epoch in list(asks):
                if epoch == UNDEFINED_EPOCH:
                    # No epochs here: only the high watermark is known to be shared.
                    p.truncate(min(p.high_watermark, p.log.log_end_offset))
                    del pending[id(p)]
            asks = [(p, e) for p, e in pending.values()]
            if not asks:
                return
            answers = await self._ask_epochs(asks)
            for p, epoch in asks:
                if p.role != FOLLOWER or p.leader != self.leader_id:
                    del pending[id(p)]  # the image moved on while the request was out
                    continue
                error, leader_epoch, leader_end = answers.get(
                    (p.topic, p.index), (int(ErrorCode.unknown_server_error), -1, -1)
                )
                if error:
                    # Stale metadata on one side: retried once the image moves on.
                    del pending[id(p)]
                    continue
                end = p.log.log_end_offset
                if leader_epoch == UNDEFINED_EPOCH:
                    p.truncate(min(p.high_watermark, end))
                    del pending[id(p)]
                    continue
                mine, my_end = p.log.epochs.end_offset_for(leader_epoch, end)
                if mine == leader_epoch:
                    p.truncate(min(leader_end, my_end, end))
                    del pending[id(p)]
                elif mine == UNDEFINED_EPOCH or mine >= epoch:
                    p.truncate(min(leader_end, end))
                    del pending[id(p)]
                else:
                    pending[id(p)] = (p, mine)
            if not pending:
                return

    # ---------------------------------------------------------------- fetch

    async def _fetch(self, parts: list[ClassicPartition]) -> bool:
        """One Fetch round; False when it should back off."""
        by_topic: dict[str, list[fetch_req.FetchPartition]] = {}
        index = {}
        if parts:
            start = self._rotation % len(parts)
            self._rotation += 1
            parts = parts[start:] + parts[:start]
        quota = self.manager.follower_quota
        throttled_now = {
            id(p) for p in parts if self.manager.throttles(p, self.manager.me, as_leader=False)
        }
        if throttled_now and quota.exceeded():
            # Over follower.replication.throttled.rate: the throttled partitions sit out
            # this round (Kafka's follower throttle); the others are fetched as usual.
            parts = [p for p in parts if id(p) not in throttled_now]
            if not parts:
                await asyncio.sleep(0.1)
                return True
        # What each partition asked from: an answer is applied only to the log it was asked
        # for (Kafka's fetcher checks the fetch offset and epoch again on the answer). A
        # truncation meanwhile (a new leader epoch, a log that diverged) makes it stale:
        # appended, its batches would leave a gap where the truncated ones were.
        asked: dict[int, tuple[int, int]] = {}
        for p in parts:
            index[(p.topic, p.index)] = p
            asked[id(p)] = (p.log.log_end_offset, p.leader_epoch)
            by_topic.setdefault(p.topic, []).append(
                fetch_req.FetchPartition(
                    partition=i32(p.index),
                    current_leader_epoch=i32(p.leader_epoch),
                    fetch_offset=i64(p.log.log_end_offset),
                    log_start_offset=i64(p.log.log_start_offset),
                    partition_max_bytes=i32(self.config.replica_fetch_max_bytes),
                )
            )
        wait_ms = self.config.replica_fetch_wait_max_ms
        request = fetch_req.FetchRequest(
            replica_id=BrokerId(self.manager.me),
            max_wait=datetime.timedelta(milliseconds=wait_ms),
            min_bytes=i32(1),
            max_bytes=i32(self.config.replica_fetch_response_max_bytes),
            isolation_level=i8(0),
            topics=tuple(
                fetch_req.FetchTopic(topic=TopicName(t), partitions=tuple(ps))
                for t, ps in by_topic.items()
            ),
            forgotten_topics_data=(),
        )
        response = await self._conn.request(request, wait_ms / 1000 + 30.0)
        ok = True
        moved: list[ClassicPartition] = []
        for t in response.responses:
            for r in t.partitions:
                p = index.get((t.topic, int(r.partition_index)))
                if (
                    p is None
                    or p.leader != self.leader_id
                    or p.role != FOLLOWER
                    or p.needs_truncation
                    or asked.get(id(p)) != (p.log.log_end_offset, p.leader_epoch)
                ):
                    continue  # the image or the log moved on while the fetch was in flight
                error = int(r.error_code)
                if error == 0:
                    try:
                        appended = p.append_fetched(
                            r.records or b"", int(r.high_watermark), int(r.log_start_offset)
                        )
                        METRICS.topics.replicated_in(appended)
                        # Kafka's FetcherLagMetrics: the leader's HW minus our log end.
                        p.fetcher_lag = max(0, int(r.high_watermark) - p.log.log_end_offset)
                        if id(p) in throttled_now:
                            quota.record(appended)
                    except NotContiguous as exc:
                        log.warning("%s-%d: %s; truncating again", p.topic, p.index, exc)
                        p.needs_truncation = True
                    self.manager.broker.watch.notify([(p.topic_id, p.index, p.high_watermark)])
                elif error == ErrorCode.offset_out_of_range:
                    start = int(r.log_start_offset)
                    if start > p.log.log_end_offset:
                        # Behind the leader's log start (retention, DeleteRecords).
                        p.log.truncate_fully_and_start_at(start)
                        p.producers.truncate_from(start)
                    else:
                        p.needs_truncation = True
                elif error == ErrorCode.offset_moved_to_tiered_storage:
                    moved.append(p)
                else:
                    ok = False
        if moved and not await self._start_after_tiered(moved, moved=True):
            ok = False  # not resolved (the remote metadata lags?): not in a tight loop
        return ok

    async def _start_after_tiered(self, parts: list[ClassicPartition], moved: bool) -> bool:
        """Seeds/002: these followers start after the tiered part of the leader's lineage
        instead of replicating it again (``Tiering.start_follower``). ``moved``: the
        leader answered OFFSET_MOVED_TO_TIERED_STORAGE; otherwise they just truncated, and
        only those whose log end the leader's last tiered offset reaches are looked at.
        False when a partition could not be started there."""
        tiering = self.manager.tiering
        parts = [p for p in parts if tiering.tiers(p)]
        if not parts:
            return True
        if not moved:
            ends = await self._tiered_ends(parts)
            parts = [p for p in parts if ends.get((p.topic, p.index), -1) >= p.log.log_end_offset]
            if not parts:
                return True
        wants = []
        for p in parts:
            log_start = await tiering.metadata.log_start(p.topic_id, p.index)
            segments = await tiering.metadata.list_segments(p.topic_id, p.index)
            floor = history_floor(segments, log_start)
            if floor is not None:
                wants.append((p, floor, segments, log_start))
        histories = await leader_histories(self._ask_epochs, [(p, f) for p, f, _, _ in wants])
        started = 0
        for (p, _floor, segments, log_start), history in zip(wants, histories, strict=True):
            if history is None or p.role != FOLLOWER or p.leader != self.leader_id:
                continue
            start = follower_start(history, segments, log_start)
            if await tiering.start_follower(p, start):
                # Its view of the tiered part now, not at the next tiering run: the whole
                # log's start, and what local retention may delete, come from it.
                await tiering.refresh(p)
                started += 1
            elif not moved:
                started += 1
        return started == len(parts)

    async def _tiered_ends(self, parts: list[ClassicPartition]) -> dict[tuple[str, int], int]:
        """The leader's last tiered offset of each partition (ListOffsets LATEST_TIERED,
        KIP-1005: the end of its lineage's tiered part, -1 when nothing is)."""
        by_topic: dict[str, list[offsets_req.ListOffsetsPartition]] = {}
        for p in parts:
            by_topic.setdefault(p.topic, []).append(
                offsets_req.ListOffsetsPartition(
                    partition_index=i32(p.index),
                    current_leader_epoch=i32(p.leader_epoch),
                    timestamp=i64(LATEST_TIERED_TIMESTAMP),
                )
            )
        request = offsets_req.ListOffsetsRequest(
            replica_id=BrokerId(self.manager.me),
            isolation_level=i8(0),
            topics=tuple(
                offsets_req.ListOffsetsTopic(name=TopicName(t), partitions=tuple(ps))
                for t, ps in by_topic.items()
            ),
        )
        response = await self._conn.request(request, 30.0)
        return {
            (t.name, int(r.partition_index)): int(r.offset)
            for t in response.topics
            for r in t.partitions
            if int(r.error_code) == 0
        }


# OffsetForLeaderEpoch for (partition, epoch) pairs, one per partition: (error, epoch,
# end offset) by (topic, partition) (the replica fetcher's ``_ask_epochs``).
AskEpochs = Callable[
    [list[tuple[ClassicPartition, int]]], Awaitable[dict[tuple[str, int], tuple[int, int, int]]]
]
# A leader has at most one epoch cache entry per epoch: the walk below ends well before.
MAX_ROUNDS = 100_000


async def leader_histories(
    ask: AskEpochs, wants: Sequence[tuple[ClassicPartition, int]]
) -> list[History | None]:
    """The leader's epoch history of each partition from epoch ``floor`` on (``wants``:
    (partition, floor) pairs), asked of the leader one epoch per round, all partitions in
    each round; None where the leader would not say (stale epochs on either side).

    OffsetForLeaderEpoch(e) answers the leader's largest epoch <= e and where it ended (the
    next epoch's start, or the log end for its latest): asking the current epoch gives the
    log end, asking one below an epoch gives that epoch's start and the epoch before it.
    Asked below its oldest epoch, a leader answers the asked epoch with its oldest epoch's
    start (Kafka's rule): an epoch that would start where the last one found starts is not
    in the history, and the walk ends there."""
    out: list[History | None] = [None] * len(wants)
    log_end: dict[int, int] = {}
    found: dict[int, list[tuple[int, int]]] = {}  # newest first
    asking: dict[int, int] = {}  # index in wants -> epoch asked next
    first = await ask([(p, p.leader_epoch) for p, _floor in wants])
    for i, (p, _floor) in enumerate(wants):
        error, epoch, end = first.get((p.topic, p.index), (-1, UNDEFINED_EPOCH, -1))
        if error or epoch == UNDEFINED_EPOCH:
            continue
        log_end[i], found[i] = end, []
        asking[i] = epoch
    for _round in range(MAX_ROUNDS):
        done = [i for i, epoch in asking.items() if epoch <= 0]
        for i in done:
            # Epoch 0 is the oldest there is, and may not be in the history at all (asked,
            # the leader answers alike): recorded from 0 unless the last epoch found starts
            # at 0. As the first entry, only its end is checked, which is right either way.
            del asking[i]
            if not found[i] or found[i][-1][1] > 0:
                found[i].append((0, 0))
        if not asking:
            break
        order = list(asking)
        answers = await ask([(wants[i][0], asking[i] - 1) for i in order])
        for i in order:
            p, floor = wants[i]
            error, before, start = answers.get((p.topic, p.index), (-1, UNDEFINED_EPOCH, -1))
            if error or before == UNDEFINED_EPOCH:
                del asking[i], found[i]
                continue
            entries = found[i]
            if entries and start >= entries[-1][1]:
                del asking[i]  # below the leader's oldest epoch: the walk is over
                continue
            entries.append((asking[i], start))
            if asking[i] < floor:
                # An epoch older than any in the remote segments, as the first entry: the
                # ones from the floor on are all checked (the first is not, see lineage).
                del asking[i]
            else:
                asking[i] = before
    for i, entries in found.items():
        if entries and i not in asking:
            out[i] = History(tuple(reversed(entries)), log_end[i])
    return out
