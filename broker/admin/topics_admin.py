"""CreateTopics, DeleteTopics, CreatePartitions."""

from __future__ import annotations

import datetime
import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.metadata.controller_client import ControllerRefused
from broker.metadata.topics import InvalidPartitions, InvalidTopic
from broker.metadata.view import HandlerView
from broker.security import access
from common import topic_config_keys
from common.acl import AclOperation
from common.topic_config_validation import InvalidConfig
from storage.catalog import TopicExists, TopicNotFound

if TYPE_CHECKING:
    from broker.groups.service import GroupService
    from broker.security.request_context import RequestContext


class TopicsAdminView(HandlerView, Protocol):
    @property
    def groups(self) -> GroupService: ...  # a deleted topic's committed offsets go too


CONFIG_SOURCE_DYNAMIC_TOPIC = 1
CONFIG_SOURCE_DEFAULT = 5
MANUAL_ASSIGNMENTS = "Manual partition assignments are not supported: placement is managed"


def _replication_error(broker: TopicsAdminView, factor: int, assignments: Any) -> str | None:
    # Diskless topics have a managed replication factor: -1 or 1 mean "managed".
    if assignments:
        return MANUAL_ASSIGNMENTS
    if factor not in (-1, 1):
        return (
            f"Replication factor {factor} is not supported: the object store replicates "
            "the data; use -1 or 1"
        )
    return None


def _extra(name: str) -> bool:
    key = topic_config_keys.KEYS.get(name)
    return key is not None and key.extra


# Kafka's controller runs a CreateTopics, CreatePartitions or DeleteTopics with the request's
# timeout as its deadline (ControllerApis: requestTimeoutMsToDeadlineNs). At 0 or less the
# deadline has passed when the controller takes it up: the request fails as a whole, every
# topic as given answered REQUEST_TIMED_OUT (the requests' getErrorResponse, no message) and
# nothing made, whenever the controller has anything to do at all (a topic left once
# duplicates and refused ones are set aside). The differential's create_timeout_zero and
# delete_topics_timeout_zero sessions compare it with Kafka 4.x.
_METADATA_TOPIC = "__cluster_metadata"


def _timed_out(timeout: datetime.timedelta) -> bool:
    return timeout.total_seconds() <= 0


