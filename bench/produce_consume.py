"""Load phases with the stock client (confluent-kafka): produce flat out, produce at a set
rate (latency), consume everything back, and time single Fetches of the tail."""

from __future__ import annotations

import os
import struct
import time
import uuid
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from protocol.records import parse_batches

from .kafka_wire import WireClient, fetch_body
from .stats import MiB, percentile

RECORD_SIZE = 1024
PARTITIONS = 6
FETCH_VERSION = 12  # by topic name; the newest version before topic ids


def create_topic(bootstrap: str, partitions: int = PARTITIONS) -> str:
    name = f"bench-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})  # must outlive the future
    admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1)])[
        name
    ].result(30)
    del admin
    return name


@dataclass
class ProduceResult:
    records: int  # handed to the client
    delivered: int  # acknowledged by the broker
    seconds: float
    latencies: list[float]  # seconds, sorted (latency runs only)
    truncated: bool
    errors: list[str] = field(default_factory=list)

    @property
    def mib(self) -> float:
        return self.delivered * RECORD_SIZE / MiB

    @property
    def mib_s(self) -> float:
        return self.mib / self.seconds if self.seconds > 0 else float("nan")

    def latency_ms(self, q: float) -> float:
        return percentile(self.latencies, q) * 1000


def producer_config(bootstrap: str, batch_size: int, queue_kib: int) -> dict[str, object]:
    """The benchmark producer's settings (acks=all, linger.ms=5), shared by every target so
    their figures stay comparable."""
    return {
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "batch.size": batch_size,
        "acks": "all",
        # 1 MiB batches plus framing must fit the client's own request limit.
        "message.max.bytes": 2 * MiB,
        # A bounded client buffer: with librdkafka's default (1 GiB) the whole run is
        # queued at once, so latency would mostly be time in the local queue and the
        # budget could not stop a slow run (enqueueing never blocks).
        "queue.buffering.max.messages": 1_000_000,
        "queue.buffering.max.kbytes": queue_kib,
    }


def produce(
    bootstrap: str,
    topic: str,
    mib: float,
    batch_size: int,
    budget_s: float,
    queue_kib: int,
    rate_mib_s: float | None = None,
) -> ProduceResult:
    """Produce ``mib`` MiB of 1 KiB records (acks=all, linger.ms=5); stops early after
    ``budget_s``.

    Flat out (no ``rate_mib_s``) this is a throughput run and the client is kept as cheap
    as it can be: on a 2-core machine every client cycle is one the broker and the store
    do not get, and a Python delivery callback per record costs about what the broker
    spends per record. So only failures are reported, and ``latencies`` stays empty.
    Paced at ``rate_mib_s`` it is a latency run: every record is timed from produce() to
    its delivery report.
    """
    n = int(mib * MiB) // RECORD_SIZE
    payload = os.urandom(RECORD_SIZE)
    errors: list[str] = []
    paced = rate_mib_s is not None and rate_mib_s > 0
    config = producer_config(bootstrap, batch_size, queue_kib)
    if not paced:
        config["delivery.report.only.error"] = True
        config["on_delivery"] = lambda err, msg: errors.append(str(err))
    producer = Producer(config)
    sent_at = [0.0] * n if paced else []
    latencies: list[float] = []
    append = latencies.append
    perf = time.perf_counter

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        # The key is the record's index: the cheapest way to find its send time again.
        if err is not None:
            errors.append(str(err))
            return
        append(perf() - sent_at[struct.unpack(">I", msg.key())[0]])

    callback = on_delivery if paced else None
    start = perf()
    deadline = start + budget_s
    per_tick = max(1, int((rate_mib_s or 0) * MiB / RECORD_SIZE * 0.005))
    truncated = False
    produced = 0
    if not paced:
        produced, truncated = produce_flat_out(producer, topic, payload, n, deadline)
        n = 0  # done: skip the per-record loop below
    for i in range(n):
        if paced and i % per_tick == 0:
            # per_tick records every 5 ms, on a fixed schedule (no drift).
            due = start + (i / per_tick) * 0.005
            while (wait := due - perf()) > 0:
                producer.poll(min(wait, 0.005))
        key = struct.pack(">I", i)
        while True:
            try:
                if paced:
                    sent_at[i] = perf()
                producer.produce(topic, payload, key, on_delivery=callback)
                break
            except BufferError:
                producer.poll(0.005)
        produced += 1
        if i % 1000 == 0:
            producer.poll(0)
            if perf() > deadline:
                truncated = True
                break
    remaining = producer.flush(120)
    elapsed = perf() - start
    if remaining:
        errors.append(f"{remaining} records undelivered after flush(120)")
    latencies.sort()
    delivered = len(latencies) if paced else produced - remaining - len(errors)
    return ProduceResult(produced, delivered, elapsed, latencies, truncated, errors)


