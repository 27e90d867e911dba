"""One group id space for classic, consumer and share groups, as Kafka 4.4 answers
(measured): a share group cannot take a classic or consumer group's id (members, or only
committed offsets), nor they a share group's."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.groups import group_membership
from broker.groups.consumer_group_heartbeat import HeartbeatRequest
from broker.groups.held_groups import GroupConfig
from broker.groups.offsets import OffsetToCommit
from broker.groups.service import GroupService
from broker.groups.share import handlers as share_handlers
from broker.groups.share.group_configs import ShareConfig
from broker.groups.share.service import ShareService
from broker.transactions import transactions_handler
from storage.groups import CommittedOffset, OffsetKey
from storage.groups.sqlite import SqliteGroupStore
from storage.share_groups.sqlite import SqliteShareStateStore
from tests.unit.test_group_apis import call

TOPIC_ID = uuid.UUID(int=7)


@dataclass(frozen=True)
class Endpoint:
    node_id: int
    host: str = "broker-1"
    port: int = 9092
    rack: str | None = None


class Topics:
    async def ensure(self, wanted: Any) -> None:
        pass

    def get(self, name: str) -> None:
        return None


class NoTopics:
    """A consumer heartbeat's topic lookup: no topic (the member subscribes to none that
    exists: it joins all the same)."""

    def get(self, name: str) -> None:
        return None

    def matching(self, pattern: str) -> set[str]:
        return set()

    def partition_racks(self, topic_id: uuid.UUID, partitions: int) -> list[Any]:
        return []


class Config:
    node_id = 1
    offset_metadata_max_bytes = 4096


class FakeBroker:
    def __init__(self, groups: GroupService, share: ShareService) -> None:
        self.groups = groups
        self.share = share
        self.topics = Topics()
        self.config = Config()
        self.authorizer = None


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[FakeBroker]:
    db = str(tmp_path / "coordinator.db")
    groups = GroupService(1, lambda: [Endpoint(1)], GroupConfig(), SqliteGroupStore(db))
    share = ShareService(
        ShareConfig(), SqliteShareStateStore(db), lambda names: {n: (TOPIC_ID, 2) for n in names}
    )
    groups.coordinator.share_group = share.is_share_group  # as broker/node.py wires it
    await groups.start()
    await share.start()
    try:
        yield FakeBroker(groups, share)
    finally:
        await share.close()
        await groups.close()


async def share_join(broker: FakeBroker, group: str) -> Any:
    data = {"group_id": group, "member_id": "m1", "member_epoch": 0,
            "subscribed_topic_names": ["orders"]}  # fmt: skip
    return await call(share_handlers.heartbeat, broker, 76, 1, data)


async def consumer_join(broker: FakeBroker, group: str) -> Any:
    """A KIP-848 member joining ``group`` (ConsumerGroupHeartbeat, epoch 0)."""
    return await broker.groups.consumer.heartbeat(
        HeartbeatRequest(group, "c1", 0, rebalance_timeout_ms=30_000,
                         subscribed_topic_names=("orders",), owned={}),
        1,
        NoTopics(),
    )  # fmt: skip


async def test_a_share_group_cannot_take_a_consumer_groups_id(broker: FakeBroker) -> None:
    joined = await consumer_join(broker, "live")
    assert joined.error == ErrorCode.none
    await broker.groups.store.commit_offsets(
        "offsets-only", [CommittedOffset(TOPIC_ID, 0, 5, -1, "", 0)]
    )
    for group in ("live", "offsets-only"):
        answer = await share_join(broker, group)
        assert answer.error_code == ErrorCode.group_id_not_found
        assert answer.error_message == f"Group {group} is not a share group."
    assert (await share_join(broker, "free")).error_code == ErrorCode.none


async def test_a_consumer_or_classic_group_cannot_take_a_share_groups_id(
    broker: FakeBroker,
) -> None:
    assert (await share_join(broker, "sg")).error_code == ErrorCode.none
    refused = await consumer_join(broker, "sg")
    assert refused.error == ErrorCode.group_id_not_found
    join = {"group_id": "sg", "session_timeout": 10_000, "rebalance_timeout": 10_000,
            "member_id": "", "group_instance_id": None, "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": b"sub"}]}  # fmt: skip
    answer = await call(group_membership.join_group, broker, 11, 9, join)
    assert answer.error_code == ErrorCode.inconsistent_group_protocol
    # Still refused once every member left: the empty share group keeps its id.
    leave = {"group_id": "sg", "member_id": "m1", "member_epoch": -1}
    assert (await call(share_handlers.heartbeat, broker, 76, 1, leave)).error_code == 0
    answer = await call(group_membership.join_group, broker, 11, 9, join)
    assert answer.error_code == ErrorCode.inconsistent_group_protocol


async def test_a_share_groups_id_takes_no_committed_offsets(broker: FakeBroker) -> None:
    """Kafka answers OffsetCommit, TxnOffsetCommit and OffsetDelete on a share group's id
    with GROUP_ID_NOT_FOUND ("is not a consumer group"); an OffsetFetch finds nothing."""
    assert (await share_join(broker, "sg")).error_code == ErrorCode.none
    offsets = broker.groups.offsets
    key = OffsetKey(TOPIC_ID, 0)
    errors = await offsets.commit("sg", "", None, -1, [OffsetToCommit(key, 5, -1, None)])
    assert errors == [ErrorCode.group_id_not_found]
    assert (await offsets.fetch({"sg": None}))["sg"].offsets == {}
    assert await offsets.delete("sg", [("orders", key)]) == (ErrorCode.group_id_not_found, [])
    txn = {"transactional_id": "t", "group_id": "sg", "producer_id": 1, "producer_epoch": 0,
           "generation_id": -1, "member_id": "", "group_instance_id": None,
           "topics": [{"name": "orders", "partitions": [
               {"partition_index": 0, "committed_offset": 5, "committed_leader_epoch": -1,
                "committed_metadata": ""}]}]}  # fmt: skip
    answer = await call(transactions_handler.txn_offset_commit, broker, 28, 3, txn)
    assert answer.topics[0].partitions[0].error_code == ErrorCode.group_id_not_found
    # A group nobody holds, no share group: the same commit is taken.
    errors = await offsets.commit("free", "", None, -1, [OffsetToCommit(key, 5, -1, None)])
    assert errors == [ErrorCode.none]
