"""The transactional APIs: AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit,
DescribeTransactions, ListTransactions, DescribeProducers (InitProducerId is in
producer_ids).

Each handler resolves names against the topic registry and makes one call of the
transaction coordinator (broker/transactions/), which keeps everything in the database.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import sys
import time
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from broker.groups.offsets import store_error
from broker.groups.service import GroupsView
from broker.security import access
from common.acl import AclOperation
from storage.coordinator import CoordinatorUnavailable
from storage.groups import CommittedOffset
from storage.partition_key import PartitionKey
from storage.transactions import PRODUCER_FENCED, STATES

if TYPE_CHECKING:
    from broker.security.request_context import RequestContext
    from broker.transactions.txn_coordinator import TransactionCoordinator
    from storage.coordinator import BatchCoordinator


class TransactionsView(GroupsView, Protocol):
    @property
    def transactions(self) -> TransactionCoordinator: ...

    @property
    def coordinator(self) -> BatchCoordinator: ...  # DescribeProducers


log = logging.getLogger(__name__)

INVALID_PRODUCER_EPOCH = int(ErrorCode.invalid_producer_epoch)
INVALID_TXN_STATE = int(ErrorCode.invalid_txn_state)
TRANSACTION_ABORTABLE = int(ErrorCode.transaction_abortable)
INVALID_REQUEST = int(ErrorCode.invalid_request)
OPERATION_NOT_ATTEMPTED = int(ErrorCode.operation_not_attempted)
UNKNOWN_TOPIC_OR_PARTITION = int(ErrorCode.unknown_topic_or_partition)
TRANSACTIONAL_ID_NOT_FOUND = int(ErrorCode.transactional_id_not_found)
NOT_COORDINATOR = int(ErrorCode.not_coordinator)
TXN_ID_DENIED = int(ErrorCode.transactional_id_authorization_failed)
TOPIC_DENIED = int(ErrorCode.topic_authorization_failed)
GROUP_DENIED = int(ErrorCode.group_authorization_failed)

# Every state name Kafka knows: a ListTransactions filter naming another is "unknown".
# Prepare* is shown for a stored outcome whose classic markers are still pending; Sluice
# never enters Dead/PrepareEpochFence (see storage.transactions).
PREPARED = {"PrepareCommit": "CompleteCommit", "PrepareAbort": "CompleteAbort"}
KAFKA_STATES = (*STATES, *PREPARED, "Dead", "PrepareEpochFence")

# KIP-588: PRODUCER_FENCED exists from these versions on; older clients get
# INVALID_PRODUCER_EPOCH, which they treat the same way. Kafka's TxnOffsetCommit is checked
# by the transaction coordinator's partition verification (KIP-890), which answers a fenced
# epoch INVALID_PRODUCER_EPOCH at every version, as it does to Produce.
_NEVER = 1 << 15
_FENCED_SINCE = {
    "AddPartitionsToTxn": 2,
    "AddOffsetsToTxn": 2,
    "EndTxn": 2,
    "TxnOffsetCommit": _NEVER,
}
# KIP-890: TRANSACTION_ABORTABLE (the client aborts and goes on) from these versions on for
# what is not in the transaction: a TxnOffsetCommit whose group was not added, a verified
# partition that was not. Older clients get INVALID_TXN_STATE (fatal for them), as Kafka's.
_ABORTABLE_SINCE = {"AddPartitionsToTxn": 4, "TxnOffsetCommit": 4}


# KIP-890 part 2's versions: EndTxn v5 bumps the producer's epoch at every end;
# TxnOffsetCommit v5 adds the group to the transaction itself.
TV2_END_TXN_VERSION = 5
TV2_TXN_OFFSET_COMMIT_VERSION = 5
NONE = int(ErrorCode.none)


def for_version(api: str, version: int, error: int) -> int:
    if error == PRODUCER_FENCED and version < _FENCED_SINCE.get(api, 0):
        return INVALID_PRODUCER_EPOCH
    if error == INVALID_TXN_STATE and version >= _ABORTABLE_SINCE.get(api, _NEVER):
        return TRANSACTION_ABORTABLE
    return error


def _unavailable(exc: BaseException, what: str) -> int:
    return int(store_error(exc, what))


# --------------------------------------------------------------------------- AddPartitionsToTxn


async def add_partitions_to_txn(broker: TransactionsView, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    if version <= 3:
        # One transaction, from the producer itself.
        topic_results = await _add_partitions(
            broker,
            ctx,
            version,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            request.v3_and_below_topics,
            verify_only=False,
        )
        return ctx.respond({"throttle_time": 0, "results_by_topic_v3_and_below": topic_results})
    # v4+: batches of transactions, sent by partition leaders to verify (KIP-890): a
    # broker's request, so CLUSTER_ACTION on the cluster (as Kafka checks).
    if not access.cluster(broker, ctx, AclOperation.CLUSTER_ACTION):
        return ctx.respond(
            {
                "throttle_time": 0,
                "error_code": int(ErrorCode.cluster_authorization_failed),
                "results_by_transaction": [],
            }
        )
    results = []
    for txn in request.transactions:
        results.append(
            {
                "transactional_id": txn.transactional_id,
                "topic_results": await _add_partitions(
                    broker,
                    ctx,
                    version,
                    txn.transactional_id,
                    txn.producer_id,
                    txn.producer_epoch,
                    txn.topics,
                    verify_only=txn.verify_only,
                ),
            }
        )
    return ctx.respond({"throttle_time": 0, "error_code": 0, "results_by_transaction": results})


async def _add_partitions(
    broker: TransactionsView,
    ctx: RequestContext,
    version: int,
    transactional_id: str,
    producer_id: int,
    producer_epoch: int,
    topics: Any,
    verify_only: bool,
) -> list[dict[str, Any]]:
    await broker.topics.ensure((t.name, p) for t in topics for p in t.partitions)
    keys: list[tuple[str, int, PartitionKey | None]] = []
    for entry in topics:
        topic = broker.topics.get(entry.name)
        for index in entry.partitions:
            key = None
            if topic is not None and 0 <= index < topic.partitions:
                key = PartitionKey(topic.topic_id, index)
            keys.append((entry.name, index, key))
    errors: list[int]
    # WRITE on the transactional id, then on each topic; a refusal adds nothing (Kafka).
    denied_topics = {
        name for name, _, _ in keys if not access.topic(broker, ctx, AclOperation.WRITE, name)
    }
    if not access.transactional_id(broker, ctx, AclOperation.WRITE, transactional_id):
        errors = [TXN_ID_DENIED] * len(keys)
    elif denied_topics:
        errors = [
            TOPIC_DENIED if name in denied_topics else OPERATION_NOT_ATTEMPTED
            for name, _, _ in keys
        ]
    elif any(k is None for _, _, k in keys):
        # As Kafka: nothing is added; the unknown ones say why, the others were not tried.
        errors = [
            UNKNOWN_TOPIC_OR_PARTITION if k is None else OPERATION_NOT_ATTEMPTED for _, _, k in keys
        ]
    else:
        wanted = [k for _, _, k in keys if k is not None]
        try:
            if verify_only:
                error, held = await broker.transactions.verify(
                    transactional_id, producer_id, producer_epoch
                )
                errors = [
                    error if error else (0 if k in held else INVALID_TXN_STATE) for k in wanted
                ]
            else:
                error = await broker.transactions.add(
                    transactional_id, producer_id, producer_epoch, partitions=wanted
                )
                errors = [error] * len(wanted)
        except Exception as exc:
            errors = [_unavailable(exc, f"adding partitions to {transactional_id!r}")] * len(wanted)
    out: dict[str, list[dict[str, Any]]] = {}
    for (name, index, _), error in zip(keys, errors, strict=True):
        out.setdefault(name, []).append(
            {
                "partition_index": index,
                "partition_error_code": for_version("AddPartitionsToTxn", version, error),
            }
        )
    return [{"name": name, "results_by_partition": parts} for name, parts in out.items()]


# --------------------------------------------------------------------------- AddOffsetsToTxn


async def add_offsets_to_txn(broker: TransactionsView, ctx: RequestContext, request: Any) -> Any:
    denied = _txn_denied(broker, ctx, request.transactional_id)
    if not denied and not access.group(broker, ctx, AclOperation.READ, request.group_id):
        denied = GROUP_DENIED
    if denied:
        return ctx.respond({"throttle_time": 0, "error_code": denied})
    try:
        error = await broker.transactions.add(
            request.transactional_id,
            request.producer_id,
            request.producer_epoch,
            groups=[request.group_id],
        )
    except Exception as exc:
        error = _unavailable(exc, f"adding offsets to {request.transactional_id!r}")
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": for_version("AddOffsetsToTxn", ctx.header.api_version, error),
        }
    )


# --------------------------------------------------------------------------- EndTxn


def _txn_denied(broker: TransactionsView, ctx: RequestContext, transactional_id: str) -> int:
    """TRANSACTIONAL_ID_AUTHORIZATION_FAILED unless the caller may WRITE the id, else 0."""
    if access.transactional_id(broker, ctx, AclOperation.WRITE, transactional_id):
        return 0
    return TXN_ID_DENIED


async def end_txn(broker: TransactionsView, ctx: RequestContext, request: Any) -> Any:
    if denied := _txn_denied(broker, ctx, request.transactional_id):
        return ctx.respond(
            {
                "throttle_time": 0,
                "error_code": denied,
                "producer_id": request.producer_id,
                "producer_epoch": request.producer_epoch,
            }
        )
    version = ctx.header.api_version
    # Up to v4 the answer has no producer fields (they are encoded from v5 only).
    producer_id, producer_epoch = request.producer_id, request.producer_epoch
    try:
        if version >= TV2_END_TXN_VERSION:
            # KIP-890 part 2: the end bumps the epoch; the answer names the new one.
            error, producer_id, producer_epoch = await broker.transactions.end_tv2(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.committed,
            )
        else:
            error = await broker.transactions.end(
                request.transactional_id,
                request.producer_id,
                request.producer_epoch,
                request.committed,
            )
    except Exception as exc:
        error = _unavailable(exc, f"ending the transaction of {request.transactional_id!r}")
        producer_id = producer_epoch = -1
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": for_version("EndTxn", version, error),
            "producer_id": producer_id,
            "producer_epoch": producer_epoch,
        }
    )


# --------------------------------------------------------------------------- TxnOffsetCommit


async def txn_offset_commit(broker: TransactionsView, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    member_id = getattr(request, "member_id", "") or ""
    instance_id = getattr(request, "group_instance_id", None)
    generation = getattr(request, "generation_id", -1)
    groups = broker.groups.coordinator
    # Sent to the group's coordinator, which checks the member when the producer names
    # one (KIP-447, v3+); without a member the commit is the producer's alone.
    # Authorization first: WRITE on the transactional id, READ on the group and topics.
    group_error = _txn_denied(broker, ctx, request.transactional_id)
    if not group_error and not access.group(broker, ctx, AclOperation.READ, request.group_id):
        group_error = GROUP_DENIED
    if group_error:
        pass
    elif member_id or generation >= 0 or instance_id is not None:
        # A member of a group whose coordinator changed: its membership comes back first.
        group_error = int(
            await groups.load(request.group_id)
            or groups.check_commit(request.group_id, member_id, instance_id, generation)
        )
    else:
        group_error = 0 if groups.owns(request.group_id) else NOT_COORDINATOR
    if not group_error and await groups.is_share_group(request.group_id):
        group_error = int(ErrorCode.group_id_not_found)  # Kafka: not a consumer group
    limit = broker.config.offset_metadata_max_bytes
    now = int(time.time() * 1000)
    answers: list[tuple[str, dict[str, Any]]] = []
    rows: list[CommittedOffset] = []
    pending: list[dict[str, Any]] = []
    for entry in request.topics:
        topic = broker.topics.get(entry.name)
        for p in entry.partitions:
            answer = {"partition_index": p.partition_index, "error_code": group_error}
            answers.append((entry.name, answer))
            if group_error:
                continue
            if denied := access.topic_error(broker, ctx, AclOperation.READ, entry.name):
                answer["error_code"] = denied
                continue
            if topic is None or not 0 <= p.partition_index < topic.partitions:
                answer["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
                continue
            metadata = p.committed_metadata or ""
            if len(metadata.encode("utf-8")) > limit:
                answer["error_code"] = int(ErrorCode.offset_metadata_too_large)
                continue
            rows.append(
                CommittedOffset(
                    topic.topic_id,
                    p.partition_index,
                    p.committed_offset,
                    getattr(p, "committed_leader_epoch", -1),
                    metadata,
                    now,
                )
            )
            pending.append(answer)
    if rows:
        try:
            error = NONE
            if version >= TV2_TXN_OFFSET_COMMIT_VERSION:
                # KIP-890 part 2: the group joins the transaction here (the client sent
                # no AddOffsetsToTxn), as Kafka's group coordinator adds it.
                error = await broker.transactions.add(
                    request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    groups=[request.group_id],
                )
            if error == NONE:
                error = await broker.transactions.commit_offsets(
                    request.transactional_id,
                    request.producer_id,
                    request.producer_epoch,
                    request.group_id,
                    rows,
                )
        except Exception as exc:
            error = _unavailable(exc, f"transactional offset commit of {request.group_id!r}")
        for answer in pending:
            answer["error_code"] = error
    topics: dict[str, list[dict[str, Any]]] = {}
    for name, answer in answers:
        answer["error_code"] = for_version("TxnOffsetCommit", version, answer["error_code"])
        topics.setdefault(name, []).append(answer)
    return ctx.respond(
        {
            "throttle_time": 0,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
        }
    )


# --------------------------------------------------------------------------- admin views


async def describe_transactions(broker: TransactionsView, ctx: RequestContext, request: Any) -> Any:
    wanted = list(request.transactional_ids)
    # DESCRIBE on each transactional id; the others are answered without a lookup.
    ids = [t for t in wanted if access.transactional_id(broker, ctx, AclOperation.DESCRIBE, t)]
    try:
        states = await broker.transactions.get(ids) if ids else []
    except CoordinatorUnavailable as exc:
        error = _unavailable(exc, "describing transactions")
        states = [None] * len(ids)
    else:
        error = 0
    out = []
    found = dict(zip(ids, states, strict=True))
    for txn_id in wanted:
        # Every field of an entry, also a refused one: the answer's schema has no optional
        # fields here (a refusal without them could not be encoded at all). Kafka leaves
        # them at the schema's zeros.
        entry: dict[str, Any] = {
            "error_code": error or TRANSACTIONAL_ID_NOT_FOUND,
            "transactional_id": txn_id,
            "transaction_state": "",
            "transaction_timeout": 0,
            "transaction_start_time": 0,
            "producer_id": 0,
            "producer_epoch": 0,
            "topics": [],
        }
        if not txn_id:
            entry["error_code"] = INVALID_REQUEST  # as Kafka: an empty id names nothing
            out.append(entry)
            continue
        if txn_id not in found:
            entry["error_code"] = TXN_ID_DENIED
            out.append(entry)
            continue
        state = found[txn_id]
        if state is not None:
            topics: dict[str, list[int]] = {}
            for key in state.partitions:
                topic = broker.topics.get_by_id(key.topic_id)
                # Topics the caller may not describe are left out, as Kafka does.
                if topic is not None and access.topic(
                    broker, ctx, AclOperation.DESCRIBE, topic.name
                ):
                    topics.setdefault(topic.name, []).append(key.partition)
            entry.update(
                error_code=0,
                transaction_state=state.shown_state,
                transaction_timeout=state.timeout_ms,
                # As Kafka's: the last transaction's start stays after it ended (-1 once
                # InitProducerId starts the id afresh).
                transaction_start_time=state.started_ms,
                producer_id=state.producer_id,
                producer_epoch=state.producer_epoch,
                topics=[{"topic": name, "partitions": parts} for name, parts in topics.items()],
            )
        out.append(entry)
    return ctx.respond({"throttle_time": 0, "transaction_states": out})


# ListTransactions' transactional id pattern is the client's regex, and Python's re
# backtracks: (a+)+b against an id of forty a's runs for hours, and on the event loop that
# would stall every connection of the broker. So ids are matched in a child interpreter,
# killed past this long (the answer is then INVALID_REGULAR_EXPRESSION); a few at a time.
PATTERN_TIMEOUT_S = 2.0
_PATTERN_SLOTS = asyncio.Semaphore(2)
_MATCHER = (
    "import json, re, sys\n"
    "d = json.load(sys.stdin)\n"
    "p = re.compile(d['pattern'])\n"
    "json.dump([i for i in d['ids'] if p.fullmatch(i)], sys.stdout)\n"
)


async def _fullmatching(pattern: str, ids: list[str]) -> set[str] | None:
    """The ids ``pattern`` matches whole, or None when matching took too long."""
    if not ids:
        return set()
    payload = json.dumps({"pattern": pattern, "ids": ids}).encode()
    async with _PATTERN_SLOTS:
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-I",
            "-S",
            "-c",
            _MATCHER,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            out, _ = await asyncio.wait_for(proc.communicate(payload), PATTERN_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            await proc.wait()
            log.warning(
                "ListTransactions: pattern %.200r took over %.0f s", pattern, PATTERN_TIMEOUT_S
            )
            return None
    if proc.returncode != 0:
        return None
    return set(json.loads(out))


async def list_transactions(broker: TransactionsView, ctx: RequestContext, request: Any) -> Any:
    filters = list(request.state_filters)
    unknown = [s for s in filters if s not in KAFKA_STATES]
    pattern_text = getattr(request, "transactional_id_pattern", None)

    def invalid_pattern() -> Any:
        return ctx.respond(
            {
                "throttle_time": 0,
                "error_code": int(ErrorCode.invalid_regular_expression),
                "unknown_state_filters": [],
                "transaction_states": [],
            }
        )

    try:
        # Compiling is linear in the pattern; only matching can take exponential time.
        if pattern_text:
            re.compile(pattern_text)
    except re.error:
        return invalid_pattern()
    error = 0
    states = []
    # The stored states that can show as the wanted ones (Prepare* is stored as Complete*).
    stored = {PREPARED.get(s, s) for s in filters if s in STATES or s in PREPARED}
    if not filters or stored:
        try:
            states = await broker.transactions.list(
                sorted(stored),
                list(request.producer_id_filters),
                getattr(request, "duration_filter", -1),
            )
        except CoordinatorUnavailable as exc:
            error = _unavailable(exc, "listing transactions")
        if filters:
            states = [s for s in states if s.shown_state in filters]
    states = [
        s
        for s in states
        # Kafka's brokers each list the ids whose coordinator they are, and tools ask
        # every broker: listing all of them everywhere would repeat each one.
        if broker.transactions.owns(s.transactional_id)
        and access.transactional_id(broker, ctx, AclOperation.DESCRIBE, s.transactional_id)
    ]
    if pattern_text:
        matching = await _fullmatching(pattern_text, [s.transactional_id for s in states])
        if matching is None:
            return invalid_pattern()
        states = [s for s in states if s.transactional_id in matching]
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": error,
            "unknown_state_filters": unknown,
            "transaction_states": [
                {
                    "transactional_id": s.transactional_id,
                    "producer_id": s.producer_id,
                    "transaction_state": s.shown_state,
                }
                for s in states
            ],
        }
    )


async def describe_producers(broker: TransactionsView, ctx: RequestContext, request: Any) -> Any:
    """DescribeProducers (KIP-664): the producers with state in each partition and where
    their open transaction began; what `kafka-transactions.sh describe-producers` and
    `find-hanging` read. Any broker answers for any partition."""
    await broker.topics.ensure((t.name, p) for t in request.topics for p in t.partition_indexes)
    slots: list[tuple[str, dict[str, Any], PartitionKey | None]] = []
    for entry in request.topics:
        topic = broker.topics.get(entry.name)
        for index in entry.partition_indexes:
            answer: dict[str, Any] = {
                "partition_index": index,
                "error_code": 0,
                "error_message": None,
                "active_producers": [],
            }
            key = None
            if denied := access.topic_error(broker, ctx, AclOperation.READ, entry.name):
                answer["error_code"] = denied
            elif topic is not None and 0 <= index < topic.partitions:
                key = PartitionKey(topic.topic_id, index)
            else:
                answer["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
            slots.append((entry.name, answer, key))
    keys = [k for _, _, k in slots if k is not None]
    if keys:
        try:
            found = await broker.coordinator.describe_producers(keys)
        except CoordinatorUnavailable as exc:
            error = _unavailable(exc, "describing producers")
            found = [None] * len(keys)
            for _, answer, key in slots:
                if key is not None:
                    answer["error_code"] = error
        else:
            it = iter(found)
            for _, answer, key in slots:
                if key is None:
                    continue
                producers = next(it)
                if producers is None:
                    answer["error_code"] = UNKNOWN_TOPIC_OR_PARTITION
                    continue
                answer["active_producers"] = [
                    {
                        "producer_id": p.producer_id,
                        "producer_epoch": p.producer_epoch,
                        "last_sequence": p.last_sequence,
                        "last_timestamp": p.last_timestamp,
                        "coordinator_epoch": -1,
                        "current_txn_start_offset": p.current_txn_start_offset,
                    }
                    for p in producers
                ]
    topics: dict[str, list[dict[str, Any]]] = {}
    for name, answer, _ in slots:
        topics.setdefault(name, []).append(answer)
    return ctx.respond(
        {
            "throttle_time": 0,
            "topics": [{"name": name, "partitions": parts} for name, parts in topics.items()],
        }
    )
