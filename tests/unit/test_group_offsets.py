"""Committed offsets and the admin views on top of the state machine and a real store.

The store is SQLite in a temp dir (the backends' own behaviour is the contract suite's);
the clock is manual, so expiry is checked without waiting.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from pathlib import Path
from uuid import UUID

import pytest
from kio.schema.errors import ErrorCode

from broker.groups.group import JoinResult
from broker.groups.group_coordinator import LeavingMember
from broker.groups.held_groups import GroupConfig
from broker.groups.offsets import OffsetToCommit
from broker.groups.service import GroupService
from storage.coordinator import CoordinatorUnavailable
from storage.groups import CommittedOffset, GroupStore, OffsetKey
from storage.groups.sqlite import SqliteGroupStore
from tests.fixtures.group_services import Cluster, ManualClock

from .test_group_coordinator import new_member, sync

E = ErrorCode
T1 = UUID(int=1)
T2 = UUID(int=2)
RETENTION_MS = 60_000


def subscription(*topics: str) -> bytes:
    out = (0).to_bytes(2, "big") + len(topics).to_bytes(4, "big")
    for t in topics:
        out += len(t).to_bytes(2, "big") + t.encode()
    return out + b"\xff\xff\xff\xff"


@pytest.fixture
async def groups(tmp_path: Path, clock: ManualClock) -> AsyncIterator[GroupService]:
    service = GroupService(
        1,
        Cluster(1),
        GroupConfig(
            initial_rebalance_delay_ms=0,
            min_session_timeout_ms=1000,
            offsets_retention_ms=RETENTION_MS,
            offset_metadata_max_bytes=10,
        ),
        SqliteGroupStore(str(tmp_path / "coordinator.db")),
        clock,
        clock.wall_ms,
    )
    await service.start()
    try:
        yield service
    finally:
        await service.close()


def commit_item(
    topic: UUID = T1, partition: int = 0, offset: int = 5, metadata: str | None = None
) -> OffsetToCommit:
    return OffsetToCommit(OffsetKey(topic, partition), offset, 3, metadata)


async def committed(groups: GroupService, group_id: str) -> dict[OffsetKey, int]:
    fetched = (await groups.offsets.fetch({group_id: None}))[group_id]
    assert fetched.error == E.none
    return {k: o.offset for k, o in fetched.offsets.items()}


async def stable_member(
    groups: GroupService, clock: ManualClock, topics: Sequence[str] = ("t1",)
) -> JoinResult:
    joined = new_member(groups.coordinator, protocols=[("range", subscription(*topics))])
    clock.advance(0)
    result = joined.result()
    # Answered once the membership snapshot is stored.
    assert (await sync(groups.coordinator, result, {result.member_id: b"x"})).error == E.none
    return result


# --------------------------------------------------------------------------- commit/fetch


async def test_simple_consumers_commit_and_fetch(groups: GroupService) -> None:
    errors = await groups.offsets.commit(
        "g", "", None, -1, [commit_item(T1, 0, 5, "m"), commit_item(T1, 1, 7)]
    )
    assert errors == [E.none, E.none]
    fetched = (await groups.offsets.fetch({"g": [OffsetKey(T1, 0), OffsetKey(T1, 9)]}))["g"]
    stored = fetched.offsets[OffsetKey(T1, 0)]
    assert (stored.offset, stored.leader_epoch, stored.metadata) == (5, 3, "m")
    assert OffsetKey(T1, 9) not in fetched.offsets


async def test_members_commit_with_their_generation(
    groups: GroupService, clock: ManualClock
) -> None:
    member = await stable_member(groups, clock)
    ok = await groups.offsets.commit("g", member.member_id, None, 1, [commit_item()])
    assert ok == [E.none]
    stale = await groups.offsets.commit("g", member.member_id, None, 0, [commit_item()])
    assert stale == [E.illegal_generation]
    outsider = await groups.offsets.commit("g", "", None, -1, [commit_item()])
    assert outsider == [E.unknown_member_id]


async def test_oversized_metadata_is_refused_per_partition(groups: GroupService) -> None:
    errors = await groups.offsets.commit(
        "g", "", None, -1, [commit_item(T1, 0, 1, "x" * 11), commit_item(T1, 1, 2, "x" * 10)]
    )
    assert errors == [E.offset_metadata_too_large, E.none]
    assert await committed(groups, "g") == {OffsetKey(T1, 1): 2}


class FailingStore(SqliteGroupStore):
    async def commit_offsets(self, group_id: str, offsets: Sequence[CommittedOffset]) -> None:
        raise CoordinatorUnavailable("down")

    async def fetch_offsets(
        self, requests: Mapping[str, Sequence[OffsetKey] | None]
    ) -> dict[str, list[CommittedOffset]]:
        raise CoordinatorUnavailable("down")


async def test_an_unavailable_store_is_a_retriable_error(tmp_path: Path) -> None:
    store: GroupStore = FailingStore(str(tmp_path / "c.db"))
    service = GroupService(1, Cluster(1), GroupConfig(), store)
    await service.start()
    try:
        assert await service.offsets.commit("g", "", None, -1, [commit_item()]) == [
            E.coordinator_not_available
        ]
        fetched = await service.offsets.fetch({"g": None})
        assert fetched["g"].error == E.coordinator_not_available
    finally:
        await service.close()


async def test_groups_of_other_brokers_answer_not_coordinator(tmp_path: Path) -> None:
    service = GroupService(1, Cluster(2), GroupConfig(), SqliteGroupStore(str(tmp_path / "c.db")))
    await service.start()
    try:
        assert await service.offsets.commit("g", "", None, -1, [commit_item()]) == [
            E.not_coordinator
        ]
        assert (await service.offsets.fetch({"g": None}))["g"].error == E.not_coordinator
        assert await service.admin.delete_groups(["g"]) == [("g", E.not_coordinator)]
        assert (await service.admin.describe_groups(["g"]))[0]["error_code"] == E.not_coordinator
    finally:
        await service.close()


# --------------------------------------------------------------------------- expiry


async def test_offsets_of_groups_without_members_expire(
    groups: GroupService, clock: ManualClock
) -> None:
    await groups.offsets.commit("simple", "", None, -1, [commit_item(T1, 0)])
    clock.advance(RETENTION_MS / 2)
    await groups.offsets.commit("simple", "", None, -1, [commit_item(T1, 1)])
    clock.advance(RETENTION_MS / 2 + 1)
    assert await groups.offsets.expire() == 1
    assert await committed(groups, "simple") == {OffsetKey(T1, 1): 5}


async def test_offsets_of_active_groups_do_not_expire(
    groups: GroupService, clock: ManualClock
) -> None:
    member = await stable_member(groups, clock)
    await groups.offsets.commit("g", member.member_id, None, 1, [commit_item()])
    for _ in range(2 * RETENTION_MS // 5000):  # twice the retention, heartbeating
        clock.advance(5000)
        assert groups.coordinator.heartbeat("g", member.member_id, None, 1) == E.none
    assert await groups.offsets.expire() == 0
    # Once everyone left, retention counts from then.
    groups.coordinator.leave_group("g", [_leaving(member.member_id)])
    clock.advance(RETENTION_MS - 1)
    assert await groups.offsets.expire() == 0
    clock.advance(2)
    assert await groups.offsets.expire() == 1
    assert "g" not in groups.coordinator.groups  # nothing left of it


def _leaving(member_id: str) -> LeavingMember:
    return LeavingMember(member_id, None)


# --------------------------------------------------------------------------- OffsetDelete


async def test_offset_delete_refuses_topics_the_group_consumes(
    groups: GroupService, clock: ManualClock
) -> None:
    member = await stable_member(groups, clock, topics=["t1"])
    await groups.offsets.commit(
        "g", member.member_id, None, 1, [commit_item(T1, 0), commit_item(T2, 0)]
    )
    error, errors = await groups.offsets.delete(
        "g", [("t1", OffsetKey(T1, 0)), ("t2", OffsetKey(T2, 0))]
    )
    assert (error, errors) == (E.none, [E.group_subscribed_to_topic, E.none])
    assert await committed(groups, "g") == {OffsetKey(T1, 0): 5}


async def test_offset_delete_of_unknown_group(groups: GroupService) -> None:
    assert await groups.offsets.delete("nope", [("t1", OffsetKey(T1, 0))]) == (
        E.group_id_not_found,
        [],
    )
    assert (await groups.offsets.delete("", []))[0] == E.invalid_group_id


# --------------------------------------------------------------------------- admin


async def test_list_and_describe_show_members_and_stored_groups(
    groups: GroupService, clock: ManualClock
) -> None:
    member = await stable_member(groups, clock)
    await groups.offsets.commit("stored-only", "", None, -1, [commit_item()])
    error, listed = await groups.admin.list_groups((), ())
    assert error == E.none
    assert [(g["group_id"], g["group_state"], g["protocol_type"]) for g in listed] == [
        ("g", "Stable", "consumer"),
        ("stored-only", "Empty", ""),
    ]
    _, stable_only = await groups.admin.list_groups(["STABLE"], [])
    assert [g["group_id"] for g in stable_only] == ["g"]
    _, no_consumer_type = await groups.admin.list_groups([], ["consumer"])
    assert no_consumer_type == []  # every group here is a classic group

    described = await groups.admin.describe_groups(["g", "stored-only", "ghost", "g"])
    assert [d["group_state"] for d in described] == ["Stable", "Empty", "Dead", "Stable"]
    assert [d["error_code"] for d in described] == [0, 0, E.group_id_not_found, 0]
    assert [m["member_id"] for m in described[0]["members"]] == [member.member_id]
    assert described[0]["members"][0]["member_assignment"] == b"x"


async def test_delete_groups(groups: GroupService, clock: ManualClock) -> None:
    await stable_member(groups, clock)
    await groups.offsets.commit("old", "", None, -1, [commit_item()])
    results = await groups.admin.delete_groups(["g", "old", "ghost"])
    assert results == [
        ("g", E.non_empty_group),
        ("old", E.none),
        ("ghost", E.group_id_not_found),
    ]
    assert await committed(groups, "old") == {}


async def test_deleted_topics_take_their_offsets_along(groups: GroupService) -> None:
    await groups.offsets.commit("g", "", None, -1, [commit_item(T1, 0), commit_item(T2, 0)])
    await groups.offsets.topics_deleted([T1])
    assert await committed(groups, "g") == {OffsetKey(T2, 0): 5}


async def test_empty_groups_without_offsets_are_forgotten(
    groups: GroupService, clock: ManualClock
) -> None:
    member = await stable_member(groups, clock)
    await groups.offsets.commit("g", member.member_id, None, 1, [commit_item()])
    groups.coordinator.leave_group("g", [_leaving(member.member_id)])
    joined_only = new_member(groups.coordinator, group="never-committed")
    clock.advance(0)
    sync(groups.coordinator, joined_only.result(), {}, group="never-committed")
    groups.coordinator.leave_group("never-committed", [_leaving(joined_only.result().member_id)])
    await groups.offsets.expire()
    # The group with offsets stays (for its retention); the other one is gone.
    assert "g" in groups.coordinator.groups
    assert "never-committed" not in groups.coordinator.groups
