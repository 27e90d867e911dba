"""Produce: validate batch headers, hand partitions to the appender, answer after
the commit (acks 1/all) or never (acks 0)."""

from __future__ import annotations

import asyncio
import time
from typing import TYPE_CHECKING, Any, Protocol
from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.logs.classic.txn_verification import Verification, verify_transaction
from broker.logs.partition_log import AppendPlan, PartitionResult
from broker.logs.router import Purpose
from broker.metadata.client_az import az_from_client_id
from broker.produce import implicit_add, recompress
from broker.security import access
from broker.security.principal import user_of
from broker.server.client_quotas import throttle_connection
from broker.server.refusals import REFUSALS
from common.acl import AclOperation
from protocol.batch_validation import Rules, validate_records
from protocol.codec import EncodedResponse
from protocol.compression import CODEC_MASK, ZSTD
from protocol.produce_response import PartitionAnswer, encode_produce_response
from protocol.records import BatchHeader, InvalidRecords, parse_batches
from storage.catalog import Topic
from storage.partition_key import PartitionKey

if TYPE_CHECKING:
    from broker.logs.diskless.diskless_append import Appender
    from broker.metadata.client_az import ClientBytes
    from broker.metadata.topics import TopicRegistry
    from broker.security.request_context import RequestContext
    from broker.server.client_quotas import ClientQuotas


class ProduceView(implicit_add.ImplicitAddView, Protocol):
    # transactions (from ImplicitAddView): KIP-890 verification and part 2's implicit add
    @property
    def quotas(self) -> ClientQuotas: ...

    @property
    def appender(self) -> Appender: ...  # the diskless partitions' appends, once a request

    @property
    def client_bytes(self) -> ClientBytes: ...  # the request's record bytes, by client AZ


VALID_ACKS = (-1, 0, 1)
# Per partition, in request order: topic, index, its AppendPlan slot (an immediate result,
# or where its result will be), the error message, the record errors (ProduceResponse v8+).
_Slot = tuple[str, int, PartitionResult | int, str | None, tuple[tuple[int, str | None], ...]]


