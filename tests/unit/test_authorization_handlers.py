"""Each API handler refuses what the principal's ACLs do not allow, with Kafka's error code,
before touching storage. These are the refusals stock clients cannot reach on their own
(they fail earlier, on Metadata): the handlers run with a stand-in broker whose storage
would fail the test if it were used, and every answer is encoded and decoded."""

from __future__ import annotations

import datetime
import uuid
from typing import Any

import pytest
from kio.schema.errors import ErrorCode

from broker.admin import (
    acls,
    configs,
    elect_leaders,
    features,
    log_dirs,
    reassignments,
    records_admin,
    scram_credentials,
    topics_admin,
    unregister_broker,
)
from broker.admin import client_quotas_handler as client_quotas
from broker.config import BrokerConfig
from broker.fetch import fetch_handler as fetch
from broker.fetch import leader_epoch, list_offsets
from broker.fetch.fetch_sessions import FetchSessionCache
from broker.logs.engines import log_router
from broker.metadata import describe_cluster as cluster
from broker.metadata import describe_quorum
from broker.metadata import metadata_handler as metadata
from broker.metadata.client_az import ClientBytes
from broker.security.authorizer import Authorizer
from broker.server.client_quotas import ClientQuotas
from broker.transactions import init_producer_id as producer_ids
from broker.transactions import transactions_handler as transactions
from common.acl import AclBinding
from protocol.codec import encode_response
from storage.catalog import Topic
from tests.unit._handlers import decode_answer, request_and_context, settled

E = ErrorCode
TOPIC = Topic("orders", uuid.UUID(int=7), 3)
PRINCIPAL = "User:alice"


class Untouchable:
    """Storage the refused requests must never reach."""

    def __getattr__(self, name: str) -> Any:
        raise AssertionError(f"storage used: {name}")


class Topics:
    async def ensure(self, wanted: Any) -> None:
        list(wanted)

    def get(self, name: str) -> Topic | None:
        return TOPIC if name == TOPIC.name else None

    def get_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        return TOPIC if topic_id == TOPIC.topic_id else None

    def all(self) -> list[Topic]:
        return [TOPIC]


class FakeBroker:
    def __init__(self, *allowed: AclBinding) -> None:
        table = {uuid.uuid4(): a for a in allowed}
        self.authorizer = Authorizer(lambda: table)
        self.topics = Topics()
        self.coordinator = self.transactions = self.groups = Untouchable()
        self.controller = Untouchable()
        self.config = BrokerConfig()
        self.quotas = ClientQuotas(lambda: {}, 11, 1)  # none set: never throttles
        self.classic: Any = None  # no classic topics
        self.fetcher = NoFetches()
        self.fetch_sessions = FetchSessionCache()
        self.cluster_id = "unit-cluster"
        self.controller_id = 1
        self.router = log_router(self)  # type: ignore[arg-type]
        self.client_bytes = ClientBytes(self.endpoints, None)

    def endpoints(self) -> list[Any]:
        return []

    def endpoints_on(self, listener: str) -> list[Any]:
        return []


class NoFetches:
    async def read(self, results: list[Any], epochs: list[int]) -> list[Any]:
        assert not results, "a refused fetch read records"
        return []


async def call(handler: Any, broker: FakeBroker, key: int, version: int, data: dict) -> Any:
    request, ctx = request_and_context(key, version, data, PRINCIPAL, "unit")
    return decode_answer(await settled(await handler(broker, ctx, request)), key, version)


def describe_only() -> FakeBroker:
    # DESCRIBE on the topic (so a client would get past Metadata), nothing else.
    return FakeBroker(AclBinding(2, "orders", 3, PRINCIPAL, "*", 8, 3))


async def test_list_offsets_and_leader_epoch_need_describe() -> None:
    broker = FakeBroker()
    answer = await call(
        list_offsets.handle,
        broker,
        2,
        8,
        {"replica_id": -1, "topics": [{"name": "orders", "partitions": [{"partition_index": 0}]}]},
    )
    assert answer.topics[0].partitions[0].error_code == E.topic_authorization_failed
    answer = await call(
        leader_epoch.handle,
        broker,
        23,
        4,
        {"topics": [{"topic": "orders", "partitions": [{"partition": 0, "leader_epoch": 0}]}]},
    )
    assert answer.topics[0].partitions[0].error_code == E.topic_authorization_failed


