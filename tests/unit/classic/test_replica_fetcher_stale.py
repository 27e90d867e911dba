"""A follower's Fetch answer that arrives after its log was truncated, or after the leader
epoch changed, is not appended (Kafka's fetcher checks the fetch offset and epoch again):
appended after a truncation it would leave a gap where the truncated batches were."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from broker.config import BrokerConfig
from broker.logs.classic.partition import FOLLOWER
from broker.logs.classic.replica_fetcher import ReplicaFetcher
from broker.logs.classic.replication_quota import ReplicationQuota
from controller.image import PartitionState
from storage.classic.batches import walk

from .test_partition import partition, records


def at(base: int) -> bytes:
    """A one-record batch at offset ``base`` (its CRC does not cover the base offset)."""
    batch = bytearray(records(1))
    batch[0:8] = base.to_bytes(8, "big")
    return bytes(batch)


def follow(p: Any, epoch: int) -> None:
    p.apply(PartitionState((2, 1, 3), (2, 1, 3), 2, epoch, epoch), lambda _p: None)


class Leader:
    """The leader's side: answers one Fetch with ``data``, after ``meanwhile`` ran (what
    happens to the follower while the request is out)."""

    def __init__(self, data: bytes, meanwhile: Any) -> None:
        self.data, self.meanwhile = data, meanwhile

    async def request(self, request: Any, timeout: float) -> Any:
        (topic,) = request.topics
        (asked,) = topic.partitions
        self.meanwhile()
        answer = SimpleNamespace(
            partition_index=asked.partition,
            error_code=0,
            records=self.data,
            high_watermark=10,
            log_start_offset=0,
        )
        return SimpleNamespace(responses=[SimpleNamespace(topic=topic.topic, partitions=[answer])])

    def close(self) -> None:
        pass


def fetcher(leader: Leader) -> ReplicaFetcher:
    manager = SimpleNamespace(
        me=1,
        broker=SimpleNamespace(
            config=BrokerConfig(), watch=SimpleNamespace(notify=lambda _keys: None)
        ),
        follower_quota=ReplicationQuota(lambda: 0),
        throttles=lambda *_a, **_k: False,
        tiering=None,
    )
    f = ReplicaFetcher(manager, 2, "127.0.0.1", 1)  # type: ignore[arg-type]
    f._conn = leader  # type: ignore[assignment]
    return f


def test_an_answer_to_a_fetch_from_before_a_truncation_is_not_appended(tmp_path: Path) -> None:
    async def run() -> None:
        p = partition(tmp_path, me=1)
        follow(p, 1)
        assert p.role == FOLLOWER
        # The follower holds 0..3; it asks the leader from 4.
        for base in range(4):
            p.append_fetched(at(base), 0, 0)
        assert p.log.log_end_offset == 4
        # While the request is out, the follower truncates to 2 (a new leader epoch's
        # divergence check); the answer (the old leader's batch at 4) arrives after.
        await fetcher(Leader(at(4), lambda: p.truncate(2)))._fetch([p])
        assert p.log.log_end_offset == 2, "the stale answer made a gap at 2..3"
        assert [b.base_offset for b in walk(p.log.read(0, 1 << 20))] == [0, 1]

    asyncio.run(run())


def test_an_answer_from_an_older_leader_epoch_is_not_appended(tmp_path: Path) -> None:
    async def run() -> None:
        p = partition(tmp_path, me=1)
        follow(p, 1)
        p.append_fetched(at(0), 0, 0)
        p.append_fetched(at(1), 0, 0)
        # The leader epoch moves on (same leader) while the fetch is out.
        await fetcher(Leader(at(2), lambda: follow(p, 2)))._fetch([p])
        assert p.log.log_end_offset == 2

    asyncio.run(run())
