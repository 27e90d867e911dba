"""Corrupt record batches with a valid CRC (issue 12, item 4): each is refused with Kafka's
error for its partition, nothing of it is stored (the high watermark does not move, the next
honest producer gets the next offsets, a stock consumer reads only good records), and the
other partitions of the same request still succeed.

Raw Produce frames over a socket, because no stock client writes these bytes; the honest
producing and all consuming is done by stock clients.
"""

from __future__ import annotations

import random
import socket
import time
from collections.abc import Callable

import pytest
from confluent_kafka import KafkaError, Producer
from kio.index import load_response_schema
from kio.schema.response_header.v1.header import ResponseHeader as ResponseHeaderV1
from kio.serial import entity_reader

from protocol.compression import GZIP, LZ4, SNAPPY, ZSTD, compress

from ._batches import Record, build_batch, build_raw_batch, encode_record
from ._kafka import Msg, confluent_consume, confluent_create_topic, confluent_produce
from .conftest import SluiceBroker
from .test_hostile_input import IO_TIMEOUT_S, produce_request, recv_frame

pytestmark = pytest.mark.e2e

CORRUPT_MESSAGE, MESSAGE_TOO_LARGE, INVALID_TIMESTAMP, INVALID_RECORD = 2, 10, 32, 87
# Past the broker's decompression limit (protocol.compression.MAX_DECOMPRESSED_BYTES, 64 MiB),
# in ~2 KiB of zstd.
BOMB_BYTES = 65 * 1024 * 1024


def _raw(payload: bytes, count: int, now: int, codec: int = 0, **kw: int) -> bytes:
    return build_raw_batch(
        payload, records_count=count, base_timestamp_ms=now, attributes=codec, **kw
    )


def _records(n: int, key: bytes | None = b"k", first_delta: int = 0) -> bytes:
    return b"".join(encode_record(Record(key, b"bad-%d" % i), first_delta + i) for i in range(n))


# (name, batch maker given "now", expected error code)
CASES: list[tuple[str, Callable[[int], bytes], int]] = [
    *[
        (
            f"{name}-over-garbage",
            lambda now, c=codec: _raw(random.Random(c).randbytes(200), 1, now, c),
            2,
        )
        for name, codec in (("gzip", GZIP), ("snappy", SNAPPY), ("lz4", LZ4), ("zstd", ZSTD))
    ],
    *[
        (f"codec-{c}", lambda now, c=c: _raw(_records(1), 1, now, c), CORRUPT_MESSAGE)
        for c in (5, 6, 7)
    ],
    ("body-not-records", lambda now: _raw(b"\x7fnot records at all" * 4, 1, now), INVALID_RECORD),
    ("count-2^31-1-around-one", lambda now: _raw(_records(1), 2**31 - 1, now), INVALID_RECORD),
    ("count-1000-around-one", lambda now: _raw(_records(1), 1000, now), INVALID_RECORD),
    ("count-1-around-three", lambda now: _raw(_records(3), 1, now), INVALID_RECORD),
    ("offset-delta-5-of-one", lambda now: _raw(_records(1, first_delta=5), 1, now), INVALID_RECORD),
    (
        "zstd-count-1000-around-one",
        lambda now: _raw(compress(ZSTD, _records(1)), 1000, now, ZSTD),
        INVALID_RECORD,
    ),
    ("control-batch", lambda now: _raw(_records(1), 1, now, 0x20), INVALID_RECORD),
    (
        "zstd-bomb",
        lambda now: _raw(compress(ZSTD, bytes(BOMB_BYTES)), 1, now, ZSTD),
        MESSAGE_TOO_LARGE,
    ),
]


def _produce_raw(broker: SluiceBroker, topic: str, batches: dict[int, bytes]) -> dict[int, object]:
    with socket.create_connection((broker.host, broker.port), timeout=IO_TIMEOUT_S) as s:
        s.sendall(produce_request(topic, batches, correlation_id=77))
        data = recv_frame(s)
    header, used = entity_reader(ResponseHeaderV1)(data, 0)
    assert header.correlation_id == 77
    resp, _ = entity_reader(load_response_schema(0, 9))(data, used)
    (t,) = resp.responses
    return {p.index: p for p in t.partition_responses}


