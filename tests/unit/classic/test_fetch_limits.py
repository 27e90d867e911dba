"""Fetch's size limits on classic partitions, as Kafka applies them (ReplicaManager's
readFromLog, KIP-74): the request's max_bytes and each partition's partition_max_bytes;
only the first batch of the first partition that returns data may exceed them.

librdkafka's test 0082 (fetch.max.bytes=1000000, receive.message.max.bytes=1000512) drops
the connection on an answer larger than that and fetches the same offsets again forever:
the answer must never carry a second partition's batch past max_bytes."""

from __future__ import annotations

import os
import time
from typing import Any

from kio.schema.errors import ErrorCode

from broker.node import Broker
from storage.classic.batches import walk
from tests.e2e._batches import Record, build_batch
from tests.fixtures.brokers import eventually
from tests.unit.test_broker_controller_mode import call

E = ErrorCode
BIG = 900 * 1024  # one record's value: batches a little larger
MAX_BYTES = 1_000_000  # librdkafka 0082's fetch.max.bytes


def big_batch() -> bytes:
    # Random bytes: the size on the wire whatever compression a path might try.
    return build_batch([Record(b"k", os.urandom(BIG))], base_timestamp_ms=int(time.time() * 1000))


async def create_classic(b: Broker, name: str, replicas: list[int], diskless: bool = False) -> None:
    created = await call(
        b,
        19,
        7,
        {
            "topics": [
                {
                    "name": name,
                    # Diskless topics are placed by the controller (one replica a rack).
                    "num_partitions": 3 if diskless else -1,
                    "replication_factor": -1,
                    "assignments": []
                    if diskless
                    else [{"partition_index": i, "broker_ids": replicas} for i in range(3)],
                    "configs": [
                        {"name": "diskless.enable", "value": "true" if diskless else "false"}
                    ],
                }
            ],
            "timeout": 5000,
            "validate_only": False,
        },
    )
    assert created.topics[0].error_code == E.none, created.topics[0].error_message
    assert b.classic is not None
    if not diskless:
        await eventually(lambda: sum(p.topic == name for p in b.classic.partitions.values()) == 3)


async def produce(b: Broker, name: str, partition: int, records: bytes) -> None:
    answer = await call(
        b,
        0,
        9,
        {
            "transactional_id": None,
            "acks": -1,
            "timeout": 10_000,
            "topic_data": [
                {"name": name, "partition_data": [{"index": partition, "records": records}]}
            ],
        },
    )
    assert answer.responses[0].partition_responses[0].error_code == E.none


async def fetch(
    b: Broker,
    name: str,
    offsets: list[int],
    max_bytes: int = MAX_BYTES,
    partition_max_bytes: int = 20_000_000,
    replica: int = -1,
) -> list[Any]:
    """One topic's partitions 0.. at these offsets; their answers by partition."""
    return (await fetch_topics(b, {name: offsets}, max_bytes, partition_max_bytes, replica))[name]


async def fetch_topics(
    b: Broker,
    offsets: dict[str, list[int]],
    max_bytes: int = MAX_BYTES,
    partition_max_bytes: int = 20_000_000,
    replica: int = -1,
) -> dict[str, list[Any]]:
    """Several topics in one request, in this order."""
    answer = await call(
        b,
        1,
        12,
        {
            "replica_id": replica,
            "max_wait": 0,
            "min_bytes": 0,
            "max_bytes": max_bytes,
            "isolation_level": 0,
            "topics": [
                {
                    "topic": name,
                    "partitions": [
                        {
                            "partition": i,
                            "current_leader_epoch": -1,
                            "fetch_offset": offset,
                            "log_start_offset": -1,
                            "partition_max_bytes": partition_max_bytes,
                        }
                        for i, offset in enumerate(topic_offsets)
                    ],
                }
                for name, topic_offsets in offsets.items()
            ],
            "forgotten_topics_data": [],
            "rack_id": "",
        },
    )
    out = {}
    for t in answer.responses:
        parts = sorted(t.partitions, key=lambda p: p.partition_index)
        assert [p.error_code for p in parts] == [E.none] * len(offsets[t.topic])
        out[t.topic] = parts
    return out


def sizes(parts: list[Any]) -> list[int]:
    return [len(p.records or b"") for p in parts]


