"""Idempotent producers get producer ids of their own, whatever their InitProducerId says."""

from __future__ import annotations

import concurrent.futures

import confluent_kafka
import pytest

from ._kafka import confluent_consume, confluent_create_topic, unique_topic
from ._nodejs import platformatic_produce

pytestmark = pytest.mark.e2e


def _keys(bootstrap: str, topic: str) -> list[bytes]:
    # Up to the high watermark: every record the producers were told is written.
    return sorted(g.key for g in confluent_consume(bootstrap, topic))


def test_restarted_nodejs_idempotent_producer_loses_nothing(broker) -> None:  # type: ignore[no-untyped-def]
    # @platformatic/kafka asks InitProducerId (v5) with producer id 0 / epoch 0 and no
    # transactional id; a restarted application does it again. Each run must get its own
    # id: with a shared one the second run's sequences restart at 0 and its records were
    # answered as duplicates of the first run's and never stored.
    topic = unique_topic("pid-restart")
    confluent_create_topic(broker.bootstrap, topic, partitions=1)
    first = platformatic_produce(broker.bootstrap, topic, 15, "first")
    second = platformatic_produce(broker.bootstrap, topic, 15, "second")
    assert first.get("sent") == second.get("sent") == 15, (first, second)
    assert first["producerId"] != second["producerId"]
    expected = sorted(f"{p}-{i}".encode() for p in ("first", "second") for i in range(15))
    assert _keys(broker.bootstrap, topic) == expected


def test_concurrent_nodejs_idempotent_producers_lose_nothing(broker) -> None:  # type: ignore[no-untyped-def]
    topic = unique_topic("pid-concurrent")
    confluent_create_topic(broker.bootstrap, topic, partitions=1)
    with concurrent.futures.ThreadPoolExecutor(3) as pool:
        runs = [
            pool.submit(platformatic_produce, broker.bootstrap, topic, 20, f"app{n}")
            for n in range(3)
        ]
        results = [r.result() for r in runs]
    assert [r.get("sent") for r in results] == [20] * 3, results
    assert len({r["producerId"] for r in results}) == 3
    expected = sorted(f"app{n}-{i}".encode() for n in range(3) for i in range(20))
    assert _keys(broker.bootstrap, topic) == expected


def test_transaction_timeout_over_the_maximum_is_refused(broker) -> None:  # type: ignore[no-untyped-def]
    # transaction.max.timeout.ms (900000 by default) bounds what a producer may ask for.
    producer = confluent_kafka.Producer(
        {
            "bootstrap.servers": broker.bootstrap,
            "transactional.id": unique_topic("tx-timeout"),
            "transaction.timeout.ms": 900_001,
        }
    )
    with pytest.raises(confluent_kafka.KafkaException) as failure:
        producer.init_transactions(10)
    assert failure.value.args[0].code() == confluent_kafka.KafkaError.INVALID_TRANSACTION_TIMEOUT


def test_refused_topic_configs_are_logged_once_per_client(broker) -> None:  # type: ignore[no-untyped-def]
    topic = unique_topic("refused")
    for _ in range(2):
        with pytest.raises(confluent_kafka.KafkaException, match=r"cleanup\.policy"):
            confluent_create_topic(broker.bootstrap, topic, config={"cleanup.policy": "bogus"})
    log = broker.log_tail(since=broker.log_mark)
    refused = [line for line in log.splitlines() if "refused CreateTopics from client" in line]
    assert len(refused) == 1, log
    assert "INVALID_CONFIG" in refused[0] and "127.0.0.1:" in refused[0], refused