def test_corrupt_batches_refused_nothing_stored_others_succeed(
    broker: SluiceBroker, topic: str
) -> None:
    good_partition = len(CASES)
    confluent_create_topic(broker.bootstrap, topic, partitions=len(CASES) + 1)
    now = int(time.time() * 1000)
    batches = {i: make(now) for i, (_, make, _) in enumerate(CASES)}
    batches[good_partition] = build_batch([Record(b"good", b"batch")], base_timestamp_ms=now)

    answers = _produce_raw(broker, topic, batches)
    got = {i: (int(answers[i].error_code), answers[i].error_message) for i in answers}
    want = {i: code for i, (_, _, code) in enumerate(CASES)} | {good_partition: 0}
    assert {i: code for i, (code, _) in got.items()} == want, {
        CASES[i][0] if i < len(CASES) else "good": got[i] for i in got
    }
    assert all(msg for i, (code, msg) in got.items() if code), "refusals must say why"
    assert answers[good_partition].base_offset == 0

    # Nothing was stored: an honest producer gets offset 0 on every refused partition (not
    # 1000 or 2147483647 after a lying count) and a stock consumer reads only good records.
    parts = list(range(len(CASES) + 1))
    honest = [Msg(b"honest", b"%d" % p) for p in parts]
    for p, m in zip(parts, honest, strict=True):
        delivered = confluent_produce(broker.bootstrap, topic, [m], partition=p)
        assert delivered == [(p, 1 if p == good_partition else 0)], (
            CASES[p][0] if p < len(CASES) else p
        )
    read = confluent_consume(broker.bootstrap, topic, partitions=parts, expected=len(parts) + 1)
    assert sorted((g.partition, g.offset, g.key, g.value) for g in read) == sorted(
        [(p, 0, b"honest", b"%d" % p) for p in parts if p != good_partition]
        + [
            (good_partition, 0, b"good", b"batch"),
            (good_partition, 1, b"honest", b"%d" % good_partition),
        ]
    )


def test_keyless_record_on_compacted_topic(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(broker.bootstrap, topic, config={"cleanup.policy": "compact"})
    now = int(time.time() * 1000)
    payload = b"".join(encode_record(Record(None if i == 1 else b"k", b"v"), i) for i in range(3))
    answer = _produce_raw(broker, topic, {0: _raw(payload, 3, now)})[0]
    assert int(answer.error_code) == INVALID_RECORD
    assert [e.batch_index for e in answer.record_errors] == [1]  # ProduceResponse v8+
    assert answer.error_message

    # A stock producer is told the same, and keyed records (tombstones too) still go in.
    errors: list[int] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    producer.produce(
        topic,
        value=b"no key",
        partition=0,
        on_delivery=lambda err, _msg: errors.append(err.code() if err else 0),
    )
    producer.flush(30)
    assert errors == [KafkaError.INVALID_RECORD]
    delivered = confluent_produce(broker.bootstrap, topic, [Msg(b"k", b"v"), Msg(b"k", None)])
    assert delivered == [(0, 0), (0, 1)]
    # The operator sees each client's refusal once, with its reason.
    refused = [
        line
        for line in broker.log_tail(since=broker.log_mark).splitlines()
        if "refused Produce from client" in line and topic in line
    ]
    assert len(refused) == 2, refused  # the raw client and the stock producer
    assert all("INVALID_RECORD" in line for line in refused), refused


def test_timestamps_outside_the_topic_limits(broker: SluiceBroker, topic: str) -> None:
    confluent_create_topic(
        broker.bootstrap,
        topic,
        config={
            "message.timestamp.before.max.ms": "3600000",
            "message.timestamp.after.max.ms": "60000",
        },
    )
    now = int(time.time() * 1000)
    payload = b"".join(
        encode_record(Record(b"k", b"v"), i, d) for i, d in enumerate([0, -7_200_000, 600_000])
    )
    answer = _produce_raw(broker, topic, {0: _raw(payload, 3, now)})[0]
    assert int(answer.error_code) == INVALID_TIMESTAMP
    assert [e.batch_index for e in answer.record_errors] == [1, 2]

    # librdkafka's own timestamps: a record from 10 minutes ahead is refused, one from now not.
    errors: list[int] = []
    producer = Producer({"bootstrap.servers": broker.bootstrap, "linger.ms": 0})
    producer.produce(
        topic,
        key=b"k",
        value=b"future",
        partition=0,
        timestamp=now + 600_000,
        on_delivery=lambda err, _msg: errors.append(err.code() if err else 0),
    )
    producer.flush(30)
    assert errors == [KafkaError.INVALID_TIMESTAMP]
    assert confluent_produce(broker.bootstrap, topic, [Msg(b"k", b"now")]) == [(0, 0)]