async def create_topics(broker: TopicsAdminView, ctx: RequestContext, request: Any) -> Any:
    validate_only = getattr(request, "validate_only", False)
    results = []
    # CREATE on the cluster allows every topic; otherwise CREATE on each (Kafka's rule).
    create_any = access.cluster(broker, ctx, AclOperation.CREATE)
    # A name given twice creates nothing: one answer for it, INVALID_REQUEST (Kafka's).
    counts = Counter(item.name for item in request.topics)
    if _timed_out(request.timeout) and any(
        n == 1
        and name != _METADATA_TOPIC
        and (create_any or access.topic(broker, ctx, AclOperation.CREATE, name))
        for name, n in counts.items()
    ):
        return ctx.respond(
            {
                "throttle_time": 0,
                "topics": [
                    {
                        "name": item.name,
                        "topic_id": None,
                        "error_code": int(ErrorCode.request_timed_out),
                        "error_message": None,
                        "num_partitions": -1,
                        "replication_factor": -1,
                        "configs": [],
                    }
                    for item in request.topics
                ],
            }
        )
    duplicates_answered: set[str] = set()
    for item in request.topics:
        if counts[item.name] > 1:
            if item.name not in duplicates_answered:
                duplicates_answered.add(item.name)
                results.append(
                    {
                        "name": item.name,
                        "topic_id": None,
                        "error_code": int(ErrorCode.invalid_request),
                        "error_message": "Duplicate topic name.",
                        "num_partitions": -1,
                        "replication_factor": -1,
                        "configs": [],
                    }
                )
            continue
        entry: dict[str, Any] = {
            "name": item.name,
            "topic_id": None,
            "error_code": 0,
            "error_message": None,
            "num_partitions": -1,
            "replication_factor": -1,
            "configs": [],
        }
        results.append(entry)
        if not create_any and not access.topic(broker, ctx, AclOperation.CREATE, item.name):
            entry.update(error_code=int(ErrorCode.topic_authorization_failed))
            continue
        # In controller mode the controller decides about the replication factor.
        controller_mode = broker.controller is not None
        reason = (
            None
            if controller_mode
            else _replication_error(broker, item.replication_factor, item.assignments)
        )
        if reason is not None:
            code = (
                ErrorCode.invalid_request
                if item.assignments
                else ErrorCode.invalid_replication_factor
            )
            entry.update(error_code=int(code), error_message=reason)
            continue
        configs = {c.name: c.value for c in item.configs}
        try:
            topic = await broker.topics.create(
                item.name,
                item.num_partitions,
                configs,
                validate_only=validate_only,
                replication_factor=item.replication_factor,
                assignments={a.partition_index: list(a.broker_ids) for a in item.assignments}
                or None,
            )
        except ControllerRefused as exc:
            entry.update(error_code=int(exc.code), error_message=exc.message)
            continue
        except TopicExists:
            entry.update(
                error_code=int(ErrorCode.topic_already_exists),
                error_message=f"Topic '{item.name}' already exists.",
            )
            continue
        except InvalidTopic as exc:
            entry.update(error_code=int(ErrorCode.invalid_topic_exception), error_message=str(exc))
            continue
        except InvalidPartitions as exc:
            entry.update(error_code=int(ErrorCode.invalid_partitions), error_message=str(exc))
            continue
        except InvalidConfig as exc:
            entry.update(error_code=int(ErrorCode.invalid_config), error_message=str(exc))
            continue
        if not access.topic(broker, ctx, AclOperation.DESCRIBE_CONFIGS, item.name):
            # Created, but its configs are not the caller's to see (Kafka, KIP-525).
            entry.update(
                topic_id=topic.topic_id,
                num_partitions=topic.partitions,
                replication_factor=broker.replication_factor(topic),
                topic_config_error_code=int(ErrorCode.topic_authorization_failed),
            )
            continue
        entry.update(
            topic_id=topic.topic_id,
            num_partitions=topic.partitions,
            replication_factor=broker.replication_factor(topic),
            configs=[
                {
                    "name": name,
                    "value": value,
                    "read_only": False,
                    "config_source": CONFIG_SOURCE_DYNAMIC_TOPIC
                    if name in topic.configs
                    else CONFIG_SOURCE_DEFAULT,
                    "is_sensitive": False,
                }
                for name, value in sorted(broker.topics.config(topic).items())
                # Keys that are not Kafka's are answered only where set (as DescribeConfigs).
                if name in topic.configs or not _extra(name)
            ],
        )
    return ctx.respond({"throttle_time": 0, "topics": results})


def _looks_up_topics(wanted: list[tuple[str | None, UUID | None]]) -> bool:
    """Whether Kafka's controller looks any topic of a DeleteTopics up (ControllerApis
    .deleteTopics): a name or an id given once. A name given with an id, an entry with
    neither, and a name or id given twice are answered INVALID_REQUEST without one."""
    names = Counter(name for name, topic_id in wanted if name is not None and not topic_id)
    ids = Counter(topic_id for name, topic_id in wanted if name is None and topic_id)
    return any(n == 1 for n in names.values()) or any(n == 1 for n in ids.values())


