"""Transaction markers on classic partitions, both ends of Kafka's WriteTxnMarkers (key 27).

- The leader's side (``write_txn_markers``, the API): append the COMMIT/ABORT control batch
  of a producer to each partition it leads, answered once replicated (as Kafka appends
  markers with acks=all). Followers copy it like any batch and update their transaction
  index from it.
- The transaction coordinator's side (``ClassicMarkerSender``): after the outcome is decided
  in the coordinator database, the markers of the transaction's classic partitions go to
  their leaders (this broker's own partitions directly, others' over the inter-broker
  listener, with its TLS/SASL); a partition whose leader moved is sent again to the new one.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode
from kio.schema.types import ProducerId, TopicName
from kio.schema.write_txn_markers.v1 import request as markers_req
from kio.static.primitive import i16, i32

from broker.logs.classic.kafka_client import ConnectionLost, KafkaConnection
from broker.logs.partition_log import PartitionResult
from storage.partition_key import PartitionKey

if TYPE_CHECKING:
    from broker.logs.classic.replica_manager import ReplicaManager
    from broker.metadata.controller_catalog import ControllerCatalog

log = logging.getLogger(__name__)

# How long EndTxn waits for the classic markers before answering (the rest are sent in the
# background); a marker is retried this often while its partition has no reachable leader.
MARKER_DEADLINE_S = 30.0
RETRY_S = 0.1
# Errors after which a marker is sent again (to the new leader, once the image has it).
_RETRIABLE = {
    int(ErrorCode.not_leader_or_follower),
    int(ErrorCode.not_enough_replicas),
    int(ErrorCode.not_enough_replicas_after_append),
    int(ErrorCode.request_timed_out),
    int(ErrorCode.kafka_storage_error),
    int(ErrorCode.unknown_server_error),
    int(ErrorCode.coordinator_load_in_progress),
}


async def mark(
    manager: ReplicaManager,
    topic_id: Any,
    partition: int,
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    coordinator_epoch: int,
) -> int:
    """Append one marker on this broker's leader replica; the Kafka error code."""
    p, error = manager.leader_partition(topic_id, partition)
    if p is None:
        return error
    try:
        result = p.append_marker(producer_id, producer_epoch, commit, coordinator_epoch)
    except OSError:
        return int(ErrorCode.kafka_storage_error)
    manager.broker.watch.notify([(p.topic_id, p.index, p.log.log_end_offset)])
    if isinstance(result, PartitionResult):
        return result.error
    return (await result).error