async def test_fetch_needs_read() -> None:
    answer = await call(
        fetch.handle,
        describe_only(),
        1,
        12,
        {
            "max_wait": datetime.timedelta(milliseconds=0),
            "topics": [{"topic": "orders", "partitions": [{"partition": 0, "fetch_offset": 0}]}],
        },
    )
    assert answer.responses[0].partitions[0].error_code == E.topic_authorization_failed


async def test_records_and_topic_admin_need_delete_create_alter() -> None:
    broker = describe_only()
    answer = await call(
        records_admin.delete_records,
        broker,
        21,
        2,
        {"topics": [{"name": "orders", "partitions": [{"partition_index": 0, "offset": 1}]}]},
    )
    assert answer.topics[0].partitions[0].error_code == E.topic_authorization_failed
    answer = await call(
        topics_admin.create_topics, broker, 19, 7, {"topics": [{"name": "new-topic"}]}
    )
    assert answer.topics[0].error_code == E.topic_authorization_failed
    # A positive timeout: with 0 Kafka answers REQUEST_TIMED_OUT before authorizing.
    answer = await call(
        topics_admin.delete_topics,
        broker,
        20,
        6,
        {"topics": [{"name": "orders"}], "timeout": 30_000},
    )
    assert answer.responses[0].error_code == E.topic_authorization_failed
    answer = await call(
        topics_admin.create_partitions, broker, 37, 3, {"topics": [{"name": "orders", "count": 5}]}
    )
    assert answer.results[0].error_code == E.topic_authorization_failed


async def test_configs_need_describe_and_alter_configs() -> None:
    broker = describe_only()
    answer = await call(
        configs.describe_configs,
        broker,
        32,
        4,
        {
            "resources": [
                {"resource_type": 2, "resource_name": "orders"},
                {"resource_type": 4, "resource_name": ""},
            ]
        },
    )
    assert [r.error_code for r in answer.results] == [
        E.topic_authorization_failed,
        E.cluster_authorization_failed,
    ]
    answer = await call(
        configs.incremental_alter_configs,
        broker,
        44,
        1,
        {
            "resources": [
                {
                    "resource_type": 2,
                    "resource_name": "orders",
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1"}],
                }
            ]
        },
    )
    assert answer.responses[0].error_code == E.topic_authorization_failed


async def test_transactions_and_producer_ids() -> None:
    broker = describe_only()
    answer = await call(
        producer_ids.handle,
        broker,
        22,
        5,
        {"transactional_id": "tx", "transaction_timeout": datetime.timedelta(seconds=60)},
    )
    assert answer.error_code == E.transactional_id_authorization_failed
    answer = await call(
        producer_ids.handle,
        broker,
        22,
        5,
        {"transactional_id": None, "transaction_timeout": datetime.timedelta(seconds=60)},
    )
    assert answer.error_code == E.cluster_authorization_failed
    answer = await call(
        transactions.add_partitions_to_txn,
        broker,
        24,
        3,
        {
            "v3_and_below_transactional_id": "tx",
            "v3_and_below_producer_id": 1,
            "v3_and_below_producer_epoch": 0,
            "v3_and_below_topics": [{"name": "orders", "partitions": [0]}],
        },
    )
    result = answer.results_by_topic_v3_and_below[0].results_by_partition[0]
    assert result.partition_error_code == E.transactional_id_authorization_failed
    answer = await call(
        transactions.add_offsets_to_txn,
        broker,
        25,
        4,
        {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "group_id": "g"},
    )
    assert answer.error_code == E.transactional_id_authorization_failed
    answer = await call(
        transactions.end_txn,
        broker,
        26,
        4,
        {"transactional_id": "tx", "producer_id": 1, "producer_epoch": 0, "committed": True},
    )
    assert answer.error_code == E.transactional_id_authorization_failed
    answer = await call(
        transactions.describe_producers,
        broker,
        61,
        0,
        {"topics": [{"name": "orders", "partition_indexes": [0]}]},
    )
    assert answer.topics[0].partitions[0].error_code == E.topic_authorization_failed
    # Each refused id is answered in full (the answer could not be encoded before: the
    # connection was closed and a traceback logged for every such request).
    request, ctx = request_and_context(65, 0, {"transactional_ids": ["tx", "ty"]}, PRINCIPAL)
    answer = await settled(await transactions.describe_transactions(broker, ctx, request))
    # Encodable as the server sends it (kio's reader cannot parse the -1 start time Kafka
    # sends for "no transaction", so the answer is checked before encoding).
    assert b"".join(bytes(part) for part in encode_response(1, answer))
    assert [(s.transactional_id, s.error_code) for s in answer.transaction_states] == [
        ("tx", E.transactional_id_authorization_failed),
        ("ty", E.transactional_id_authorization_failed),
    ]


