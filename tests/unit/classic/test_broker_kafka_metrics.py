"""Kafka's metrics counted by real brokers (two, in one event loop, with a real controller):
requests over a real connection, bytes in/out of a classic topic, a follower's lag."""

from __future__ import annotations

from typing import Any

from kio.schema.errors import ErrorCode

from broker.logs.classic.kafka_client import KafkaConnection
from broker.node import Broker
from broker.server.metrics import METRICS
from tests.fixtures.brokers import eventually
from tests.unit._handlers import fetch_body, request_and_context
from tests.unit.classic.test_brokers import batch, produce_body
from tests.unit.test_broker_controller_mode import call

E = ErrorCode


def value(name: str, **labels: str) -> float:
    return METRICS.registry.get_sample_value(name, labels) or 0.0


def requests(request: str) -> float:
    return value("kafka_network_requestmetrics_totaltimems_count", request=request)


async def send(conn: KafkaConnection, key: int, version: int, body: dict[str, Any]) -> Any:
    request, _ctx = request_and_context(key, version, body)
    return await conn.request(request, 10.0)


async def test_kafka_metrics_of_a_classic_leader(classic_brokers: list[Broker]) -> None:
    b1, b2 = classic_brokers
    created = await call(
        b1,
        19,
        7,
        {
            "topics": [
                {
                    "name": "lagged",
                    "num_partitions": -1,
                    "replication_factor": -1,
                    "assignments": [{"partition_index": 0, "broker_ids": [1, 2]}],
                    "configs": [{"name": "diskless.enable", "value": "false"}],
                }
            ],
            "timeout": 5000,
            "validate_only": False,
        },
    )
    assert created.topics[0].error_code == E.none, created.topics[0].error_message
    assert b1.classic is not None and b2.classic is not None
    await eventually(lambda: b1.classic.partitions and b2.classic.partitions)
    # METRICS is the process's: these brokers share it, other tests counted before.
    topic = {"topic": "lagged"}
    before = {
        "in": value("kafka_server_brokertopicmetrics_messagesin_total", **topic),
        "bytes": value("kafka_server_brokertopicmetrics_bytesin_total", **topic),
        "out": value("kafka_server_brokertopicmetrics_bytesout_total", **topic),
        "all": value("kafka_server_brokertopicmetrics_bytesout_total"),
        "repl_out": value("kafka_server_brokertopicmetrics_replicationbytesout_total"),
        "repl_in": value("kafka_server_brokertopicmetrics_replicationbytesin_total"),
        "produce": requests("Produce"),
        "fetch": requests("Fetch"),
        "consumer": requests("FetchConsumer"),
        "follower": requests("FetchFollower"),
    }

    # A producer and a consumer over a real connection to the leader.
    conn = KafkaConnection("127.0.0.1", b1.port, "metrics-test")
    try:
        records = batch(3)
        answer = await send(conn, 0, 9, produce_body("lagged", records, acks=-1))
        assert answer.responses[0].partition_responses[0].error_code == E.none
        fetched = await send(conn, 1, 12, fetch_body("lagged", 0))
        got = fetched.responses[0].partitions[0].records
        assert got is not None and len(got) == len(records)
    finally:
        conn.close()

    assert value("kafka_server_brokertopicmetrics_messagesin_total", **topic) - before["in"] == 3
    assert value("kafka_server_brokertopicmetrics_bytesin_total", **topic) - before["bytes"] == (
        len(records)
    )
    # Bytes out: the consumer's fetch only (the follower's replication is not counted).
    assert value("kafka_server_brokertopicmetrics_bytesout_total", **topic) - before["out"] == (
        len(records)
    )
    assert value("kafka_server_brokertopicmetrics_bytesout_total") - before["all"] == len(records)
    # The follower's copy: replication bytes out of the leader, in of the follower.
    repl_out = value("kafka_server_brokertopicmetrics_replicationbytesout_total")
    repl_in = value("kafka_server_brokertopicmetrics_replicationbytesin_total")
    assert repl_out - before["repl_out"] >= len(records)
    assert repl_in - before["repl_in"] >= len(records)
    assert requests("Produce") - before["produce"] == 1
    assert requests("FetchConsumer") - before["consumer"] == 1
    # The follower's fetches count as Fetch and FetchFollower (as Kafka's RequestMetrics).
    follower_fetches = requests("FetchFollower") - before["follower"]
    assert follower_fetches >= 1
    assert requests("Fetch") - before["fetch"] >= 1 + follower_fetches
    assert value("kafka_network_requestmetrics_requests_total", request="Produce", version="9") >= 1

    # One broker per process in production; here the last one made (b2) is watched: it
    # hosts the one partition, as a follower, caught up.
    assert value("kafka_server_replicamanager_partitioncount") == 1
    assert value("kafka_server_replicamanager_leadercount") == 0
    assert (
        METRICS.registry.get_sample_value(
            "kafka_server_replicafetchermanager_maxlag", {"clientId": "Replica"}
        )
        == 0
    )
    METRICS.watch_followers(b1.classic.follower_lags)
    try:
        await follower_lag(classic_brokers, b1, b2)
    finally:
        METRICS.watch_followers(tuple)
        METRICS.watch_replica_counts(lambda: (0, 0), lambda: 0)