class ClassicMarkerSender:
    def __init__(
        self,
        manager: ReplicaManager,
        controller: ControllerCatalog,
        on_classic_leader: Callable[[Any, int], bool],
    ) -> None:
        """``on_classic_leader(topic_id, partition)``: whether a partition's marker goes to
        its classic leader (the router's rule, handed in by the Broker)."""
        self._manager = manager
        self._controller = controller
        self._on_classic_leader = on_classic_leader
        self._connections: dict[tuple[int, str, int], KafkaConnection] = {}
        self._background: set[asyncio.Task[None]] = set()

    def goes_to_leader(self, key: PartitionKey) -> bool:
        """Whether the partition's marker is sent to its classic leader (else it goes into
        the diskless log with the outcome): the router decides."""
        return self._on_classic_leader(key.topic_id, key.partition)

    async def write(
        self,
        partitions: Sequence[PartitionKey],
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        number: int,
        deadline_s: float | None = None,
        on_written: Callable[[], Awaitable[None]] | None = None,
    ) -> bool:
        """Markers on every partition; False if some were not written by the deadline (they
        are then retried in the background until written or their topic is gone).
        ``number``: the transaction's (its id's completion count), in each marker's
        coordinator epoch so that a leader refuses a late copy of an older one.
        ``on_written`` is awaited once all are written, here or in the background."""
        pending = set(partitions)
        give_up = time.monotonic() + (MARKER_DEADLINE_S if deadline_s is None else deadline_s)
        while pending:
            pending = await self._round(pending, producer_id, producer_epoch, commit, number)
            if not pending:
                break
            if time.monotonic() >= give_up:
                break
            await asyncio.sleep(RETRY_S)
        if not pending:
            if on_written is not None:
                await on_written()
            return True
        log.warning(
            "transaction markers of producer %d not written yet on %d classic partitions; "
            "retrying in the background",
            producer_id,
            len(pending),
        )
        task = asyncio.create_task(
            self._retry_forever(pending, producer_id, producer_epoch, commit, number, on_written)
        )
        self._background.add(task)
        task.add_done_callback(self._background.discard)
        return False

    async def _retry_forever(
        self,
        pending: set[PartitionKey],
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        number: int,
        on_written: Callable[[], Awaitable[None]] | None,
    ) -> None:
        delay = RETRY_S
        while pending:
            await asyncio.sleep(delay)
            delay = min(delay * 2, 5.0)
            try:
                pending = await self._round(pending, producer_id, producer_epoch, commit, number)
            except Exception:
                log.exception("writing transaction markers failed")
        if on_written is not None:
            await on_written()

    async def _round(
        self,
        pending: set[PartitionKey],
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        number: int,
    ) -> set[PartitionKey]:
        """One attempt at every pending partition, by leader; the partitions still pending."""
        manager = self._manager
        image = self._controller.image
        by_leader: dict[int, list[PartitionKey]] = {}
        for key in pending:
            topic = image.topics.get(key.topic_id)
            state = topic.partitions.get(key.partition) if topic is not None else None
            if topic is None or state is None:
                continue  # deleted: nothing left to mark
            by_leader.setdefault(state.leader, []).append(key)
        left: set[PartitionKey] = set()
        calls = []
        for leader, keys in by_leader.items():
            if leader == manager.me:
                calls.append(
                    self._local(manager, keys, producer_id, producer_epoch, commit, number)
                )
            elif leader in image.brokers:
                calls.append(
                    self._remote(leader, keys, producer_id, producer_epoch, commit, number)
                )
            else:
                left.update(keys)  # no leader now
        for still in await asyncio.gather(*calls):
            left.update(still)
        return left

    async def _local(
        self,
        manager: ReplicaManager,
        keys: list[PartitionKey],
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        number: int,
    ) -> list[PartitionKey]:
        errors = await asyncio.gather(
            *(
                mark(manager, k.topic_id, k.partition, producer_id, producer_epoch, commit, number)
                for k in keys
            )
        )
        return [k for k, e in zip(keys, errors, strict=True) if self._again(k, e)]

    async def _remote(
        self,
        leader: int,
        keys: list[PartitionKey],
        producer_id: int,
        producer_epoch: int,
        commit: bool,
        number: int,
    ) -> list[PartitionKey]:
        image = self._controller.image
        endpoint = image.brokers[leader]
        address = (leader, endpoint.host, endpoint.port)
        conn = self._connections.get(address)
        if conn is None:
            for old in [a for a in self._connections if a[0] == leader]:
                self._connections.pop(old).close()
            conn = self._connections[address] = KafkaConnection(
                endpoint.host,
                endpoint.port,
                f"sluice-txn-markers-{self._manager.me}",
                self._manager.security,
            )
        names: dict[str, list[PartitionKey]] = {}
        for k in keys:
            names.setdefault(image.topics[k.topic_id].name, []).append(k)
        request = markers_req.WriteTxnMarkersRequest(
            markers=(
                markers_req.WritableTxnMarker(
                    producer_id=ProducerId(producer_id),
                    producer_epoch=i16(producer_epoch),
                    transaction_result=commit,
                    topics=tuple(
                        markers_req.WritableTxnMarkerTopic(
                            name=TopicName(name),
                            partition_indexes=tuple(i32(k.partition) for k in ks),
                        )
                        for name, ks in names.items()
                    ),
                    coordinator_epoch=i32(number),
                ),
            )
        )
        try:
            response = await conn.request(request, MARKER_DEADLINE_S)
        except ConnectionLost as exc:
            log.info("transaction markers to broker %d: %s", leader, exc)
            return keys
        errors: dict[tuple[str, int], int] = {}
        for result in response.markers:
            for t in result.topics:
                for r in t.partitions:
                    errors[(t.name, int(r.partition_index))] = int(r.error_code)
        unknown = int(ErrorCode.unknown_server_error)
        return [
            k
            for name, ks in names.items()
            for k in ks
            if self._again(k, errors.get((name, k.partition), unknown))
        ]

    def _again(self, key: PartitionKey, error: int) -> bool:
        if error == 0:
            return False
        if error in _RETRIABLE:
            return True
        # A marker refused for good (a fenced epoch: a newer producer wrote its own
        # markers; a newer transaction's marker is there (TRANSACTION_COORDINATOR_FENCED);
        # a deleted topic): retrying would not help.
        log.warning("transaction marker on %s refused: %s", key, ErrorCode(error).name)
        return False

    def close(self) -> None:
        for task in self._background:
            task.cancel()
        for conn in self._connections.values():
            conn.close()
        self._connections.clear()