async def test_cluster_apis_need_cluster_operations() -> None:
    broker = describe_only()
    answer = await call(reassignments.list_partition_reassignments, broker, 46, 0, {"topics": None})
    assert answer.error_code == E.cluster_authorization_failed
    answer = await call(
        client_quotas.describe_client_quotas, broker, 48, 1, {"components": [], "strict": False}
    )
    assert answer.error_code == E.cluster_authorization_failed
    answer = await call(
        acls.create_acls,
        broker,
        30,
        3,
        {
            "creations": [
                {
                    "resource_type": 2,
                    "resource_name": "t",
                    "resource_pattern_type": 3,
                    "principal": PRINCIPAL,
                    "host": "*",
                    "operation": 3,
                    "permission_type": 3,
                }
            ]
        },
    )
    assert answer.results[0].error_code == E.cluster_authorization_failed
    # Moving leaders needs ALTER on the cluster.
    answer = await call(
        elect_leaders.elect_leaders,
        broker,
        43,
        2,
        {"election_type": 0, "topic_partitions": [{"topic": "orders", "partitions": [0, 1]}]},
    )
    assert answer.error_code == E.cluster_authorization_failed
    assert [p.error_code for p in answer.replica_election_results[0].partition_result] == [
        E.cluster_authorization_failed
    ] * 2


async def test_quorum_needs_describe_on_the_cluster() -> None:
    # Refused before the controllers are asked (FakeBroker's controller is untouchable).
    answer = await call(
        describe_quorum.handle,
        FakeBroker(),
        55,
        2,
        {"topics": [{"topic_name": "__cluster_metadata", "partitions": [{"partition_index": 0}]}]},
    )
    assert answer.error_code == E.cluster_authorization_failed and answer.topics == ()


async def test_unregistration_and_features_need_alter_on_the_cluster() -> None:
    # Refused before the controllers are asked (FakeBroker's controller is untouchable).
    answer = await call(unregister_broker.handle, FakeBroker(), 64, 0, {"broker_id": 3})
    assert answer.error_code == E.cluster_authorization_failed
    update = {"feature_updates": [{"feature": "transaction.version", "max_version_level": 1}]}
    answer = await call(features.update_features, FakeBroker(), 57, 1, update)
    assert answer.error_code == E.cluster_authorization_failed and answer.results == ()


async def test_scram_descriptions_refused_name_each_user_asked_for() -> None:
    # As Kafka's error answer: one result per user asked for, each refused, no names.
    users = {"users": [{"name": "admin"}, {"name": "bob"}]}
    answer = await call(scram_credentials.describe, FakeBroker(), 50, 0, users)
    assert answer.error_code == E.cluster_authorization_failed
    assert [(r.user, r.error_code) for r in answer.results] == [
        ("", E.cluster_authorization_failed)
    ] * 2
    answer = await call(scram_credentials.describe, FakeBroker(), 50, 0, {"users": None})
    assert answer.error_code == E.cluster_authorization_failed and answer.results == ()


async def test_log_dirs_need_describe_on_the_cluster() -> None:
    answer = await call(log_dirs.describe_log_dirs, FakeBroker(), 35, 4, {"topics": None})
    assert answer.error_code == E.cluster_authorization_failed and answer.results == ()


async def test_metadata_hides_and_refuses() -> None:
    answer = await call(metadata.handle, FakeBroker(), 3, 12, {"topics": None})
    assert answer.topics == ()
    answer = await call(
        metadata.handle,
        FakeBroker(),
        3,
        12,
        {"topics": [{"name": "orders"}], "allow_auto_topic_creation": False},
    )
    assert answer.topics[0].error_code == E.topic_authorization_failed


@pytest.fixture(autouse=True)
def _no_routing(monkeypatch: pytest.MonkeyPatch) -> None:
    # Metadata's AZ routing reads the broker's endpoints; none matter here.
    from broker.metadata import metadata_handler as metadata_module

    monkeypatch.setattr(metadata_module, "request_routing", lambda *_: None)


async def test_describe_cluster_answers_everyone_and_withholds_only_the_operations() -> None:
    """As Kafka: no DESCRIBE on the cluster still gets the brokers and the cluster id;
    the authorized operations asked for are 0."""
    answer = await call(
        cluster.handle,
        describe_only(),
        60,
        1,
        {"include_cluster_authorized_operations": True, "endpoint_type": 1},
    )
    assert answer.error_code == E.none and answer.cluster_id == "unit-cluster"
    assert answer.cluster_authorized_operations == 0


