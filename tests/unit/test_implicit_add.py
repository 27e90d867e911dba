"""Produce v12's implicit add (KIP-890 part 2, broker/produce/implicit_add.py): one
coordinator call adds the request's transactional partitions; a diskless partition already
added to the same transaction (producer id and epoch) is not added again, a classic one whose
leader needs no verification neither; a refusal is each added partition's answer."""

from __future__ import annotations

import uuid
from typing import Any

from kio.schema.errors import ErrorCode

from broker.logs.diskless.diskless_log import DisklessLog
from broker.produce import implicit_add
from storage.catalog import Topic
from storage.partition_key import PartitionKey
from storage.transactions import CONCURRENT_TRANSACTIONS, NONE, PRODUCER_FENCED
from tests.e2e._batches import Record, build_raw_batch, encode_record
from tests.unit._handlers import request_and_context

DISKLESS = Topic("d", uuid.UUID(int=1), 2)
CLASSIC = Topic("c", uuid.UUID(int=2), 2)


def txn_batch(pid: int, epoch: int, transactional: bool = True) -> bytes:
    payload = encode_record(Record(b"k", b"v"), 0)
    return build_raw_batch(
        payload,
        records_count=1,
        base_timestamp_ms=1_700_000_000_000,
        attributes=0x10 if transactional else 0,
        producer_id=pid,
        producer_epoch=epoch,
        base_sequence=0,
    )


class Classic:
    def __init__(self, verify: bool) -> None:
        self.verify = verify

    def begin_verification(self, topic: Any, partition: int, batches: Any) -> bool:
        return self.verify

    def needs_transaction_add(self, topic: Any, partition: int, batches: Any, added: bool) -> bool:
        return self.verify


class Broker:
    authorizer = None

    def __init__(self, error: int = NONE, classic_verifies: bool = True) -> None:
        self.error = error
        self.calls: list[list[PartitionKey]] = []
        self.topics = self
        self.router = self
        self.transactions = self
        self._classic = Classic(classic_verifies)

    def get(self, name: str) -> Topic | None:
        return {"d": DISKLESS, "c": CLASSIC}.get(name)

    def int_config(self, topic: Topic, key: str) -> int:
        return 1 << 20

    def route(self, topic_id: uuid.UUID, partition: int, purpose: Any) -> Any:
        return DisklessLog(None) if topic_id == DISKLESS.topic_id else self._classic  # type: ignore[arg-type]

    async def add(self, tid: str, pid: int, epoch: int, partitions: Any = ()) -> int:
        self.calls.append(list(partitions))
        return self.error


def produce(
    tid: str, pid: int, epoch: int, parts: list[tuple[str, int]], transactional: bool = True
) -> tuple[Any, Any]:
    topics: dict[str, list[dict[str, Any]]] = {}
    for name, index in parts:
        topics.setdefault(name, []).append(
            {"index": index, "records": txn_batch(pid, epoch, transactional)}
        )
    data = {
        "transactional_id": tid,
        "acks": -1,
        "timeout": 10_000,
        "topic_data": [{"name": n, "partition_data": p} for n, p in topics.items()],
    }
    return request_and_context(0, 12, data)


async def test_one_call_adds_the_partitions_and_diskless_ones_once_per_transaction() -> None:
    broker = Broker()
    request, ctx = produce("tx-a", 7, 3, [("d", 0), ("d", 1), ("c", 0)])
    refused, verified = await implicit_add.add_partitions(broker, ctx, request)  # type: ignore[arg-type]
    d0, d1, c0 = (
        PartitionKey(t.topic_id, i) for t, i in ((DISKLESS, 0), (DISKLESS, 1), (CLASSIC, 0))
    )
    assert refused == {} and broker.calls == [[d0, d1, c0]]
    # The classic partition's verification is the add's answer.
    assert verified is not None and verified[0] == (7, 3)
    assert verified[1].refusal(CLASSIC.topic_id, 0) == 0
    # The same transaction again: the diskless partitions are in it, the classic one is
    # added again only while its leader asks for verification.
    await implicit_add.add_partitions(broker, ctx, request)  # type: ignore[arg-type]
    assert broker.calls[-1] == [c0]
    quiet = Broker(classic_verifies=False)
    assert await implicit_add.add_partitions(quiet, ctx, request) == ({}, None)  # type: ignore[arg-type]
    assert quiet.calls == []
    # The next transaction (TV2: the next epoch) adds them again.
    request, ctx = produce("tx-a", 7, 4, [("d", 0)])
    await implicit_add.add_partitions(broker, ctx, request)  # type: ignore[arg-type]
    assert broker.calls[-1] == [d0]


async def test_non_transactional_batches_add_nothing() -> None:
    broker = Broker()
    request, ctx = produce("tx-b", 8, 0, [("d", 0)], transactional=False)
    assert await implicit_add.add_partitions(broker, ctx, request) == ({}, None)  # type: ignore[arg-type]
    assert broker.calls == []


async def test_a_refused_add_is_each_partitions_answer() -> None:
    for error, answer in (
        (PRODUCER_FENCED, ErrorCode.invalid_producer_epoch),
        (CONCURRENT_TRANSACTIONS, ErrorCode.not_enough_replicas),
        (int(ErrorCode.invalid_producer_id_mapping), ErrorCode.invalid_producer_id_mapping),
        (int(ErrorCode.invalid_txn_state), ErrorCode.invalid_txn_state),
    ):
        broker = Broker(error)
        request, ctx = produce(f"tx-{error}", 9, 0, [("d", 0), ("c", 1)])
        refused, verified = await implicit_add.add_partitions(broker, ctx, request)  # type: ignore[arg-type]
        assert set(refused.values()) == {int(answer)} and len(refused) == 2
        assert verified is not None and verified[1].refusal(CLASSIC.topic_id, 1) == int(answer)