async def test_a_fetch_stops_at_max_bytes_and_a_consumer_still_progresses(
    classic_brokers: list[Broker],
) -> None:
    b1 = classic_brokers[0]
    await create_classic(b1, "big", [1])
    batch = big_batch()
    assert MAX_BYTES - len(batch) > 0  # the second partition's batch would not fit
    for i in range(3):
        await produce(b1, "big", i, batch)

    # Only the first partition carries data (its batch whole); a second batch would pass
    # max_bytes, so the other partitions are answered without records, error NONE.
    parts = await fetch(b1, "big", [0, 0, 0])
    assert sizes(parts) == [len(batch), 0, 0]
    assert [p.high_watermark for p in parts] == [1, 1, 1]
    # The consumer progresses. The first partition has nothing more: the second is now the
    # first with data, so its batch comes whole (Kafka's minOneMessage holds until a
    # partition returns data, not for the request's first partition only).
    parts = await fetch(b1, "big", [1, 0, 0])
    assert sizes(parts) == [0, len(batch), 0]
    parts = await fetch(b1, "big", [1, 1, 0])
    assert sizes(parts) == [0, 0, len(batch)]
    assert [b.base_offset for b in walk(parts[2].records)] == [0]


async def test_partition_and_request_limits_after_the_first_batch(
    classic_brokers: list[Broker],
) -> None:
    b1 = classic_brokers[0]
    await create_classic(b1, "mixed", [1])
    small = build_batch([Record(b"k", b"v" * 100_000)], base_timestamp_ms=0)
    big = big_batch()
    await produce(b1, "mixed", 0, small)
    await produce(b1, "mixed", 0, small)
    await produce(b1, "mixed", 1, big)
    await produce(b1, "mixed", 2, small)

    # partition_max_bytes smaller than every batch (KIP-74): the first partition with data
    # returns its first batch whole (only it), the others nothing.
    assert sizes(await fetch(b1, "mixed", [0, 0, 0], partition_max_bytes=1000)) == [
        len(small),
        0,
        0,
    ]
    # Within the limits: both of partition 0's batches; partition 1's batch is larger
    # than what is left (nothing), partition 2's small one still fits.
    parts = await fetch(b1, "mixed", [0, 0, 0])
    assert sizes(parts) == [2 * len(small), 0, len(small)]
    assert sum(sizes(parts)) <= MAX_BYTES
    # max_bytes 0: the first batch of the first partition with data, nothing else.
    assert sizes(await fetch(b1, "mixed", [2, 0, 0], max_bytes=0)) == [0, len(big), 0]


async def test_a_follower_fetch_respects_the_limits_and_still_records_progress(
    classic_brokers: list[Broker],
) -> None:
    b1, b2 = classic_brokers
    await create_classic(b1, "replicated", [1, 2])
    batch = big_batch()
    for i in range(3):
        await produce(b1, "replicated", i, batch)  # acks=all: the follower has them
    assert b1.classic is not None and b2.classic is not None
    leaders = sorted(
        (p for p in b1.classic.partitions.values() if p.topic == "replicated"),
        key=lambda p: p.index,
    )
    # Broker 2's own fetcher stops, and its last long poll on the leader ends (it would
    # record offset 1 again): from now on only the fetches below reach the leader.
    b2.classic._fetchers[1].stop()
    await eventually(lambda: not b1.watch._waiters)
    # Broker 2 fetches again from 0 (as after a truncation): one batch, as consumers get.
    parts = await fetch(b1, "replicated", [0, 0, 0], replica=2)
    assert sizes(parts) == [len(batch), 0, 0]
    # Every partition's fetch offset was recorded, those answered without records too.
    assert [p.leader_state.progress[2].log_end_offset for p in leaders] == [0, 0, 0]


async def test_classic_and_diskless_partitions_share_one_answer_s_limit(
    classic_brokers: list[Broker],
) -> None:
    """A consumer of a topic migrating between classic and diskless reads some partitions
    from each kind in one request: whichever comes first in it fills the answer."""
    b1 = classic_brokers[0]
    await create_classic(b1, "classic-part", [1])
    await create_classic(b1, "diskless-part", [1], diskless=True)
    batch = big_batch()
    for name in ("classic-part", "diskless-part"):
        for i in range(3):
            await produce(b1, name, i, batch)
    got = await fetch_topics(b1, {"diskless-part": [0, 0, 0], "classic-part": [0, 0, 0]})
    assert sizes(got["diskless-part"]) == [len(batch), 0, 0]
    assert sizes(got["classic-part"]) == [0, 0, 0]
    got = await fetch_topics(b1, {"classic-part": [0, 0, 0], "diskless-part": [0, 0, 0]})
    assert sizes(got["classic-part"]) == [len(batch), 0, 0]
    assert sizes(got["diskless-part"]) == [0, 0, 0]
    # The first partition with data goes whole wherever it is.
    got = await fetch_topics(b1, {"classic-part": [1, 1, 1], "diskless-part": [1, 0, 0]})
    assert sizes(got["classic-part"]) == [0, 0, 0]
    assert sizes(got["diskless-part"]) == [0, len(batch), 0]
