"""The group API handlers at every version ApiVersions advertises.

Stock clients each speak a few versions; these tests walk all of them through the real
handlers and the real response encoder, so a field that only exists in some versions
(nullable here, absent there) cannot break an answer, and check what bad input gets.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.groups import consumer_group_handler, find_coordinator, group_membership
from broker.groups import group_admin_handler as groups_admin
from broker.groups import group_offsets_handler as group_offsets
from broker.groups.held_groups import GroupConfig
from broker.groups.service import GroupService
from broker.groups.share.group_configs import ShareConfig
from broker.groups.share.service import ShareService
from broker.server.api_table import VERSIONS
from storage.catalog import Topic
from storage.groups.sqlite import SqliteGroupStore
from storage.share_groups.sqlite import SqliteShareStateStore
from tests.unit._handlers import decode_answer, request_and_context, settled

E = ErrorCode
TOPIC = Topic("orders", uuid.UUID(int=7), 3)
VERSION_RANGES = {key: (low, high) for key, _, low, high in VERSIONS}


@dataclass(frozen=True)
class Endpoint:
    node_id: int
    host: str
    port: int
    rack: str | None = None

    def on_listener(self, name: str) -> Endpoint:
        return self  # one listener


class Topics:
    def get(self, name: str) -> Topic | None:
        return TOPIC if name == TOPIC.name else None

    def get_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return TOPIC if topic_id == TOPIC.topic_id else None


class FakeBroker:
    """What the group handlers use of a Broker: its groups and its topics (no authorizer)."""

    def __init__(self, groups: GroupService, share: ShareService) -> None:
        self.groups = groups
        self.share = share  # ListGroups and DeleteGroups cover share groups too
        self.topics = Topics()
        self.authorizer = None
        self.controller = None  # no replica sets: every topic diskless


@pytest.fixture
async def broker(tmp_path: Path) -> AsyncIterator[FakeBroker]:
    groups = GroupService(
        1,
        lambda: [Endpoint(1, "broker-1", 9092)],
        GroupConfig(initial_rebalance_delay_ms=0, min_session_timeout_ms=1000),
        SqliteGroupStore(str(tmp_path / "coordinator.db")),
    )
    share = ShareService(
        ShareConfig(), SqliteShareStateStore(str(tmp_path / "coordinator.db")), lambda n: {}
    )
    await groups.start()
    await share.start()
    try:
        yield FakeBroker(groups, share)
    finally:
        await share.close()
        await groups.close()


async def call(
    handler: Any, broker: FakeBroker, key: int, version: int, data: dict[str, Any]
) -> Any:
    """Build the request at ``version``, run the handler, encode and decode its answer."""
    request, ctx = request_and_context(key, version, data)
    response = await settled(await handler(broker, ctx, request))
    decoded = decode_answer(response, key, version)
    assert decoded == response
    return decoded


def versions(key: int) -> list[int]:
    low, high = VERSION_RANGES[key]
    return list(range(low, high + 1))


# --------------------------------------------------------------------------- FindCoordinator


@pytest.mark.parametrize("version", versions(10))
async def test_find_coordinator_every_version(broker: FakeBroker, version: int) -> None:
    data = {"key": "g", "key_type": 0, "coordinator_keys": ["g", "h"]}
    answer = await call(find_coordinator.handle, broker, 10, version, data)
    found = answer.coordinators if version >= 4 else [answer]
    assert [(c.error_code, c.node_id, c.host, c.port) for c in found] == [
        (E.none, 1, "broker-1", 9092)
    ] * len(found)


async def test_find_coordinator_of_an_unknown_key_type(broker: FakeBroker) -> None:
    answer = await call(
        find_coordinator.handle, broker, 10, 4, {"key_type": 2, "coordinator_keys": ["g"]}
    )
    assert answer.coordinators[0].error_code == E.invalid_request


# --------------------------------------------------------------------------- membership


def join_data(member_id: str = "", group: str = "g") -> dict[str, Any]:
    return {
        "group_id": group,
        "session_timeout": 10_000,
        "rebalance_timeout": 10_000,
        "member_id": member_id,
        "group_instance_id": None,
        "protocol_type": "consumer",
        "protocols": [{"name": "range", "metadata": b"sub"}],
    }


async def join_stable(broker: FakeBroker, version: int) -> tuple[str, int]:
    """One member joined (at ``version``) and synced; (member id, generation)."""
    answer = await call(group_membership.join_group, broker, 11, version, join_data())
    if answer.error_code == E.member_id_required:
        assert version >= 4
        answer = await call(
            group_membership.join_group, broker, 11, version, join_data(answer.member_id)
        )
    assert answer.error_code == E.none
    assert answer.leader == answer.member_id
    assert [m.member_id for m in answer.members] == [answer.member_id]
    assert answer.member_id.startswith("unit-client-")
    synced = await call(
        group_membership.sync_group,
        broker,
        14,
        5,
        {
            "group_id": "g",
            "generation_id": answer.generation_id,
            "member_id": answer.member_id,
            "assignments": [{"member_id": answer.member_id, "assignment": b"mine"}],
        },
    )
    assert (synced.error_code, synced.assignment) == (E.none, b"mine")
    return answer.member_id, answer.generation_id


@pytest.mark.parametrize("version", versions(11))
async def test_join_group_every_version(broker: FakeBroker, version: int) -> None:
    await join_stable(broker, version)


@pytest.mark.parametrize("version", versions(11))
async def test_join_group_errors_every_version(broker: FakeBroker, version: int) -> None:
    answer = await call(group_membership.join_group, broker, 11, version, join_data("ghost"))
    assert answer.error_code == E.unknown_member_id
    answer = await call(group_membership.join_group, broker, 11, version, join_data(group=""))
    assert answer.error_code == E.invalid_group_id
    short = {**join_data(), "session_timeout": 5}
    answer = await call(group_membership.join_group, broker, 11, version, short)
    assert answer.error_code == E.invalid_session_timeout


@pytest.mark.parametrize("version", versions(14))
async def test_sync_group_every_version(broker: FakeBroker, version: int) -> None:
    member_id, generation = await join_stable(broker, 5)
    data = {"group_id": "g", "generation_id": generation, "member_id": member_id}
    answer = await call(group_membership.sync_group, broker, 14, version, data)
    assert (answer.error_code, answer.assignment) == (E.none, b"mine")
    stale = await call(
        group_membership.sync_group, broker, 14, version, {**data, "generation_id": 99}
    )
    assert stale.error_code == E.illegal_generation


@pytest.mark.parametrize("version", versions(12))
async def test_heartbeat_every_version(broker: FakeBroker, version: int) -> None:
    member_id, generation = await join_stable(broker, 5)
    data = {"group_id": "g", "generation_id": generation, "member_id": member_id}
    assert (await call(group_membership.heartbeat, broker, 12, version, data)).error_code == 0
    data["member_id"] = "ghost"
    answer = await call(group_membership.heartbeat, broker, 12, version, data)
    assert answer.error_code == E.unknown_member_id


@pytest.mark.parametrize("version", versions(13))
async def test_leave_group_every_version(broker: FakeBroker, version: int) -> None:
    member_id, _ = await join_stable(broker, 5)
    data = {
        "group_id": "g",
        "member_id": member_id,
        "members": [{"member_id": member_id}, {"member_id": "ghost"}],
    }
    answer = await call(group_membership.leave_group, broker, 13, version, data)
    assert answer.error_code == E.none
    if version >= 3:
        assert [m.error_code for m in answer.members] == [E.none, E.unknown_member_id]
    # Gone now: the single-member versions report that in the request's error.
    again = await call(group_membership.leave_group, broker, 13, version, data)
    if version < 3:
        assert again.error_code == E.unknown_member_id
    else:
        assert [m.error_code for m in again.members] == [E.unknown_member_id] * 2


# --------------------------------------------------------------------------- offsets


def commit_data(partitions: list[int], metadata: str | None = "meta") -> dict[str, Any]:
    return {
        "group_id": "g",
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "retention_time": -1,
        "topics": [
            {
                "name": TOPIC.name,
                "topic_id": TOPIC.topic_id,
                "partitions": [
                    {
                        "partition_index": p,
                        "committed_offset": 100 + p,
                        "committed_leader_epoch": 4,
                        "committed_metadata": metadata,
                    }
                    for p in partitions
                ],
            },
            {
                "name": "no-such-topic",
                "topic_id": uuid.UUID(int=99),
                "partitions": [
                    {"partition_index": 0, "committed_offset": 1, "committed_metadata": None}
                ],
            },
        ],
    }


@pytest.mark.parametrize("version", versions(8))
async def test_offset_commit_every_version(broker: FakeBroker, version: int) -> None:
    answer = await call(group_offsets.offset_commit, broker, 8, version, commit_data([0, 1, 7]))
    known, unknown = answer.topics
    assert [p.error_code for p in known.partitions] == [
        E.none,
        E.none,
        E.unknown_topic_or_partition,
    ]
    expected = E.unknown_topic_id if version >= 10 else E.unknown_topic_or_partition
    assert [p.error_code for p in unknown.partitions] == [expected]
    fetched = await broker.groups.offsets.fetch({"g": None})
    assert sorted((k.partition, o.offset) for k, o in fetched["g"].offsets.items()) == [
        (0, 100),
        (1, 101),
    ]


@pytest.mark.parametrize("version", versions(9))
async def test_offset_fetch_every_version(broker: FakeBroker, version: int) -> None:
    await call(group_offsets.offset_commit, broker, 8, 8, commit_data([0, 2], metadata=None))
    topics = [
        {"name": TOPIC.name, "topic_id": TOPIC.topic_id, "partition_indexes": [0, 1, 2]},
        {"name": "no-such-topic", "topic_id": uuid.UUID(int=99), "partition_indexes": [0]},
    ]
    data = {
        "group_id": "g",
        "topics": topics,
        "groups": [
            {"group_id": "g", "topics": topics},
            {"group_id": "g", "topics": None},
            {"group_id": "nobody", "topics": None},
        ],
    }
    answer = await call(group_offsets.offset_fetch, broker, 9, version, data)
    groups = answer.groups if version >= 8 else [answer]
    asked = groups[0]
    if version >= 2:
        assert asked.error_code == E.none
    ours, theirs = asked.topics
    assert [(p.partition_index, p.committed_offset, p.metadata) for p in ours.partitions] == [
        (0, 100, ""),
        (1, -1, ""),
        (2, 102, ""),
    ]
    if version >= 5:
        assert [p.committed_leader_epoch for p in ours.partitions] == [4, -1, 4]
    missing = E.unknown_topic_id if version >= 10 else E.none
    assert [(p.committed_offset, p.error_code) for p in theirs.partitions] == [(-1, missing)]
    if version >= 8:
        everything, nobody = groups[1], groups[2]
        assert [
            (p.partition_index, p.committed_offset) for p in everything.topics[0].partitions
        ] == [
            (0, 100),
            (2, 102),
        ]
        assert (nobody.error_code, nobody.topics) == (E.none, ())


@pytest.mark.parametrize("version", versions(47))
async def test_offset_delete(broker: FakeBroker, version: int) -> None:
    await call(group_offsets.offset_commit, broker, 8, 8, commit_data([0, 1]))
    data = {
        "group_id": "g",
        "topics": [
            {"name": TOPIC.name, "partitions": [{"partition_index": 0}]},
            {"name": "no-such-topic", "partitions": [{"partition_index": 0}]},
        ],
    }
    answer = await call(group_offsets.offset_delete, broker, 47, version, data)
    assert answer.error_code == E.none
    assert [[p.error_code for p in t.partitions] for t in answer.topics] == [
        [E.none],
        [E.unknown_topic_or_partition],
    ]
    unknown = await call(
        group_offsets.offset_delete, broker, 47, version, {**data, "group_id": "x"}
    )
    assert (unknown.error_code, unknown.topics) == (E.group_id_not_found, ())


# --------------------------------------------------------------------------- admin


@pytest.mark.parametrize("version", versions(16))
async def test_list_groups_every_version(broker: FakeBroker, version: int) -> None:
    await join_stable(broker, 5)
    await call(group_offsets.offset_commit, broker, 8, 8, {**commit_data([0]), "group_id": "h"})
    answer = await call(groups_admin.list_groups, broker, 16, version, {})
    assert [(g.group_id, g.protocol_type) for g in answer.groups] == [
        ("g", "consumer"),
        ("h", ""),
    ]
    if version >= 4:
        assert [g.group_state for g in answer.groups] == ["Stable", "Empty"]
        filtered = await call(
            groups_admin.list_groups, broker, 16, version, {"states_filter": ["empty"]}
        )
        assert [g.group_id for g in filtered.groups] == ["h"]


@pytest.mark.parametrize("version", versions(15))
async def test_describe_groups_every_version(broker: FakeBroker, version: int) -> None:
    member_id, _ = await join_stable(broker, 5)
    answer = await call(
        groups_admin.describe_groups,
        broker,
        15,
        version,
        {"groups": ["g", "ghost"], "include_authorized_operations": True},
    )
    stable, ghost = answer.groups
    if version >= 3:
        # Kafka gives the operations of a live group only (INT_MIN: not given).
        assert stable.authorized_operations != -(2**31)
        assert ghost.authorized_operations == -(2**31)
    assert (stable.error_code, stable.group_state, stable.protocol_data) == (0, "Stable", "range")
    (member,) = stable.members
    assert (member.member_id, member.client_id, member.client_host) == (
        member_id,
        "unit-client",
        "/10.0.0.9",
    )
    assert (member.member_metadata, member.member_assignment) == (b"sub", b"mine")
    assert ghost.group_state == "Dead"
    assert ghost.error_code == (E.group_id_not_found if version >= 6 else E.none)


@pytest.mark.parametrize("version", versions(42))
async def test_delete_groups_every_version(broker: FakeBroker, version: int) -> None:
    await join_stable(broker, 5)
    await call(group_offsets.offset_commit, broker, 8, 8, {**commit_data([0]), "group_id": "h"})
    answer = await call(
        groups_admin.delete_groups, broker, 42, version, {"groups_names": ["g", "h", "ghost"]}
    )
    assert [(r.group_id, r.error_code) for r in answer.results] == [
        ("g", E.non_empty_group),
        ("h", E.none),
        ("ghost", E.group_id_not_found),
    ]


# --------------------------------------------------------------------------- KIP-848 heartbeat


@pytest.mark.parametrize("version", versions(68))
async def test_consumer_heartbeat_tells_the_groups_own_heartbeat_interval(
    broker: FakeBroker, version: int
) -> None:
    # As broker/node.py wires them: the group configs are one table with the share groups'.
    broker.groups.consumer.group_timings = broker.share.configs.consumer_timings
    await broker.share.configs.alter("tuned", {"consumer.heartbeat.interval.ms": "7000"})

    async def first_heartbeat(group: str) -> Any:
        data = {
            "group_id": group,
            "member_id": str(uuid.uuid4()),
            "member_epoch": 0,
            "rebalance_timeout": 10_000,
            "subscribed_topic_names": ["orders"],
            "topic_partitions": [],
        }
        return await call(
            consumer_group_handler.consumer_group_heartbeat, broker, 68, version, data
        )

    tuned, plain = await first_heartbeat("tuned"), await first_heartbeat("plain")
    assert (tuned.error_code, tuned.heartbeat_interval) == (E.none, timedelta(seconds=7))
    assert (plain.error_code, plain.heartbeat_interval) == (E.none, timedelta(seconds=5))
