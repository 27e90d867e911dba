"""WriteTxnMarkers (key 27) as a leader answers it: CLUSTER_ACTION first, then per partition
unknown topics and partitions, diskless partitions (not served) and partitions this broker
does not lead, each with Kafka's error code and nothing appended."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.transactions import write_txn_markers as txn_markers
from tests.unit.test_authorization_handlers import TOPIC, FakeBroker, call

E = ErrorCode


class Manager:
    def __init__(self, classic: bool) -> None:
        self.classic = classic

    def is_classic(self, topic_id: Any) -> bool:
        return self.classic

    def leader_partition(self, topic_id: Any, partition: int) -> tuple[None, int]:
        return None, int(E.not_leader_or_follower)


def request(*partitions: tuple[str, list[int]]) -> dict[str, Any]:
    return {
        "markers": [
            {
                "producer_id": 7,
                "producer_epoch": 0,
                "transaction_result": True,
                "coordinator_epoch": 0,
                "topics": [{"name": n, "partition_indexes": ps} for n, ps in partitions],
            }
        ]
    }


def codes(answer: Any) -> dict[tuple[str, int], int]:
    return {
        (t.name, p.partition_index): p.error_code
        for m in answer.markers
        for t in m.topics
        for p in t.partitions
    }


async def test_write_txn_markers_needs_cluster_action() -> None:
    broker = FakeBroker()
    broker.classic = Manager(True)  # type: ignore[attr-defined]
    answer = await call(txn_markers.handle, broker, 27, 1, request((TOPIC.name, [0, 1])))
    assert set(codes(answer).values()) == {E.cluster_authorization_failed}


async def test_write_txn_markers_errors_per_partition() -> None:
    broker = FakeBroker()
    broker.authorizer = None  # type: ignore[assignment]
    broker.controller = None  # type: ignore[assignment]  # no migration to look up
    broker.classic = Manager(True)  # type: ignore[attr-defined]
    answer = await call(
        txn_markers.handle,
        broker,
        27,
        1,
        request((TOPIC.name, [0, 99, -1]), ("nope", [0])),
    )
    assert codes(answer) == {
        (TOPIC.name, 0): E.not_leader_or_follower,
        (TOPIC.name, 99): E.unknown_topic_or_partition,
        (TOPIC.name, -1): E.unknown_topic_or_partition,
        ("nope", 0): E.unknown_topic_or_partition,
    }
    broker.classic = Manager(False)  # type: ignore[attr-defined]
    answer = await call(txn_markers.handle, broker, 27, 1, request((TOPIC.name, [0])))
    assert codes(answer) == {(TOPIC.name, 0): E.invalid_request}
