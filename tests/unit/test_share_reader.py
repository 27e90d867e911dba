"""A share fetch's log read: how much of each partition it asks the log for.

ShareFetch carries no per-partition byte limit, only the request's MaxBytes (tens of MiB
from the stock clients) and MaxRecords (500). Each partition was read up to MaxBytes, for
the few hundred records a fetch acquires: on a diskless topic every answer copied and walked
tens of MiB (issue 30's share-group bench, a tenth of a consumer group's rate)."""

from __future__ import annotations

import asyncio
import uuid
from types import SimpleNamespace
from typing import Any

from broker.groups.share.reader import PARTITION_READ_BYTES, ReadAsk, read


class StubLog:
    """A partition log that records what each read asked for and returns nothing."""

    def __init__(self) -> None:
        self.asked: list[tuple[int, int, int]] = []  # partition, offset, max bytes

    def open_read(self, key: Any, topic: Any, part: Any, plan: Any) -> Any:
        self.asked.append((part.partition, part.fetch_offset, part.partition_max_bytes))
        return SimpleNamespace(error=0)

    async def read_below(self, slots: Any, budget: Any, read_committed: bool) -> None:
        pass

    async def start_round(self, slots: Any, budget: Any, plan: Any, read_committed: bool) -> None:
        pass

    def read_round(self, slot: Any, budget: Any, plan: Any, read_committed: bool) -> None:
        pass

    def interests(self, slot: Any, plan: Any) -> list[Any]:
        return []

    async def end_reads(self, slots: Any, plan: Any) -> None:
        pass

    async def describe(self, slots: Any, plan: Any) -> None:
        pass

    def entry(self, slot: Any, plan: Any, read_committed: bool) -> dict[str, Any]:
        return {"records": b"", "log_start_offset": 0, "high_watermark": 0}


def test_each_partition_is_read_up_to_a_partition_fetch_not_the_whole_request() -> None:
    log = StubLog()
    router = SimpleNamespace(
        route=lambda *_: log, log_start=lambda *_: 0, consumer_read=lambda *_: log
    )
    topics = SimpleNamespace(int_config=lambda topic, name: topic.configs[name])
    broker = SimpleNamespace(router=router, topics=topics)
    topic = SimpleNamespace(
        topic_id=uuid.uuid4(), name="t", configs={"max.message.bytes": 1024 * 1024 + 12}
    )
    request_max = 50 * 1024 * 1024  # librdkafka's fetch.max.bytes
    asks = [ReadAsk(topic, p, 100 * p, request_max) for p in range(3)]  # type: ignore[arg-type]
    results, _ = asyncio.run(read(broker, asks, request_max, False))  # type: ignore[arg-type]
    assert [r.error for r in results] == [0, 0, 0]
    # Kafka's default max.message.bytes (1 MiB + 12): a batch as large as the topic takes.
    assert log.asked == [(p, 100 * p, 1024 * 1024 + 12) for p in range(3)]
    assert PARTITION_READ_BYTES == 1024 * 1024
    # A topic taking larger batches is read up to its largest batch in every partition.
    log.asked.clear()
    big = SimpleNamespace(topic_id=uuid.uuid4(), name="b", configs={"max.message.bytes": 8 << 20})
    asyncio.run(read(broker, [ReadAsk(big, 1, 0, request_max)], request_max, False))  # type: ignore[arg-type]
    assert log.asked == [(1, 0, 8 << 20)]
    small = SimpleNamespace(topic_id=uuid.uuid4(), name="s", configs={"max.message.bytes": 1000})
    log.asked.clear()
    asyncio.run(read(broker, [ReadAsk(small, 1, 0, request_max)], request_max, False))  # type: ignore[arg-type]
    assert log.asked == [(1, 0, PARTITION_READ_BYTES)]
    # A request asking less than that is read within its own limit.
    log.asked.clear()
    asyncio.run(read(broker, [ReadAsk(topic, 0, 0, 4096)], 4096, False))  # type: ignore[arg-type]
    assert log.asked == [(0, 0, 4096)]
