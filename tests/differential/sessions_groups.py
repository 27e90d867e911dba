"""Classic consumer group sessions (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit,
OffsetFetch, DescribeGroups, ListGroups, DeleteGroups, OffsetDelete): one member at a time,
each request from the one connection of the session, with the wrong generations, unknown
members and static members a client meets after a rebalance or a restart.

Groups are per broker (not per topic kind), so these sessions run against one Sluice; but
for a share group's id in these APIs (both kinds).
"""

from __future__ import annotations

import struct
from typing import Any

from .compare import code
from .sessions import session
from .side import COORDINATOR_WARMING, TXN_COORDINATOR_WARMING, Side

SESSION_TIMEOUT_MS = 30_000
REBALANCE_TIMEOUT_MS = 10_000


def subscription(*topics: str) -> bytes:
    """A consumer protocol subscription (version 0): what a consumer's JoinGroup carries."""
    out = struct.pack(">hi", 0, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    return out + struct.pack(">i", -1)  # no user data


def assignment(topic: str, partitions: list[int]) -> bytes:
    """A consumer protocol assignment (version 0) of one topic's partitions."""
    out = struct.pack(">hi", 0, 1) + struct.pack(">h", len(topic)) + topic.encode()
    out += struct.pack(">i", len(partitions)) + b"".join(struct.pack(">i", p) for p in partitions)
    return out + struct.pack(">i", -1)


def errors(tree: Any) -> list[int]:
    """Every error code in an answer, at any depth."""
    if isinstance(tree, dict):
        found = [code(v) for k, v in tree.items() if k.endswith("error_code") and v is not None]
        return found + [e for k, v in tree.items() for e in errors(v)]
    if isinstance(tree, list):
        return [e for v in tree for e in errors(v)]
    return []


def warmed(resp: Any) -> bool:
    """Not an answer a client waits out (the group coordinator loading its partition)."""
    return not set(errors(resp)) & COORDINATOR_WARMING


def find_group_coordinator(s: Side, group: str) -> None:
    s.call(
        f"find the coordinator of {group!r}",
        "find_coordinator",
        {"key_type": 0, "coordinator_keys": [group]},
        until=lambda r: all(
            code(c["error_code"]) not in COORDINATOR_WARMING for c in r["coordinators"]
        ),
    )


class Member:
    """One classic group member's requests, recorded under labels."""

    def __init__(self, s: Side, group: str, topic: str, instance_id: str | None = None) -> None:
        self.s = s
        self.group = group
        self.topic = topic
        self.instance_id = instance_id
        self.member_id = ""
        self.generation = -1

    def join(
        self, label: str, *, member_id: str | None = None, keep: bool = True, **overrides: Any
    ) -> Any:
        """JoinGroup; ``keep``: take the answer's member id and generation as this member's."""
        body = {
            "group_id": self.group,
            "session_timeout": SESSION_TIMEOUT_MS,
            "rebalance_timeout": REBALANCE_TIMEOUT_MS,
            "member_id": self.member_id if member_id is None else member_id,
            "group_instance_id": self.instance_id,
            "protocol_type": "consumer",
            "protocols": [{"name": "range", "metadata": subscription(self.topic)}],
            "reason": None,
            **overrides,
        }
        resp = self.s.call(label, "join_group", body, until=warmed)
        if keep and resp is not None and resp.get("member_id"):
            self.member_id = resp["member_id"]
            if code(resp["error_code"]) == 0:
                self.generation = resp["generation_id"]
        return resp

    def sync(
        self, label: str, *, generation: int | None = None, member_id: str | None = None
    ) -> Any:
        mid = self.member_id if member_id is None else member_id
        return self.s.call(
            label,
            "sync_group",
            {
                "group_id": self.group,
                "generation_id": self.generation if generation is None else generation,
                "member_id": mid,
                "group_instance_id": self.instance_id,
                "protocol_type": "consumer",
                "protocol_name": "range",
                "assignments": [{"member_id": mid, "assignment": assignment(self.topic, [0])}],
            },
            until=warmed,
        )

    def heartbeat(
        self, label: str, *, generation: int | None = None, member_id: str | None = None
    ) -> Any:
        return self.s.call(
            label,
            "heartbeat",
            {
                "group_id": self.group,
                "generation_id": self.generation if generation is None else generation,
                "member_id": self.member_id if member_id is None else member_id,
                "group_instance_id": self.instance_id,
            },
            until=warmed,
        )

    def commit(
        self,
        label: str,
        offset: int,
        *,
        generation: int | None = None,
        member_id: str | None = None,
        topic: str | None = None,
        partition: int = 0,
        metadata: str = "",
    ) -> Any:
        name = self.topic if topic is None else topic
        return self.s.call(
            label,
            "offset_commit",
            {
                "group_id": self.group,
                "generation_id_or_member_epoch": (
                    self.generation if generation is None else generation
                ),
                "member_id": self.member_id if member_id is None else member_id,
                "group_instance_id": self.instance_id,
                "retention_time": -1,
                "topics": [
                    {
                        "name": name,
                        "topic_id": topic_id_or_zero(self.s, name),
                        "partitions": [
                            {
                                "partition_index": partition,
                                "committed_offset": offset,
                                "committed_leader_epoch": -1,
                                "committed_metadata": metadata,
                            }
                        ],
                    }
                ],
            },
            until=warmed,
        )

    def leave(self, label: str, *, member_id: str | None = None) -> Any:
        return self.s.call(
            label,
            "leave_group",
            {
                "group_id": self.group,
                "member_id": self.member_id if member_id is None else member_id,
                "members": [
                    {
                        "member_id": self.member_id if member_id is None else member_id,
                        "group_instance_id": self.instance_id,
                        "reason": None,
                    }
                ],
            },
            until=warmed,
        )


def topic_id_or_zero(s: Side, name: str) -> str:
    (topic,) = s.metadata([name])["topics"]
    return str(topic["topic_id"]) if code(topic["error_code"]) == 0 else str(ZERO_UUID)


ZERO_UUID = "00000000-0000-0000-0000-000000000000"


def offset_fetch(
    s: Side,
    label: str,
    group: str,
    topic: str | None,
    partitions: list[int],
    require_stable: bool = False,
    until: Any = None,
) -> Any:
    topics = (
        None
        if topic is None
        else [
            {"name": topic, "topic_id": topic_id_or_zero(s, topic), "partition_indexes": partitions}
        ]
    )
    return s.call(
        label,
        "offset_fetch",
        {
            "groups": [
                {"group_id": group, "member_id": None, "member_epoch": -1, "topics": topics}
            ],
            "require_stable": require_stable,
        },
        until=until,
    )


def describe_groups(s: Side, label: str, *groups: str) -> Any:
    return s.call(
        label,
        "describe_groups",
        {"groups": list(groups), "include_authorized_operations": True},
    )


def list_groups(s: Side, label: str, states: list[str], types: list[str] | None = None) -> Any:
    resp = s.call(label, "list_groups", {"states_filter": states, "types_filter": types or []})
    return resp


@session(kind_free=True)
def s_group_classic(s: Side) -> None:
    """One dynamic member through a generation, with the wrong generations and members a
    client meets; its offsets; then it leaves."""
    t = "group-classic"
    s.create_topic(t)
    g = "diff-group-classic"
    find_group_coordinator(s, g)
    m = Member(s, g, t)
    m.join("join with an empty group id", member_id="", keep=False, group_id="")
    m.join(
        "join with a session timeout below the minimum",
        member_id="",
        keep=False,
        session_timeout=1000,
    )
    m.join("join with no protocols", member_id="", keep=False, protocols=[])
    m.join("join without a member id (member id required)")
    m.join("join with the member id given")
    m.join("join with an unknown member id", member_id="unknown-member-id", keep=False)
    m.sync("sync with a generation from the future", generation=m.generation + 5)
    m.sync("sync with an unknown member id", member_id="unknown-member-id")
    m.sync("sync")
    m.heartbeat("heartbeat")
    m.heartbeat("heartbeat with an old generation", generation=m.generation - 1)
    m.heartbeat("heartbeat with an unknown member id", member_id="unknown-member-id")
    m.commit("commit offset 3", 3)
    m.commit("commit with a wrong generation", 4, generation=m.generation + 1)
    m.commit("commit with an unknown member id", 4, member_id="unknown-member-id")
    m.commit("commit as a non-member (generation -1, no member id)", 4, generation=-1, member_id="")
    m.commit("commit to an unknown partition", 4, partition=7)
    m.commit("commit metadata over offset.metadata.max.bytes", 4, metadata="m" * 5000)
    m.commit("commit offset -1", -1)
    offset_fetch(s, "fetch the committed offset", g, t, [0])
    offset_fetch(s, "fetch an uncommitted and an unknown partition", g, t, [1, 9])
    offset_fetch(s, "fetch all topics", g, None, [])
    offset_fetch(s, "fetch of an unknown group", "diff-group-unknown", t, [0])
    describe_groups(s, "describe the stable group and an unknown one", g, "diff-group-unknown")
    list_groups(s, "list stable groups", ["Stable"])
    list_groups(s, "list with an unknown state filter", ["NoSuchState"])
    list_groups(s, "list classic groups by type", ["Stable"], ["classic"])
    s.call("delete the non-empty group", "delete_groups", {"groups_names": [g]})

    def offset_delete(label: str, group: str, topic: str) -> None:
        s.call(
            label,
            "offset_delete",
            {
                "group_id": group,
                "topics": [{"name": topic, "partitions": [{"partition_index": 0}]}],
            },
        )

    offset_delete("offset delete of a subscribed topic", g, t)
    offset_delete("offset delete of an unknown group", "diff-group-unknown", t)
    m.leave("leave with an unknown member id", member_id="unknown-member-id")
    m.leave("leave")
    m.heartbeat("heartbeat after leaving")
    describe_groups(s, "describe the empty group", g)
    list_groups(s, "list empty groups", ["Empty"])
    offset_fetch(s, "fetch after leaving", g, t, [0])
    offset_delete("offset delete in the empty group", g, t)
    offset_fetch(s, "fetch after the offset delete", g, t, [0])
    s.call(
        "delete the empty group and an unknown one",
        "delete_groups",
        {"groups_names": [g, "diff-group-unknown"]},
    )
    describe_groups(s, "describe after the delete", g)


@session(kind_free=True)
def s_group_static(s: Side) -> None:
    """A static member (group.instance.id, KIP-345): joins without a member id, restarts
    (rejoins with the same instance id) and so fences its old member id."""
    t = "group-static"
    s.create_topic(t)
    g = "diff-group-static"
    find_group_coordinator(s, g)
    m = Member(s, g, t, instance_id="instance-1")
    m.join("static join without a member id")
    m.sync("sync")
    old = m.member_id
    m.join("the same instance rejoins without a member id (restart)", member_id="")
    new = m.member_id
    m.heartbeat("heartbeat with the old member id", member_id=old)
    m.sync("sync with the old member id", member_id=old)
    m.commit("commit with the old member id", 1, member_id=old)
    m.heartbeat("heartbeat with the new member id", member_id=new)
    m.commit("commit with the new member id", 1, member_id=new)
    describe_groups(s, "describe", g)
    s.call("delete the group with a static member", "delete_groups", {"groups_names": [g]})
    m.leave("leave with the old member id", member_id=old)
    m.leave("leave")
    describe_groups(s, "describe after leaving", g)


@session()
def s_share_group_offsets(s: Side) -> None:
    """A share group's id in the consumer-group APIs: Kafka refuses OffsetCommit and
    OffsetDelete on it with GROUP_ID_NOT_FOUND and an OffsetFetch finds nothing (a share
    group keeps its position in its share-partitions' state, not in committed offsets)."""
    t = "share-offsets-topic"
    s.create_topic(t)
    topic_id = s.topic_id(t)
    group = "share-offsets-group"
    find_group_coordinator(s, group)
    s.call(
        "a share member joins",
        "share_group_heartbeat",
        {
            "group_id": group,
            "member_id": "share-member-1",
            "member_epoch": 0,
            "rack_id": None,
            "subscribed_topic_names": [t],
        },
        until=lambda r: code(r["error_code"]) not in TXN_COORDINATOR_WARMING,
    )
    partition = {"partition_index": 0, "committed_offset": 1, "committed_leader_epoch": -1}
    s.call(
        "commit an offset in the share group's id",
        "offset_commit",
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "retention_time_ms": -1,
            "topics": [
                {
                    "name": t,
                    "topic_id": topic_id,
                    "partitions": [{**partition, "committed_metadata": ""}],
                }
            ],
        },
    )
    s.call(
        "fetch the share group's committed offsets",
        "offset_fetch",
        {
            "groups": [
                {
                    "group_id": group,
                    "member_id": None,
                    "member_epoch": -1,
                    "topics": [{"name": t, "topic_id": topic_id, "partition_indexes": [0]}],
                }
            ],
            "require_stable": False,
        },
    )
    s.call(
        "delete the share group's offsets",
        "offset_delete",
        {"group_id": group, "topics": [{"name": t, "partitions": [{"partition_index": 0}]}]},
    )
    s.call(
        "fetch all of the share group's committed offsets",
        "offset_fetch",
        {
            "groups": [{"group_id": group, "member_id": None, "member_epoch": -1, "topics": None}],
            "require_stable": False,
        },
    )
    s.call(
        "describe the share group as a classic group",
        "describe_groups",
        {"groups": [group], "include_authorized_operations": False},
    )
    s.call(
        "describe the share group as a consumer group",
        "consumer_group_describe",
        {"group_ids": [group], "include_authorized_operations": False},
    )
    s.call(
        "a consumer heartbeat in the share group's id",
        "consumer_group_heartbeat",
        {
            "group_id": group,
            "member_id": "consumer-member-1",
            "member_epoch": 0,
            "instance_id": None,
            "rack_id": None,
            "rebalance_timeout": 30_000,
            "subscribed_topic_names": [t],
            "subscribed_topic_regex": None,
            "server_assignor": None,
            "topic_partitions": [],
        },
    )
    s.call(
        "a classic join in the share group's id",
        "join_group",
        {
            "group_id": group,
            "session_timeout": 30_000,
            "rebalance_timeout": 30_000,
            "member_id": "",
            "group_instance_id": None,
            "protocol_type": "consumer",
            "protocols": [
                {"name": "range", "metadata": b"\x00\x00\x00\x00\x00\x00\xff\xff\xff\xff"}
            ],
            "reason": None,
        },
    )
    s.call(
        "the share member leaves",
        "share_group_heartbeat",
        {
            "group_id": group,
            "member_id": "share-member-1",
            "member_epoch": -1,
            "rack_id": None,
            "subscribed_topic_names": None,
        },
    )
