"""What one client writes, every other client reads back identically.

Each client produces with its own Produce version and batch encoding, and each consumer fetches
with its own Fetch version (confluent 16 with topic IDs, kafka-python 12, aiokafka 11, kcat's
older librdkafka), so this catches a broker that only round-trips data for the client it
happened to be developed against.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from ._kafka import (
    Got,
    Msg,
    aiokafka_consume,
    assert_same,
    confluent_consume,
    confluent_create_topic,
    confluent_produce,
    expected_single_partition,
    kafka_python_consume,
    kcat,
    kcat_consume_json,
)
from .conftest import SluiceBroker

pytestmark = pytest.mark.e2e

# Text only, so kcat's JSON output (which is not binary-safe) can be compared exactly.
MSGS = [
    Msg(f"k{i % 5}".encode(), f"value {i}".encode() * (1 + i % 9), [("n", str(i).encode())])
    for i in range(80)
] + [Msg(b"tomb", None, []), Msg(None, b"keyless", [("a", b"1"), ("a", b"2")])]


def produce_confluent(bootstrap: str, topic: str) -> None:
    confluent_produce(bootstrap, topic, MSGS, **{"compression.type": "lz4"})


def produce_kafka_python(bootstrap: str, topic: str) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, compression_type="gzip", linger_ms=5)
    try:
        futs = [
            p.send(topic, key=m.key, value=m.value, headers=list(m.headers), partition=0)
            for m in MSGS
        ]
        p.flush(30)
        for f in futs:
            f.get(30)
    finally:
        p.close(10)


def produce_aiokafka(bootstrap: str, topic: str) -> None:
    from aiokafka import AIOKafkaProducer

    async def run() -> None:
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, compression_type="zstd", linger_ms=5)
        await p.start()
        try:
            futs = [
                await p.send(topic, key=m.key, value=m.value, headers=list(m.headers), partition=0)
                for m in MSGS
            ]
            for f in futs:
                await f
        finally:
            await p.stop()

    asyncio.run(run())


def produce_kcat(bootstrap: str, topic: str) -> None:
    # kcat applies the same headers to every message it sends in one run, and cannot send a
    # null key next to a non-null one, so it runs once per message shape.
    for m in MSGS:
        args = ["-b", bootstrap, "-P", "-t", topic, "-p", "0", "-X", "compression.codec=snappy"]
        for hk, hv in m.headers:
            args += ["-H", f"{hk}={(hv or b'').decode()}"]
        if m.key is not None:
            args += ["-K", "\t"]
            line = m.key + b"\t" + (m.value or b"")
        else:
            line = m.value or b""
        if m.value is None:
            args += ["-Z"]
        kcat(args, stdin=line + b"\n")


PRODUCERS: dict[str, Callable[[str, str], None]] = {
    "confluent": produce_confluent,
    "kafka-python": produce_kafka_python,
    "aiokafka": produce_aiokafka,
    "kcat": produce_kcat,
}
CONSUMERS: dict[str, Callable[[str, str, int], list[Got]]] = {
    "confluent": lambda b, t, n: confluent_consume(b, t, expected=n),
    "kafka-python": lambda b, t, n: kafka_python_consume(b, t, expected=n),
    "aiokafka": lambda b, t, n: aiokafka_consume(b, t, expected=n),
    "kcat": kcat_consume_json,
}


@pytest.mark.parametrize("producer", list(PRODUCERS))
def test_every_client_reads_what_one_wrote(broker: SluiceBroker, topic: str, producer: str) -> None:
    confluent_create_topic(broker.bootstrap, topic)
    PRODUCERS[producer](broker.bootstrap, topic)
    expected = expected_single_partition(MSGS)
    failures: list[str] = []
    for name, consume in CONSUMERS.items():
        # Check every consumer, then report all that failed: which ones break is the clue.
        try:
            assert_same(consume(broker.bootstrap, topic, len(MSGS)), expected)
        except Exception as exc:
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    assert not failures, f"written by {producer}, misread by:\n" + "\n".join(failures)
