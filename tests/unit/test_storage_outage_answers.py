"""A request whose partitions' storage cannot be reached gets each of those partitions
answered KAFKA_STORAGE_ERROR, as Kafka answers the partitions of an offline log directory,
not a failed handler: a request without a top-level error code (OffsetForLeaderEpoch) could
then only be answered by closing the connection, which long run #7 saw at every PostgreSQL
restart (consumers of diskless and migrating topics disconnected, 'handler failed' with a
traceback). The batch coordinator here is one whose database is down: every call raises
CoordinatorUnavailable, as the PostgreSQL pool does once its retries gave up."""

from __future__ import annotations

from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.admin import records_admin
from broker.fetch import leader_epoch, list_offsets
from broker.logs.partition_log import OffsetAnswer, ask_each
from common.acl import AclBinding
from storage.coordinator import CoordinatorUnavailable
from tests.unit.test_authorization_handlers import PRINCIPAL, FakeBroker, call

E = ErrorCode


class DatabaseDown:
    """The batch coordinator with its database unreachable."""

    def __getattr__(self, name: str) -> Any:
        async def unreachable(*_args: Any, **_kwargs: Any) -> Any:
            raise CoordinatorUnavailable(f"PostgreSQL unavailable ({name})")

        return unreachable


class DisklessBroker(FakeBroker):
    def leader_epoch(self, topic_id: Any, partition: int) -> int:
        return 0


def broker_with_database_down() -> FakeBroker:
    broker = DisklessBroker(AclBinding(2, "orders", 3, PRINCIPAL, "*", 2, 3))  # ALL on orders
    broker.coordinator = DatabaseDown()
    return broker


def partitions(answer: Any, field: str = "partitions") -> list[Any]:
    return [p for t in answer.topics for p in getattr(t, field)]


async def test_offset_for_leader_epoch_answers_each_partition_storage_error() -> None:
    answer = await call(
        leader_epoch.handle,
        broker_with_database_down(),
        23,
        4,
        {
            "topics": [
                {
                    "topic": "orders",
                    "partitions": [
                        {"partition": 0, "leader_epoch": 0, "current_leader_epoch": -1},
                        {"partition": 2, "leader_epoch": 0, "current_leader_epoch": -1},
                    ],
                }
            ]
        },
    )
    got = [(p.partition, p.error_code) for p in partitions(answer)]
    assert got == [(0, E.kafka_storage_error), (2, E.kafka_storage_error)]
    assert all((p.leader_epoch, p.end_offset) == (-1, -1) for p in partitions(answer))


async def test_list_offsets_answers_each_partition_storage_error() -> None:
    answer = await call(
        list_offsets.handle,
        broker_with_database_down(),
        2,
        8,
        {
            "replica_id": -1,
            "topics": [{"name": "orders", "partitions": [{"partition_index": 1, "timestamp": -1}]}],
        },
    )
    [p] = partitions(answer)
    assert (p.error_code, p.offset) == (E.kafka_storage_error, -1)


async def test_delete_records_answers_each_partition_storage_error() -> None:
    answer = await call(
        records_admin.delete_records,
        broker_with_database_down(),
        21,
        2,
        {
            "topics": [{"name": "orders", "partitions": [{"partition_index": 0, "offset": 5}]}],
            "timeout_ms": 1000,
        },
    )
    [p] = partitions(answer)
    assert (p.error_code, p.low_watermark) == (E.kafka_storage_error, -1)


async def test_a_failure_that_is_no_outage_still_fails_the_request() -> None:
    # A bug is not answered as if the storage were away: it stays visible (logged with its
    # traceback by the connection, the request answered UNKNOWN_SERVER_ERROR or closed).
    class Broken:
        async def list_offsets(self, asks: Any, read_committed: bool) -> Any:
            raise KeyError("a bug")

    with pytest.raises(KeyError):
        await ask_each(
            [(Broken(), "ask")],  # type: ignore[list-item]
            lambda log, asks: log.list_offsets(asks, False),
            OffsetAnswer,
        )
