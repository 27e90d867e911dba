"""A follower's Fetch names its partitions starting one further each round: the leader
fills the answer in request order up to replica.fetch.response.max.bytes, so a fixed
order would let the first partitions' backlog starve the others."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

from broker.config import BrokerConfig
from broker.logs.classic.replica_fetcher import ReplicaFetcher
from broker.logs.classic.replication_quota import UNTHROTTLED, ReplicationQuota

from .test_partition import partition


class Recorder:
    def __init__(self) -> None:
        self.orders: list[list[tuple[str, int]]] = []

    async def request(self, request: Any, _timeout: float) -> Any:
        self.orders.append(
            [(t.topic, int(p.partition)) for t in request.topics for p in t.partitions]
        )
        return SimpleNamespace(responses=())


async def test_each_round_starts_with_the_next_partition(tmp_path: Path) -> None:
    parts = []
    for i in range(3):
        p = partition(tmp_path, 2, f"p{i}")
        p.index = i
        parts.append(p)
    fetcher = ReplicaFetcher.__new__(ReplicaFetcher)
    fetcher.manager = SimpleNamespace(  # type: ignore[assignment]
        me=2,
        broker=SimpleNamespace(),
        follower_quota=ReplicationQuota(lambda: UNTHROTTLED),
        throttles=lambda p, replica, as_leader: False,
    )
    fetcher.config = BrokerConfig()
    fetcher.leader_id = 1
    fetcher._rotation = 0
    recorder = Recorder()
    fetcher._conn = recorder  # type: ignore[assignment]
    for _ in range(4):
        await fetcher._fetch(parts)
    firsts = [order[0][1] for order in recorder.orders]
    assert firsts == [0, 1, 2, 0]
    assert all(sorted(order) == [("t", 0), ("t", 1), ("t", 2)] for order in recorder.orders)


async def test_throttled_partitions_sit_out_while_over_the_follower_rate(tmp_path: Path) -> None:
    """follower.replication.throttled.rate: a catching-up replica named in the topic's
    follower.replication.throttled.replicas is left out of the fetch while the measured rate
    is over the bound; the others are fetched as usual, and it is back once under."""
    parts = []
    for i in range(3):
        p = partition(tmp_path, 2, f"p{i}")
        p.index = i
        parts.append(p)
    rate = {"bound": 1000}
    quota = ReplicationQuota(lambda: rate["bound"])
    fetcher = ReplicaFetcher.__new__(ReplicaFetcher)
    fetcher.manager = SimpleNamespace(  # type: ignore[assignment]
        me=2,
        broker=SimpleNamespace(),
        follower_quota=quota,
        throttles=lambda p, replica, as_leader: p.index == 1 and not as_leader,
    )
    fetcher.config = BrokerConfig()
    fetcher.leader_id = 1
    fetcher._rotation = 0
    recorder = Recorder()
    fetcher._conn = recorder  # type: ignore[assignment]
    await fetcher._fetch(parts)
    assert sorted(recorder.orders[-1]) == [("t", 0), ("t", 1), ("t", 2)]  # under the rate
    quota.record(100_000)  # ~10 kB/s over the windows: over 1000 B/s
    await fetcher._fetch(parts)
    assert sorted(recorder.orders[-1]) == [("t", 0), ("t", 2)]
    rate["bound"] = UNTHROTTLED  # the throttle removed (kafka-reassign-partitions --verify)
    await fetcher._fetch(parts)
    assert sorted(recorder.orders[-1]) == [("t", 0), ("t", 1), ("t", 2)]
