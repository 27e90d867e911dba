"""Produce to and fetch from a broker of our choosing, through aiokafka's own client.

Stock clients send a partition's requests to its leader. To show that *any* broker serves any
partition, these helpers use aiokafka's public lower layer (``AIOKafkaClient.send(node_id, …)``
with its request classes and record-batch builder): the bytes on the wire are still the stock
client's, only the choice of broker is ours.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from aiokafka.client import AIOKafkaClient
from aiokafka.protocol.fetch import FetchRequest
from aiokafka.protocol.produce import ProduceRequest
from aiokafka.record.default_records import DefaultRecordBatchBuilder
from aiokafka.record.memory_records import MemoryRecords


def batch(values: Sequence[bytes]) -> bytes:
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=0,
        is_transactional=0,
        producer_id=-1,
        producer_epoch=-1,
        base_sequence=-1,
        batch_size=1 << 20,
    )
    now = int(time.time() * 1000)
    for i, value in enumerate(values):
        builder.append(i, timestamp=now, key=None, value=value, headers=[])
    return bytes(builder.build())


async def produce(
    client: AIOKafkaClient, node_id: int, topic: str, partition: int, values: Sequence[bytes]
) -> tuple[int, int]:
    """One Produce (acks=all) of one batch to ``node_id``: (error code, base offset)."""
    request = ProduceRequest(
        transactional_id=None,
        required_acks=-1,
        timeout=30_000,
        topics=[(topic, [(partition, batch(values))])],
    )
    response = await client.send(node_id, request)
    (_name, partitions) = response.topics[0]
    return int(partitions[0][1]), int(partitions[0][2])


async def fetch(
    client: AIOKafkaClient, node_id: int, topic: str, partition: int, offset: int
) -> tuple[int, list[tuple[int, bytes]]]:
    """One Fetch from ``node_id``: (error code, [(offset, value)])."""
    request = FetchRequest(
        max_wait_time=500,
        min_bytes=1,
        max_bytes=8 << 20,
        isolation_level=0,
        topics=[(topic, [(partition, offset, 8 << 20)])],
    )
    response = await client.send(node_id, request)
    part = response.topics[0][1][0]
    error, data = int(part[1]), part[-1]
    out: list[tuple[int, bytes]] = []
    records = MemoryRecords(data or b"")
    while (next_batch := records.next_batch()) is not None:
        out.extend((r.offset, r.value) for r in next_batch)
    return error, out