async def test_delete_topics_by_id_does_not_name_a_topic_the_caller_may_not_describe() -> None:
    answer = await call(
        topics_admin.delete_topics,
        FakeBroker(),  # no ACL at all
        20,
        6,
        {"topics": [{"name": None, "topic_id": TOPIC.topic_id}], "timeout": 5000},
    )
    [entry] = answer.responses
    assert (entry.name, entry.error_code) == (None, E.topic_authorization_failed)
    # DESCRIBE without DELETE: the name is known to the caller anyway, the delete refused.
    answer = await call(
        topics_admin.delete_topics,
        describe_only(),
        20,
        6,
        {"topics": [{"name": None, "topic_id": TOPIC.topic_id}], "timeout": 5000},
    )
    [entry] = answer.responses
    assert (entry.name, entry.error_code) == ("orders", E.topic_authorization_failed)


async def test_delete_topics_with_no_time_left_times_out_before_any_check() -> None:
    """Timeout 0 (or less): Kafka's controller looks the topics up with a deadline already
    passed, so every topic of the request is REQUEST_TIMED_OUT, before authorization and
    unknown topics, and nothing is deleted (the stand-in storage has no delete)."""
    unknown_id = uuid.UUID(int=99)
    for timeout in (0, -1):
        answer = await call(
            topics_admin.delete_topics,
            FakeBroker(),  # no ACL at all: TOPIC_AUTHORIZATION_FAILED with time left
            20,
            6,
            {
                "topics": [
                    {"name": "orders", "topic_id": None},
                    {"name": "unknown", "topic_id": None},
                    {"name": None, "topic_id": TOPIC.topic_id},
                    {"name": None, "topic_id": unknown_id},
                ],
                "timeout": timeout,
            },
        )
        assert [(e.name, e.topic_id, e.error_code, e.error_message) for e in answer.responses] == [
            ("orders", None, E.request_timed_out, None),
            ("unknown", None, E.request_timed_out, None),
            (None, TOPIC.topic_id, E.request_timed_out, None),
            (None, unknown_id, E.request_timed_out, None),
        ]
    answer = await call(
        topics_admin.delete_topics, FakeBroker(), 20, 5, {"topic_names": ["orders"], "timeout": 0}
    )
    assert [(e.name, e.error_code) for e in answer.responses] == [("orders", E.request_timed_out)]
    # No topic to look up: answered as ever.
    answer = await call(
        topics_admin.delete_topics, FakeBroker(), 20, 6, {"topics": [], "timeout": 0}
    )
    assert answer.responses == ()


async def test_create_with_no_time_left_times_out_when_the_controller_has_work() -> None:
    """CreateTopics / CreatePartitions at timeout 0 (or less): Kafka's controller runs them
    with a deadline already passed, so a request with anything left to make (the caller may,
    the name is given once) fails whole: every topic REQUEST_TIMED_OUT, nothing made (the
    stand-in controller refuses any call). With nothing left it is answered as ever."""
    may = FakeBroker(
        AclBinding(2, "orders-new", 3, PRINCIPAL, "*", 5, 3),  # CREATE
        AclBinding(2, "orders", 3, PRINCIPAL, "*", 7, 3),  # ALTER
    )
    for timeout in (0, -1):
        answer = await call(
            topics_admin.create_topics,
            may,
            19,
            7,
            {"topics": [{"name": "orders-new"}, {"name": "refused"}], "timeout": timeout},
        )
        assert [(t.name, t.error_code, t.num_partitions, t.topic_id) for t in answer.topics] == [
            ("orders-new", E.request_timed_out, -1, None),
            ("refused", E.request_timed_out, -1, None),
        ]
        answer = await call(
            topics_admin.create_partitions,
            may,
            37,
            3,
            {"topics": [{"name": "orders", "count": 2}], "timeout": timeout},
        )
        assert [(r.name, r.error_code) for r in answer.results] == [("orders", E.request_timed_out)]
    answer = await call(
        topics_admin.create_topics, FakeBroker(), 19, 7, {"topics": [{"name": "orders-new"}]}
    )
    assert answer.topics[0].error_code == E.topic_authorization_failed
    answer = await call(
        topics_admin.create_partitions,
        may,
        37,
        3,
        {"topics": [{"name": "orders", "count": 2}] * 2, "timeout": 0},
    )
    assert [(r.name, r.error_code) for r in answer.results] == [("orders", E.invalid_request)]
