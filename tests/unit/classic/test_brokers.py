"""Two real brokers and a real single-voter controller in one event loop (the
classic_brokers fixture, tests/fixtures/classic_brokers.py): a classic topic replicated
leader → follower over Kafka's Fetch, and the leader's Kafka APIs on it."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from kio.schema.errors import ErrorCode

from broker.node import Broker
from broker.server.api_table import build_api_table
from protocol.records import TRANSACTIONAL_BIT
from storage.classic.batches import walk
from storage.partition_key import PartitionKey
from tests.e2e._batches import Record, build_batch, build_raw_batch, encode_record
from tests.fixtures.brokers import eventually
from tests.unit._handlers import decode_answer, fetch_body, request_and_context, settled
from tests.unit.test_broker_controller_mode import call

E = ErrorCode


def produce_body(topic: str, records: bytes, acks: int = -1) -> dict[str, Any]:
    return {
        "transactional_id": None,
        "acks": acks,
        "timeout": 10_000,
        "topic_data": [{"name": topic, "partition_data": [{"index": 0, "records": records}]}],
    }


async def create_on_broker_1(via: Broker, name: str) -> Any:
    """CreateTopics through ``via``: a one-partition classic topic with its one replica on
    broker 1."""
    return await call(
        via,
        19,
        7,
        {
            "topics": [
                {
                    "name": name,
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": [1]}],
                    "configs": [{"name": "diskless.enable", "value": "false"}],
                }
            ],
            "timeout": 5000,
            "validate_only": False,
        },
    )


def batch(n: int) -> bytes:
    return build_batch(
        [Record(b"k", b"v%d" % i) for i in range(n)], base_timestamp_ms=int(time.time() * 1000)
    )


async def test_classic_topic_replicates_and_answers_kafka_apis(
    classic_brokers: list[Broker],
) -> None:
    b1, b2 = classic_brokers
    created = await call(
        b1,
        19,
        7,
        {
            "topics": [
                {
                    "name": "orders",
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": [1, 2]}],
                    "configs": [
                        {"name": "diskless.enable", "value": "false"},
                        {"name": "min.insync.replicas", "value": "2"},
                    ],
                }
            ],
            "timeout": 5000,
            "validate_only": False,
        },
    )
    assert created.topics[0].error_code == E.none, created.topics[0].error_message
    assert b1.classic is not None and b2.classic is not None
    await eventually(lambda: b2.classic.partitions and b1.classic.partitions)
    leader = next(iter(b1.classic.partitions.values()))
    follower = next(iter(b2.classic.partitions.values()))
    assert os.path.isdir(leader.log.dir) and leader.log.dir.endswith("orders-0")

    # acks=all: answered once the follower (over a real Fetch) has the batch.
    answer = await call(b1, 0, 9, produce_body("orders", batch(3)))
    part = answer.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (E.none, 0)
    assert follower.log.log_end_offset == 3
    answer = await call(b1, 0, 9, produce_body("orders", batch(2)))
    assert answer.responses[0].partition_responses[0].base_offset == 3
    # Only the leader takes produce.
    answer = await call(b2, 0, 9, produce_body("orders", batch(1)))
    assert answer.responses[0].partition_responses[0].error_code == E.not_leader_or_follower

    fetched = await call(b1, 1, 12, fetch_body("orders", 0))
    p = fetched.responses[0].partitions[0]
    assert p.error_code == E.none and p.high_watermark == 5
    assert [(b.base_offset, b.last_offset) for b in walk(p.records)] == [(0, 2), (3, 4)]
    # A broker that is not a replica cannot read as one; the follower's bytes equal the leader's.
    spoofed = await call(b1, 1, 12, fetch_body("orders", 0, replica=9))
    assert spoofed.responses[0].partitions[0].error_code == E.not_leader_or_follower
    assert follower.log.read(0, 1 << 20) == leader.log.read(0, 1 << 20)

    offsets = []
    for t in (-2, -1):  # one request each: a partition asked twice is INVALID_REQUEST
        listed = await call(
            b1,
            2,
            7,
            {
                "replica_id": -1,
                "isolation_level": 0,
                "topics": [
                    {
                        "name": "orders",
                        "partitions": [
                            {"partition_index": 0, "current_leader_epoch": -1, "timestamp": t}
                        ],
                    }
                ],
            },
        )
        offsets += [x.offset for x in listed.topics[0].partitions]
    assert offsets == [0, 5]

    epochs = await call(
        b1,
        23,
        4,
        {
            "replica_id": -1,
            "topics": [
                {
                    "topic": "orders",
                    "partitions": [{"partition": 0, "current_leader_epoch": -1, "leader_epoch": 0}],
                }
            ],
        },
    )
    e = epochs.topics[0].partitions[0]
    assert (e.error_code, e.leader_epoch, e.end_offset) == (E.none, 0, 5)

    deleted = await call(
        b1,
        21,
        2,
        {
            "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "offset": 3}]}],
            "timeout": 5000,
        },
    )
    assert deleted.topics[0].partitions[0].low_watermark == 3
    # The follower learns the new log start from its next fetch answer.
    await call(b1, 0, 9, produce_body("orders", batch(1)))
    await eventually(lambda: follower.log.log_start_offset == 3)

    # Deleting the topic deletes every replica's log.
    await call(b1, 20, 6, {"topics": [{"name": "orders", "topic_id": None}], "timeout": 5000})
    await eventually(
        lambda: not os.path.exists(leader.log.dir) and not os.path.exists(follower.log.dir)
    )


async def test_a_produce_before_the_replica_opens_is_never_taken_as_diskless(
    classic_brokers: list[Broker],
) -> None:
    """A new classic topic is in broker 1's image (Metadata names it leader) while its
    storage work is still running: the partition's diskless log is being created and the
    replica not yet opened. A produce then is refused retriably, never acknowledged into
    the diskless log, where no reader of the classic partition would find it."""
    b1, b2 = classic_brokers
    assert b1.controller is not None
    held = asyncio.Event()
    release = asyncio.Event()
    create_logs = b1.coordinator.create_logs

    async def slow_create_logs(keys: Any) -> None:
        await create_logs(keys)  # the diskless log exists: a commit to it would succeed
        held.set()
        await release.wait()

    b1.coordinator.create_logs = slow_create_logs  # type: ignore[method-assign]
    created = await create_on_broker_1(b2, "fresh")
    assert created.topics[0].error_code == E.none, created.topics[0].error_message
    await asyncio.wait_for(held.wait(), 10)
    assert b1.controller.image.topic("fresh") is not None
    assert b1.classic is not None and not b1.classic.partitions
    try:
        answer = await call(b1, 0, 9, produce_body("fresh", batch(3)))
        part = answer.responses[0].partition_responses[0]
        assert part.error_code == E.not_leader_or_follower
    finally:
        release.set()
    await eventually(lambda: bool(b1.classic and b1.classic.partitions))
    answer = await call(b1, 0, 9, produce_body("fresh", batch(3)))
    part = answer.responses[0].partition_responses[0]
    assert (part.error_code, part.base_offset) == (E.none, 0)
    assert next(iter(b1.classic.partitions.values())).log.log_end_offset == 3


async def test_a_producers_requests_are_appended_in_arrival_order_while_one_is_verified(
    classic_brokers: list[Broker],
) -> None:
    """KIP-890 verification of a transactional producer's first batch in a partition takes
    a coordinator round trip. The connection's next request (the producer's next sequence,
    pipelined) must not be appended before it: the client dies on OUT_OF_ORDER_SEQUENCE_NUMBER
    (the audit: ~3 % of transactions). Requests are run as the connection's worker runs them:
    each handler awaited in arrival order, answers awaited afterwards."""
    b1, _b2 = classic_brokers
    created = await create_on_broker_1(b1, "txn")
    assert created.topics[0].error_code == E.none, created.topics[0].error_message
    await eventually(lambda: bool(b1.classic and b1.classic.partitions))
    [topic_id] = {key[0] for key in b1.classic.partitions}  # type: ignore[union-attr]
    release = asyncio.Event()
    asked: list[int] = []

    async def verify(_tid: str, _pid: int, _epoch: int) -> tuple[int, set[PartitionKey]]:
        asked.append(_pid)
        if len(asked) == 1:
            await release.wait()  # the first request's round trip is slow
        return 0, {PartitionKey(topic_id, 0)}

    b1.transactions.verify = verify  # type: ignore[method-assign]
    handler = build_api_table(b1)[0].handler

    def txn_request(seq: int) -> tuple[Any, Any]:
        data = build_raw_batch(
            b"".join(encode_record(Record(b"k", b"v%d" % i), i) for i in range(2)),
            records_count=2,
            base_timestamp_ms=int(time.time() * 1000),
            attributes=TRANSACTIONAL_BIT,
            producer_id=77,
            producer_epoch=0,
            base_sequence=seq,
        )
        body = produce_body("txn", data)
        body["transactional_id"] = "tx"
        return request_and_context(0, 9, body)

    asyncio.get_running_loop().call_later(0.2, release.set)
    answers = []
    for seq in (0, 2):
        request, ctx = txn_request(seq)
        answers.append(await handler(ctx, request))
    parts = [
        decode_answer(await settled(a), 0, 9).responses[0].partition_responses[0] for a in answers
    ]
    assert [(p.error_code, p.base_offset) for p in parts] == [(E.none, 0), (E.none, 2)]