async def follower_lag(nodes: list[Broker], b1: Broker, b2: Broker) -> None:
    assert b1.classic is not None
    # The follower caught up (acks=all answered): no lag in messages.
    lag = {"topic": "lagged", "partition": "0", "follower": "2"}
    assert METRICS.registry.get_sample_value("sluice_replica_follower_lag_messages", lag) == 0

    # The follower's broker stops: what the leader appends since is its lag, and the time
    # since it was last caught up grows.
    await b2.stop()
    nodes.remove(b2)  # stopped here, not again by the fixture
    leader = next(iter(b1.classic.partitions.values()))
    end = leader.log.log_end_offset
    answer = await call(b1, 0, 9, produce_body("lagged", batch(4), acks=1))
    assert answer.responses[0].partition_responses[0].error_code == E.none
    assert leader.log.log_end_offset == end + 4
    assert value("sluice_replica_follower_lag_messages", **lag) == 4
    await eventually(lambda: value("sluice_replica_follower_lag_seconds", **lag) >= 0.3)
    # Only the leader reports its followers.
    assert (
        METRICS.registry.get_sample_value(
            "sluice_replica_follower_lag_messages", {**lag, "follower": "1"}
        )
        is None
    )


async def test_consumer_group_lag_by_kafka_exporter_names(classic_brokers: list[Broker]) -> None:
    b1, _b2 = classic_brokers
    classic = [{"partition_index": 0, "broker_ids": [1, 2]}]
    for name, assignments, configs in (
        ("c", classic, [{"name": "diskless.enable", "value": "false"}]),
        ("d", [], []),  # diskless, one partition
    ):
        created = await call(
            b1,
            19,
            7,
            {
                "topics": [
                    {
                        "name": name,
                        "num_partitions": -1 if assignments else 1,
                        "replication_factor": -1,
                        "assignments": assignments,
                        "configs": configs,
                    }
                ],
                "timeout": 5000,
                "validate_only": False,
            },
        )
        assert created.topics[0].error_code == E.none, created.topics[0].error_message
    assert b1.classic is not None
    await eventually(lambda: len(b1.classic.partitions) == 1)
    for name, n in (("c", 5), ("d", 7)):
        answer = await call(b1, 0, 9, produce_body(name, batch(n)))
        assert answer.responses[0].partition_responses[0].error_code == E.none
    # A group broker 1 coordinates (c's leader too: it reports both partitions).
    group = next(g for g in (f"g{i}" for i in range(100)) if b1.groups.coordinator.owns(g))
    committed = await call(
        b1,
        8,
        8,
        {
            "group_id": group,
            "generation_id_or_member_epoch": -1,
            "member_id": "",
            "group_instance_id": None,
            "topics": [
                {
                    "name": name,
                    "partitions": [
                        {
                            "partition_index": 0,
                            "committed_offset": offset,
                            "committed_leader_epoch": -1,
                            "committed_metadata": None,
                        }
                    ],
                }
                for name, offset in (("c", 2), ("d", 3))
            ],
        },
    )
    assert [p.error_code for t in committed.topics for p in t.partitions] == [E.none, E.none]

    lags = await b1.group_lags()
    assert sorted(lags) == [(group, "c", 0, 2, 3), (group, "d", 0, 3, 4)]
    METRICS.group_lag.lags = lags
    try:
        labels = {"consumergroup": group, "topic": "c", "partition": "0"}
        assert value("kafka_consumergroup_lag", **labels) == 3
        assert value("kafka_consumergroup_current_offset", **labels) == 2
        assert value("kafka_consumergroup_lag_sum", consumergroup=group, topic="d") == 4
    finally:
        METRICS.group_lag.lags = []