async def handle(broker: ProduceView, ctx: RequestContext, request: Any) -> Any:
    acks = request.acks
    slots: list[_Slot] = []
    topics = broker.topics
    # ensure() re-reads the catalog for a topic or partition this broker does not know
    # yet; asking it only then spares every other request its coroutine and generator
    # (and the topics looked up here serve the request, unless ensure() ran).
    known: dict[str, Topic | None] = {}
    for topic_data in request.topic_data:
        found = known[topic_data.name] = topics.get(topic_data.name)
        if found is None or any(
            not 0 <= part.index < found.partitions for part in topic_data.partition_data
        ):
            await topics.ensure(
                (td.name, part.index) for td in request.topic_data for part in td.partition_data
            )
            known = {}
            break
    precheck_error, precheck_message = _precheck(request, acks)
    acls = access.enabled(broker)
    if precheck_error is None and acls:
        precheck_error, precheck_message = _transactional_check(broker, ctx, request)
    now_ms = int(time.time() * 1000)
    logs = broker.router
    plan = AppendPlan(acks, int(request.timeout.total_seconds() * 1000))
    # KIP-890 verification of this request's transactional producer, asked at most once.
    verified: tuple[tuple[int, int], Verification] | None = None
    # KIP-890 part 2: Produce v12+ adds the partitions to the transaction itself (the add
    # is the classic partitions' verification); the refused ones answer why.
    not_added: dict[PartitionKey, int] = {}
    if (
        precheck_error is None
        and request.transactional_id is not None
        and ctx.header.api_version >= implicit_add.TV2_PRODUCE_VERSION
    ):
        not_added, verified = await implicit_add.add_partitions(broker, ctx, request)
        known = {}  # the topics may have changed meanwhile: looked up again
    for topic_data in request.topic_data:
        name = topic_data.name
        topic = known[name] if name in known else topics.get(name)
        if topic is not None:
            max_batch_bytes, log_append, rules, target = _settings(topics, topic)
        denied = acls and not access.topic(broker, ctx, AclOperation.WRITE, name)
        for part in topic_data.partition_data:
            error, message = precheck_error, precheck_message
            if error is None and denied:
                error, message = ErrorCode.topic_authorization_failed, None
            if error is None and (topic is None or not 0 <= part.index < topic.partitions):
                error = ErrorCode.unknown_topic_or_partition
                message = "This server does not host this topic-partition."
            if error is not None:
                slots.append((name, part.index, PartitionResult(int(error)), message, ()))
                continue
            assert topic is not None
            # kio decodes records into their own bytes object. The views of it made from
            # here on are uploaded and then cached without a copy, so they must not point
            # into the connection's read buffer, which the next read overwrites.
            raw = part.records or b""
            records = memoryview(raw if isinstance(raw, bytes) else bytes(raw))
            try:
                batches = parse_batches(records, max_batch_bytes)
                if ctx.header.api_version < ZSTD_MIN_PRODUCE_VERSION:
                    _refuse_old_zstd(batches, target)
                # Every record is checked before anything is buffered: nothing that would
                # poison a consumer or lie about its offsets is ever acknowledged.
                records, batches = validate_records(records, batches, rules, now_ms)
                if target is not None:
                    records, batches = recompress.recompress(
                        records,
                        batches,
                        target,
                        max_batch_bytes,
                        broker.config.socket_request_max_bytes,
                    )
            except InvalidRecords as exc:
                result = PartitionResult(int(exc.error))
                slots.append((name, part.index, result, str(exc), exc.record_errors))
                # Once per client, error and topic: a retrying producer is one line.
                REFUSALS.note(
                    ctx.header.client_id,
                    ctx.client_host,
                    ctx.client_port,
                    "Produce",
                    int(exc.error),
                    f"{name}-{part.index}: {exc}",
                    reason=name,
                )
                continue
            if not_added and (refused := not_added.get(PartitionKey(topic.topic_id, part.index))):
                slots.append((name, part.index, PartitionResult(refused), None, ()))
                continue
            log = logs.route(topic.topic_id, part.index, Purpose.APPEND)
            if log.begin_verification(topic, part.index, batches):
                first = batches[0]
                if verified is None or verified[0] != (first.producer_id, first.producer_epoch):
                    # Awaited before this handler returns, so the connection's next
                    # request waits for it: appends stay in request order.
                    verification = await verify_transaction(
                        broker.transactions, request.transactional_id, first
                    )
                    verified = ((first.producer_id, first.producer_epoch), verification)
                    known = {}  # the topics may have changed meanwhile: looked up again
                if refusal := verified[1].refusal(topic.topic_id, part.index):
                    slots.append((name, part.index, PartitionResult(refusal), None, ()))
                    continue
            slot = log.append(topic, part.index, records, batches, log_append, plan)
            slots.append((name, part.index, slot, None, ()))
    throttle_ms = _produce_quota(broker, ctx, request)
    # Submitted now, before the handler returns, whatever else the request waits for: the
    # appender commits in submission order, and the connection's next request must not
    # overtake this one's batches.
    if plan.diskless:
        # acks=all: answered REQUEST_TIMED_OUT once the request's timeout has passed, as
        # Kafka answers a produce whose replication outlasts it (the commit goes on). A
        # timeout of 0 is not applied: Kafka answers it at once when the append needs no
        # replication wait (the differential's single broker does), and a diskless commit
        # is never immediate, so every such request would time out.
        timeout = plan.timeout_ms if acks == -1 and plan.timeout_ms > 0 else None
        committed = broker.appender.submit(plan.diskless, timeout)
    else:  # nothing for the diskless engine (classic partitions, refusals): no commit
        committed = asyncio.get_running_loop().create_future()
        committed.set_result([])
    # The request's record bytes, on this broker's logs and the diskless ones: one count.
    broker.client_bytes.count("produce", az_from_client_id(ctx.header.client_id), plan.record_bytes)
    if plan.waits:
        # acks=all on logs of this broker: answered once their high watermarks pass.
        return asyncio.ensure_future(
            _with_waits(ctx, acks, slots, committed, plan.waits, throttle_ms)
        )
    # The answer is completed by a callback on the commit, not by a task awaiting it:
    # one task per request was a measurable share of a small-batch producer's cost.
    answer: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    version = ctx.header.api_version

    def on_commit(done: asyncio.Future[list[PartitionResult]]) -> None:
        if answer.done():
            return  # the connection went away and cancelled it
        if done.cancelled():
            answer.cancel()
        elif (exc := done.exception()) is not None:
            answer.set_exception(exc)
        elif acks == 0:
            # Kafka sends nothing back, but the answer slot resolves only after the
            # commit: the connection's pending-bytes budget keeps counting these records
            # until then, so an acks=0 producer is held back like any other.
            answer.set_result(None)
        else:
            try:
                answer.set_result(_encode(version, slots, done.result(), throttle_ms))
            except Exception as encode_error:
                answer.set_exception(encode_error)

    committed.add_done_callback(on_commit)
    return answer


# Per topic: (the Topic object they were derived from, max.message.bytes, whether it is
# LogAppendTime, the record validation rules, the codec batches are stored in: None for the
# producer's). Effective configs are dicts merged from the broker's defaults on every call;
# a topic's configs only change with a new (frozen) Topic object, so an entry is valid while
# its Topic is the registry's current one.
_Settings = tuple[int, bool, Rules, recompress.Target | None]
_SETTINGS: dict[UUID, tuple[Topic, _Settings]] = {}
_SETTINGS_MAX = 10_000


