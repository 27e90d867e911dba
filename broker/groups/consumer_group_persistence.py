"""A KIP-848 consumer group as a :class:`GroupSnapshot` in the group store, so a broker
that becomes its coordinator (after a crash, a restart, a change of live brokers) goes on
with the same members, epochs, target and current assignments: no rebalance storm.

Kafka keeps the same state as records in ``__consumer_offsets`` (group epoch, target
assignment, each member's subscription and current assignment). Sluice stores it in the
classic groups' snapshot tables, without a schema change, marked by its protocol name:

- group: generation id = group epoch; ``leader_id`` holds the group-level JSON (target
  assignment epoch, the subscribed topics' metadata the epoch was computed with);
- member: the classic columns for ids, client, rebalance timeout; ``subscription``
  holds the member's JSON (subscription, rack, assignor, epochs, state, current
  assignment; for a member using the classic protocol, its session timeout and
  JoinGroup protocols), ``assignment`` its target assignment as JSON.

Written (one round trip, in order per group) after every heartbeat that changed the
group and after a member is fenced; deleted when the group becomes empty.
"""

from __future__ import annotations

import base64
import json
from typing import Any
from uuid import UUID

from broker.groups.assignors import Partitions
from broker.groups.consumer_group import (
    PROTOCOL_TYPE,
    ClassicProtocol,
    ConsumerGroup,
    ConsumerMember,
    TopicInfo,
)
from broker.groups.reconciliation import CurrentAssignment, MemberState
from storage.groups import GroupSnapshot, MemberSnapshot

# The protocol name no classic group has (client assignor names are plain words).
SNAPSHOT_MARKER = "kip848/consumer-group/v1"


def is_consumer_group(snapshot: GroupSnapshot) -> bool:
    return snapshot.protocol_name == SNAPSHOT_MARKER


def _partitions_out(partitions: Partitions) -> dict[str, list[int]]:
    return {str(t): sorted(ps) for t, ps in sorted(partitions.items(), key=lambda i: str(i[0]))}


def _partitions_in(data: dict[str, list[int]]) -> Partitions:
    return {UUID(t): frozenset(ps) for t, ps in data.items() if ps}


def snapshot_of(group: ConsumerGroup, now_ms: int) -> GroupSnapshot:
    group_data = {
        "assignment_epoch": group.assignment_epoch,
        "topics": [[i.name, str(i.topic_id), i.partitions, i.racks] for i in group.topics.values()],
    }
    members = []
    for m in group.members.values():
        c = m.current
        member_data: dict[str, Any] = {
            "rack_id": m.rack_id,
            "topics": list(m.subscribed_topic_names),
            "regex": m.subscribed_topic_regex,
            "assignor": m.server_assignor,
            "epoch": c.epoch,
            "previous_epoch": c.previous_epoch,
            "state": c.state.value,
            "assigned": _partitions_out(c.assigned),
            "revoking": _partitions_out(c.pending_revocation),
        }
        if m.classic is not None:
            # A classic member (after an upgrade): its session timeout and JoinGroup
            # protocols, to answer its SyncGroup and to downgrade the group.
            member_data["classic"] = [
                m.classic.session_timeout_ms,
                [[name, base64.b64encode(meta).decode()] for name, meta in m.classic.protocols],
            ]
        members.append(
            MemberSnapshot(
                m.member_id,
                m.instance_id,
                m.client_id,
                m.client_host,
                m.rebalance_timeout_ms,
                0,
                json.dumps(member_data).encode(),
                json.dumps(_partitions_out(group.target.get(m.member_id, {}))).encode(),
            )
        )
    return GroupSnapshot(
        group.group_id,
        group.group_epoch,
        PROTOCOL_TYPE,
        SNAPSHOT_MARKER,
        json.dumps(group_data),
        now_ms,
        now_ms,
        tuple(members),
    )


def group_from(snapshot: GroupSnapshot) -> ConsumerGroup:
    group = ConsumerGroup(snapshot.group_id)
    group.group_epoch = snapshot.generation_id
    group_data = json.loads(snapshot.leader_id)
    group.assignment_epoch = group_data["assignment_epoch"]
    # A snapshot written before rack digests has three items per topic.
    group.topics = {
        name: TopicInfo(name, UUID(topic_id), partitions, *racks)
        for name, topic_id, partitions, *racks in group_data["topics"]
    }
    for s in snapshot.members:
        data = json.loads(s.subscription)
        current = CurrentAssignment(
            data["epoch"],
            data["previous_epoch"],
            MemberState(data["state"]),
            _partitions_in(data["assigned"]),
            _partitions_in(data["revoking"]),
        )
        group.put(
            ConsumerMember(
                s.member_id,
                s.group_instance_id,
                data["rack_id"],
                s.client_id,
                s.client_host,
                s.rebalance_timeout_ms,
                tuple(data["topics"]),
                data["regex"],
                data["assignor"],
                current,
                _classic_in(data.get("classic")),
            )
        )
        group.target[s.member_id] = _partitions_in(json.loads(s.assignment))
    return group


def _classic_in(data: list[Any] | None) -> ClassicProtocol | None:
    if data is None:
        return None
    session_ms, protocols = data
    return ClassicProtocol(
        session_ms, tuple((name, base64.b64decode(meta)) for name, meta in protocols)
    )