async def delete_topics(broker: TopicsAdminView, ctx: RequestContext, request: Any) -> Any:
    if ctx.header.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    if _timed_out(request.timeout) and _looks_up_topics(wanted):
        # The lookup of the topics fails with the deadline (above), and with it the whole
        # request, before anything is deleted or any authorization or unknown topic is
        # answered.
        return ctx.respond(
            {
                "throttle_time": 0,
                "responses": [
                    {
                        "name": name,
                        "topic_id": topic_id,
                        "error_code": int(ErrorCode.request_timed_out),
                        "error_message": None,
                    }
                    for name, topic_id in wanted
                ],
            }
        )
    responses = []
    await broker.topics.ensure((name or topic_id, None) for name, topic_id in wanted)
    for name, topic_id in wanted:
        by_id = name is None and topic_id is not None
        if by_id:
            topic = broker.topics.get_by_id(topic_id)
            name = topic.name if topic else None
        entry: dict[str, Any] = {"name": name, "topic_id": topic_id, "error_code": 0}
        responses.append(entry)
        if name is None:
            entry["error_code"] = int(ErrorCode.unknown_topic_id)
            continue
        if by_id and not access.topic(broker, ctx, AclOperation.DESCRIBE, name):
            # As Kafka: a caller that may not describe the topic does not learn its name.
            entry.update(name=None, error_code=int(ErrorCode.topic_authorization_failed))
            continue
        if denied := access.topic_error(broker, ctx, AclOperation.DELETE, name):
            entry["error_code"] = denied
            continue
        try:
            topic = await broker.topics.delete(name, int(time.time() * 1000))
            entry["topic_id"] = topic.topic_id
            await broker.groups.offsets.topics_deleted([topic.topic_id])
            await broker.share.topics_deleted([topic.topic_id])  # type: ignore[attr-defined]
        except TopicNotFound:
            entry["error_code"] = int(ErrorCode.unknown_topic_or_partition)
            entry["error_message"] = "This server does not host this topic-partition."
        except ControllerRefused as exc:
            entry["error_code"] = int(exc.code)
            entry["error_message"] = exc.message
    return ctx.respond({"throttle_time": 0, "responses": responses})


async def create_partitions(broker: TopicsAdminView, ctx: RequestContext, request: Any) -> Any:
    counts = Counter(item.name for item in request.topics)
    if _timed_out(request.timeout) and any(
        n == 1 and access.topic(broker, ctx, AclOperation.ALTER, name) for name, n in counts.items()
    ):
        return ctx.respond(
            {
                "throttle_time": 0,
                "results": [
                    {
                        "name": item.name,
                        "error_code": int(ErrorCode.request_timed_out),
                        "error_message": None,
                    }
                    for item in request.topics
                ],
            }
        )
    results = []
    # A name given twice: one answer for it, INVALID_REQUEST, nothing done (Kafka's).
    duplicated = sorted(name for name, n in counts.items() if n > 1)
    results += [
        {
            "name": name,
            "error_code": int(ErrorCode.invalid_request),
            "error_message": "Duplicate topic name.",
        }
        for name in duplicated
    ]
    for item in request.topics:
        if counts[item.name] > 1:
            continue
        entry: dict[str, Any] = {"name": item.name, "error_code": 0, "error_message": None}
        results.append(entry)
        if denied := access.topic_error(broker, ctx, AclOperation.ALTER, item.name):
            entry["error_code"] = denied
            continue
        controller_mode = broker.controller is not None
        if item.assignments and not controller_mode:
            entry.update(
                error_code=int(ErrorCode.invalid_request),
                error_message=MANUAL_ASSIGNMENTS,
            )
            continue
        try:
            await broker.topics.add_partitions(
                item.name,
                item.count,
                request.validate_only,
                [list(a.broker_ids) for a in item.assignments] if item.assignments else None,
            )
        except ControllerRefused as exc:
            entry.update(error_code=int(exc.code), error_message=exc.message)
        except TopicNotFound:
            entry.update(
                error_code=int(ErrorCode.unknown_topic_or_partition),
                error_message=f"Topic '{item.name}' does not exist.",
            )
        except InvalidPartitions as exc:
            entry.update(error_code=int(ErrorCode.invalid_partitions), error_message=str(exc))
    return ctx.respond({"throttle_time": 0, "results": results})