def _settings(topics: TopicRegistry, topic: Topic) -> _Settings:
    cached = _SETTINGS.get(topic.topic_id)
    if cached is not None and cached[0] is topic:
        return cached[1]
    max_bytes = topics.int_config(topic, "max.message.bytes")
    config = topics.config(topic)
    log_append = config.get("message.timestamp.type") == "LogAppendTime"
    rules = _rules(topics, topic, config, log_append)
    settings = (max_bytes, log_append, rules, recompress.target(config))
    if len(_SETTINGS) >= _SETTINGS_MAX:
        _SETTINGS.clear()  # deleted topics' entries; rebuilt on use
    _SETTINGS[topic.topic_id] = (topic, settings)
    return settings


def _rules(topics: TopicRegistry, topic: Topic, config: dict[str, str], log_append: bool) -> Rules:
    before, after = topics.timestamp_bounds(topic)
    policy = {p.strip() for p in config.get("cleanup.policy", "delete").split(",")}
    return Rules(
        require_keys="compact" in policy,
        check_timestamps=not log_append,
        before_max_ms=before,
        after_max_ms=after,
    )


# Clients learned zstd with Produce v7 (KIP-110): older requests may neither carry zstd
# batches nor write to a topic that stores zstd, as Kafka answers.
ZSTD_MIN_PRODUCE_VERSION = 7


def _refuse_old_zstd(batches: list[BatchHeader], target: recompress.Target | None) -> None:
    if any(b.attributes & CODEC_MASK == ZSTD for b in batches) or (
        target is not None and target.codec == ZSTD
    ):
        raise InvalidRecords(
            ErrorCode.unsupported_compression_type,
            f"zstd needs Produce v{ZSTD_MIN_PRODUCE_VERSION} or later",
        )


def _transactional_check(
    broker: ProduceView, ctx: RequestContext, request: Any
) -> tuple[ErrorCode | None, str | None]:
    """A transactional producer needs WRITE on its transactional id (as Kafka checks)."""
    transactional_id = request.transactional_id
    if transactional_id is not None and not access.transactional_id(
        broker, ctx, AclOperation.WRITE, transactional_id
    ):
        return ErrorCode.transactional_id_authorization_failed, None
    return None, None


def _precheck(request: Any, acks: int) -> tuple[ErrorCode | None, str | None]:
    if acks not in VALID_ACKS:
        return ErrorCode.invalid_required_acks, f"acks must be -1, 0 or 1, not {acks}"
    return None, None


def _produce_quota(broker: ProduceView, ctx: RequestContext, request: Any) -> int:
    """The produce quota's throttle time for this request's record bytes (0: none set)."""
    quota = broker.quotas.produce
    if not quota.enabled():
        return 0
    size = sum(len(p.records or b"") for t in request.topic_data for p in t.partition_data)
    throttle_ms = quota.record(user_of(ctx.principal), ctx.header.client_id or "", size)
    if throttle_ms:
        throttle_connection(throttle_ms)
    return throttle_ms


async def _with_waits(
    ctx: RequestContext,
    acks: int,
    slots: list[_Slot],
    committed: asyncio.Future[list[PartitionResult]],
    waits: list[asyncio.Future[PartitionResult]],
    throttle_ms: int,
) -> Any:
    """A request with partitions waiting on their high watermarks (acks=all) and others on
    the appender's commit: both awaited."""
    results = await committed
    waited = list(await asyncio.gather(*waits))
    if acks == 0:
        return None
    return _encode(ctx.header.api_version, slots, results, throttle_ms, waited)


_INVALID_TXN_STATE = int(ErrorCode.invalid_txn_state)
_TRANSACTION_ABORTABLE = int(ErrorCode.transaction_abortable)
_TRANSACTION_ABORTABLE_VERSION = 11


def _encode(
    version: int,
    slots: list[_Slot],
    results: list[PartitionResult],
    throttle_ms: int = 0,
    waited: list[PartitionResult] | None = None,
) -> EncodedResponse:
    topics: dict[str, list[PartitionAnswer]] = {}
    for name, index, slot, message, record_errors in slots:
        if isinstance(slot, int):
            # Negative: the index (-1 - i) of a partition's acks=all wait (AppendPlan).
            result = results[slot] if slot >= 0 else (waited or [])[-1 - slot]
        else:
            result = slot
        error = result.error
        if error == _INVALID_TXN_STATE and version >= _TRANSACTION_ABORTABLE_VERSION:
            # KIP-890: a transactional batch for a partition its transaction does not hold
            # is abortable for clients that know TRANSACTION_ABORTABLE (Produce v11+);
            # older ones get INVALID_TXN_STATE, as Kafka's AddPartitionsToTxnManager maps it.
            error = _TRANSACTION_ABORTABLE
        topics.setdefault(name, []).append(
            PartitionAnswer(
                index,
                error,
                result.base_offset,
                result.log_append_time,
                result.log_start_offset,
                message,
                record_errors,
            )
        )
    return encode_produce_response(version, list(topics.items()), throttle_ms)
