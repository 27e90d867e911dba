"""A share group's membership as JSON in the share store (``share_groups`` table): what a
broker that becomes the group's coordinator (after a crash, a restart, a change of live
brokers) starts from, so the members go on with their ids, epochs and assignments.

Kafka keeps the same state as records in ``__consumer_offsets``: ShareGroupMetadata
(the group epoch), ShareGroupMemberMetadata (each member's client, rack and
subscription), the target assignment (its epoch, each member's partitions) and
ShareGroupCurrentMemberAssignment (each member's epoch and what it was told). Here:

- group: ``epoch``, ``assignment_epoch``, ``topics`` (the subscribed topics' ids and
  partition counts the target was computed with), ``initialized`` (how many partitions of
  each topic are initialized for the group: Kafka's ShareGroupStatePartitionMetadata);
- members, in join order: ids, client, rack, subscription, ``epoch``, ``assignment``
  (the target) and ``sent`` (the last assignment the member was answered: the current).

Session deadlines are not stored: a loaded member's session starts when it is loaded,
as Kafka starts the timers of a group it loads.
"""

from __future__ import annotations

import json
from typing import Any
from uuid import UUID

from broker.groups.share.assignor import Assignment
from broker.groups.share.membership import ShareGroup, ShareMember


def _out(assignment: Assignment | None) -> dict[str, list[int]] | None:
    if assignment is None:
        return None
    return {str(t): sorted(p) for t, p in sorted(assignment.items(), key=lambda i: str(i[0]))}


def _in(data: dict[str, list[int]] | None) -> Assignment | None:
    if data is None:
        return None
    return {UUID(t): list(p) for t, p in data.items()}


def membership_of(group: ShareGroup) -> str:
    """The group's membership as stored (the same text for the same membership)."""
    return json.dumps(
        {
            "epoch": group.epoch,
            "assignment_epoch": group.assignment_epoch,
            "topics": [[name, str(tid), count] for name, tid, count in group.topics_seen],
            "initialized": [[str(tid), count] for tid, count in group.initialized.items()],
            "members": [
                {
                    "id": m.member_id,
                    "rack": m.rack_id,
                    "client_id": m.client_id,
                    "client_host": m.client_host,
                    "topics": list(m.subscribed),
                    "epoch": m.epoch,
                    "assignment": _out(m.assignment),
                    "sent": _out(m.sent),
                }
                for m in group.members.values()
            ],
        },
        separators=(",", ":"),
    )


def group_from(group_id: str, text: str, deadline_ms: int) -> ShareGroup:
    """The stored group, every member's session running until ``deadline_ms``."""
    data: dict[str, Any] = json.loads(text)
    group = ShareGroup(group_id, data["epoch"], data["assignment_epoch"])
    group.topics_seen = tuple((name, UUID(tid), count) for name, tid, count in data["topics"])
    if "initialized" in data:
        group.initialized = {UUID(tid): count for tid, count in data["initialized"]}
    else:
        # Stored before partitions were initialized: every partition seen was assignable.
        group.initialized = {tid: count for _, tid, count in group.topics_seen}
    for m in data["members"]:
        group.members[m["id"]] = ShareMember(
            m["id"],
            m["rack"],
            m["client_id"],
            m["client_host"],
            tuple(m["topics"]),
            m["epoch"],
            _in(m["assignment"]) or {},
            _in(m["sent"]),
            deadline_ms,
        )
    return group