# Records per produce_batch call in flat-out runs: ~1 MiB to one partition, partitions in
# turn (librdkafka still cuts batches at batch.size).
_CHUNK = 1024


def produce_flat_out(
    producer: Producer, topic: str, payload: bytes, n: int, deadline: float
) -> tuple[int, bool]:
    """Hand ``n`` records to the client in produce_batch calls: ~1.1 µs of client CPU per
    record instead of ~1.7 with a produce() call each, CPU the broker and the store get
    instead. Returns (records handed over, whether the deadline cut the run short)."""
    messages = [{"value": payload} for _ in range(_CHUNK)]
    produced = 0
    partition = 0
    while produced < n:
        if time.perf_counter() > deadline:
            return produced, True
        chunk = messages[: min(_CHUNK, n - produced)]
        queued = producer.produce_batch(topic, chunk, partition=partition)
        if queued < len(chunk):
            # The client's queue is full: the failed ones carry an error; clear it so
            # the dicts can be sent again, and let deliveries make room.
            for m in chunk:
                m.pop("_error", None)
            producer.poll(0.005)
        else:
            partition = (partition + 1) % PARTITIONS
            producer.poll(0)
        produced += queued
    return produced, False


def consume(bootstrap: str, topic: str, expected: int, budget_s: float) -> tuple[int, float]:
    """Read the topic from the beginning: (records, seconds from first record to last).

    Timed from the first record: the consumer's start-up (metadata, connection, first
    fetch) is a fixed cost that would otherwise dominate small runs.
    """
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"bench-{uuid.uuid4().hex[:6]}",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(PARTITIONS)])
        got = 0
        start = time.perf_counter()
        first: float | None = None
        deadline = start + budget_s
        while got < expected and time.perf_counter() < deadline:
            for m in consumer.consume(num_messages=10_000, timeout=0.5):
                if m.error() is None:
                    if first is None:
                        first = time.perf_counter()
                    got += 1
        end = time.perf_counter()
        if first is None:
            return 0, float("inf")
        # One record's worth of time is not a rate; fall back to the whole span.
        return got, end - first if end - first > 0.001 else end - start
    finally:
        consumer.close()


def high_watermarks(bootstrap: str, topic: str) -> list[tuple[int, int]]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        return [
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            for p in range(PARTITIONS)
        ]
    finally:
        consumer.close()


def tail_fetch_latencies(
    host: str,
    port: int,
    topic: str,
    watermarks: list[tuple[int, int]],
    tail_mib: float,
    fetches: int,
    partition_max_bytes: int = MiB,
) -> list[float]:
    """Seconds per Fetch of one partition's newest ``tail_mib / partitions`` MiB, walked
    in ``partition_max_bytes`` answers, partition after partition, until ``fetches``
    answers were timed. This is what a consumer at the tail asks for right after the data
    was produced: it should come from the broker's cache, never from the object store."""
    window = int(tail_mib * MiB / RECORD_SIZE / len(watermarks))
    out: list[float] = []
    with WireClient(host, port) as client:
        # Not timed: the first request of a connection pays for its set-up.
        client.call(1, FETCH_VERSION, fetch_body(topic, 0, watermarks[0][0], 1024))
        while len(out) < fetches:
            for partition, (low, high) in enumerate(watermarks):
                offset = max(low, high - window)
                while offset < high and len(out) < fetches:
                    t0 = time.perf_counter()
                    response = client.call(
                        1, FETCH_VERSION, fetch_body(topic, partition, offset, partition_max_bytes)
                    )
                    out.append(time.perf_counter() - t0)
                    part = response.responses[0].partitions[0]
                    if part.error_code != 0:
                        raise RuntimeError(f"fetch error {part.error_code} at {partition}/{offset}")
                    offset = _next_offset(part.records, offset)
            if not any(high > low for low, high in watermarks):
                break
    out.sort()
    return out


def _next_offset(records: bytes | None, offset: int) -> int:
    if not records:
        raise RuntimeError(f"empty fetch answer at offset {offset} below the high watermark")
    batches = parse_batches(memoryview(records), 1 << 31)
    last = batches[-1]
    (base,) = struct.unpack_from(">q", records, last.offset)
    return int(base) + last.last_offset_delta + 1
