"""OffsetCommit, OffsetFetch (v8+: several groups), OffsetDelete.

Offsets are stored by topic id; these handlers resolve names (ids from v10 on) with
the broker's topic registry. Each request is one call of the group store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from broker.groups.offsets import FetchedGroup, OffsetToCommit, store_error
from broker.groups.service import GroupsView
from broker.security import access
from common.acl import AclOperation
from storage.catalog import Topic
from storage.coordinator import CoordinatorUnavailable
from storage.groups import CommittedOffset, OffsetKey

if TYPE_CHECKING:
    from broker.security.request_context import RequestContext
    from storage.coordinator import BatchCoordinator


class OffsetsView(GroupsView, Protocol):
    @property
    def coordinator(self) -> BatchCoordinator: ...  # offsets pending in transactions


NO_OFFSET = -1
NO_EPOCH = -1
NO_METADATA = ""


def _topic(broker: OffsetsView, entry: Any, by_id: bool) -> tuple[Topic | None, ErrorCode]:
    if by_id:
        topic = broker.topics.get_by_id(entry.topic_id)
        return topic, ErrorCode.unknown_topic_id
    return broker.topics.get(entry.name), ErrorCode.unknown_topic_or_partition


def _topic_ref(entry: Any, by_id: bool) -> dict[str, Any]:
    return {"topic_id": entry.topic_id} if by_id else {"name": entry.name}


# --------------------------------------------------------------------------- OffsetCommit


async def offset_commit(broker: OffsetsView, ctx: RequestContext, request: Any) -> Any:
    by_id = ctx.header.api_version >= 10
    to_commit: list[OffsetToCommit] = []
    # Per request partition: its answer entry, and its index in to_commit if valid.
    slots: list[tuple[dict[str, Any], int | None]] = []
    topics_out = []
    # READ on the group for the whole request, READ on each topic for its partitions.
    group_denied = not access.group(broker, ctx, AclOperation.READ, request.group_id)
    for entry in request.topics:
        topic, unknown = _topic(broker, entry, by_id)
        denied = int(ErrorCode.group_authorization_failed) if group_denied else 0
        if not denied and topic is not None:
            denied = access.topic_error(broker, ctx, AclOperation.READ, topic.name)
        elif not denied and not by_id:
            denied = access.topic_error(broker, ctx, AclOperation.READ, entry.name)
        partitions_out = []
        for p in entry.partitions:
            answer: dict[str, Any] = {"partition_index": p.partition_index, "error_code": 0}
            partitions_out.append(answer)
            if denied:
                answer["error_code"] = denied
                slots.append((answer, None))
                continue
            if topic is None or not 0 <= p.partition_index < topic.partitions:
                answer["error_code"] = int(
                    unknown if topic is None else ErrorCode.unknown_topic_or_partition
                )
                slots.append((answer, None))
                continue
            slots.append((answer, len(to_commit)))
            to_commit.append(
                OffsetToCommit(
                    OffsetKey(topic.topic_id, p.partition_index),
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", NO_EPOCH),
                    p.committed_metadata,
                )
            )
        topics_out.append({**_topic_ref(entry, by_id), "partitions": partitions_out})
    if to_commit:
        errors = await broker.groups.offsets.commit(
            request.group_id,
            request.member_id,
            getattr(request, "group_instance_id", None),
            request.generation_id_or_member_epoch,
            to_commit,
        )
        for answer, index in slots:
            if index is not None:
                answer["error_code"] = int(errors[index])
    return ctx.respond({"throttle_time": 0, "topics": topics_out})


# --------------------------------------------------------------------------- OffsetFetch


def _partition(index: int, found: CommittedOffset | None, error: int = 0) -> dict[str, Any]:
    if found is None:
        return {
            "partition_index": index,
            "committed_offset": NO_OFFSET,
            "committed_leader_epoch": NO_EPOCH,
            "metadata": NO_METADATA,
            "error_code": error,
        }
    return {
        "partition_index": index,
        "committed_offset": found.offset,
        "committed_leader_epoch": found.leader_epoch,
        "metadata": found.metadata,
        "error_code": error,
    }


def _stable(
    key: OffsetKey, found: CommittedOffset | None, unstable: set[OffsetKey]
) -> dict[str, Any]:
    """A partition's answer, or UNSTABLE_OFFSET_COMMIT (and no offset) while a transaction
    holds offsets for it: the consumer retries once the transaction ended (KIP-447)."""
    if key in unstable:
        return _partition(key.partition, None, int(ErrorCode.unstable_offset_commit))
    return _partition(key.partition, found)


class _GroupAsk:
    """One group of an OffsetFetch: what was asked, and how to answer it."""

    def __init__(
        self, broker: OffsetsView, ctx: RequestContext, group_id: str, topics: Any, by_id: bool
    ) -> None:
        self.group_id = group_id
        self.by_id = by_id
        self.all = topics is None
        # DESCRIBE on each topic, as Kafka checks (None: no authorizer, all allowed).
        self.may_describe = (
            None
            if not access.enabled(broker)
            else lambda name: access.topic(broker, ctx, AclOperation.DESCRIBE, name)
        )
        # (request topic entry, topic or None)
        self.topics: list[tuple[Any, Topic | None]] = []
        self.denied: set[int] = set()  # indexes into self.topics
        self.keys: list[OffsetKey] = []
        for entry in topics or ():
            topic, _ = _topic(broker, entry, by_id)
            name = topic.name if topic is not None else None if by_id else entry.name
            if name is not None and self.may_describe and not self.may_describe(name):
                self.denied.add(len(self.topics))
                topic = None
            self.topics.append((entry, topic))
            if topic is not None:
                self.keys.extend(OffsetKey(topic.topic_id, p) for p in entry.partition_indexes)

    def answer_topics(
        self, broker: OffsetsView, fetched: FetchedGroup, unstable: set[OffsetKey]
    ) -> list[dict[str, Any]]:
        """``unstable``: partitions with offsets pending in a transaction (require_stable)."""
        if self.all:
            by_name: dict[str, tuple[Topic, list[CommittedOffset]]] = {}
            for key, found in fetched.offsets.items():
                topic = broker.topics.get_by_id(key.topic_id)
                if topic is not None and self.may_describe and not self.may_describe(topic.name):
                    continue  # listing all: topics the caller may not describe are left out
                if topic is not None:  # else: offsets of a topic deleted a moment ago
                    by_name.setdefault(topic.name, (topic, []))[1].append(found)
            return [
                {
                    "name": topic.name,
                    "topic_id": topic.topic_id,
                    "partitions": [
                        _stable(o.key, o, unstable) for o in sorted(offs, key=lambda o: o.partition)
                    ],
                }
                for _, (topic, offs) in sorted(by_name.items())
            ]
        out = []
        for position, (entry, topic) in enumerate(self.topics):
            partitions = []
            for index in entry.partition_indexes:
                if position in self.denied:
                    denied = int(ErrorCode.topic_authorization_failed)
                    partitions.append(_partition(index, None, denied))
                elif topic is None:
                    # By name Kafka answers "no offset"; an unknown id is an error.
                    error = int(ErrorCode.unknown_topic_id) if self.by_id else 0
                    partitions.append(_partition(index, None, error))
                else:
                    key = OffsetKey(topic.topic_id, index)
                    partitions.append(_stable(key, fetched.offsets.get(key), unstable))
            out.append({**_topic_ref(entry, self.by_id), "partitions": partitions})
        return out


async def offset_fetch(broker: OffsetsView, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    by_id = version >= 10
    if version >= 8:
        asks = [_GroupAsk(broker, ctx, g.group_id, g.topics, by_id) for g in request.groups]
    else:
        asks = [_GroupAsk(broker, ctx, request.group_id, request.topics, by_id)]
    wanted: dict[str, list[OffsetKey] | None] = {}
    # DESCRIBE on the group (Kafka's check for OffsetFetch); denied groups are not fetched.
    denied_groups = {
        ask.group_id
        for ask in asks
        if not access.group(broker, ctx, AclOperation.DESCRIBE, ask.group_id)
    }
    for ask in asks:  # a group asked twice (v8+) is fetched once, for both asks
        if ask.group_id in denied_groups:
            continue
        if ask.all:
            wanted[ask.group_id] = None
        elif ask.group_id not in wanted:
            wanted[ask.group_id] = list(ask.keys)
        elif (keys := wanted[ask.group_id]) is not None:
            keys.extend(ask.keys)
    members = (
        {g.group_id: (g.member_id, g.member_epoch) for g in request.groups} if version >= 9 else {}
    )
    fetched = await broker.groups.offsets.fetch(wanted, members) if wanted else {}
    for group_id in denied_groups:
        fetched[group_id] = FetchedGroup(ErrorCode.group_authorization_failed, {})
    unstable: dict[str, set[OffsetKey]] = {}
    if getattr(request, "require_stable", False):
        stable_asked = [g for g in wanted if not fetched[g].error]
        if stable_asked:
            try:
                pending = await broker.coordinator.txn_pending_offsets(stable_asked)
            except CoordinatorUnavailable as exc:
                error = store_error(exc, "looking up pending transactional offsets")
                for group_id in stable_asked:
                    fetched[group_id] = FetchedGroup(error, {})
            else:
                unstable = {
                    g: {OffsetKey(k.topic_id, k.partition) for k in keys}
                    for g, keys in pending.items()
                }

    if version >= 8:
        groups = []
        for ask in asks:
            result = fetched[ask.group_id]
            groups.append(
                {
                    "group_id": ask.group_id,
                    "error_code": int(result.error),
                    "topics": []
                    if result.error
                    else ask.answer_topics(broker, result, unstable.get(ask.group_id, set())),
                }
            )
        return ctx.respond({"throttle_time": 0, "groups": groups})
    ask = asks[0]
    result = fetched[ask.group_id]
    if result.error and version >= 2:
        return ctx.respond({"throttle_time": 0, "error_code": int(result.error), "topics": []})
    if result.error:
        # v0-1 have no request-level error: every partition carries it.
        topics = [
            {
                "name": entry.name,
                "partitions": [
                    _partition(i, None, int(result.error)) for i in entry.partition_indexes
                ],
            }
            for entry, _ in ask.topics
        ]
        return ctx.respond({"topics": topics})
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": 0,
            "topics": ask.answer_topics(broker, result, unstable.get(ask.group_id, set())),
        }
    )


# --------------------------------------------------------------------------- OffsetDelete


async def offset_delete(broker: OffsetsView, ctx: RequestContext, request: Any) -> Any:
    if refusal := access.group_refusal(broker, ctx, AclOperation.DELETE, request.group_id):
        return refusal
    deletable: list[tuple[str, OffsetKey]] = []
    slots: list[tuple[dict[str, Any], int | None]] = []
    topics_out = []
    for entry in request.topics:
        topic = broker.topics.get(entry.name)
        partitions_out = []
        for p in entry.partitions:
            answer: dict[str, Any] = {"partition_index": p.partition_index, "error_code": 0}
            partitions_out.append(answer)
            if denied := access.topic_error(broker, ctx, AclOperation.READ, entry.name):
                answer["error_code"] = denied
                slots.append((answer, None))
                continue
            if topic is None or not 0 <= p.partition_index < topic.partitions:
                answer["error_code"] = int(ErrorCode.unknown_topic_or_partition)
                slots.append((answer, None))
                continue
            slots.append((answer, len(deletable)))
            deletable.append((entry.name, OffsetKey(topic.topic_id, p.partition_index)))
        topics_out.append({"name": entry.name, "partitions": partitions_out})
    error, errors = await broker.groups.offsets.delete(request.group_id, deletable)
    if error:
        return ctx.respond({"throttle_time": 0, "error_code": int(error), "topics": []})
    for answer, index in slots:
        if index is not None:
            answer["error_code"] = int(errors[index])
    return ctx.respond({"throttle_time": 0, "error_code": 0, "topics": topics_out})
