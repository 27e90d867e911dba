"""Helpers shared by the e2e tests: message sets, and consume-everything loops per client.

Every loop here is bounded in time: a broker bug must turn into a failed assertion with the
data seen so far, never into a hung CI job.
"""

from __future__ import annotations

import asyncio
import json
import random
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

CONSUME_TIMEOUT_S = 30.0
# librdkafka's own test 0082 (fetch_max_bytes): 900 KiB records, a fetch answer limited to
# about one of them. librdkafka drops a connection whose answer is larger than
# receive.message.max.bytes, so a broker must keep Fetch within max_bytes (bar the first
# batch) or the consumer refetches the same offsets forever.
LIBRDKAFKA_0082_RECORD = 900 * 1024
LIBRDKAFKA_0082_CONSUMER = {
    "fetch.max.bytes": 1_000_000,
    "max.partition.fetch.bytes": 20_000_000,
    "receive.message.max.bytes": 1_000_512,
}
# After the expected count arrived, keep polling this long: a duplicate or a stray extra
# record must show up as a failure, not be silently cut off by stopping at exactly N.
SETTLE_S = 0.5
Headers = list[tuple[str, bytes | None]]


@dataclass(frozen=True)
class Msg:
    key: bytes | None
    value: bytes | None
    headers: Headers = field(default_factory=list)


@dataclass(frozen=True)
class Got:
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers
    timestamp: int | None = None


def unique_topic(hint: str = "t") -> str:
    # Test ids carry brackets and colons; Kafka topic names allow only [a-zA-Z0-9._-].
    clean = re.sub(r"[^a-zA-Z0-9._-]+", "-", hint).strip("-")[:60] or "t"
    return f"{clean}-{uuid.uuid4().hex[:8]}"


def standard_messages(n: int = 120, seed: int = 1) -> list[Msg]:
    """The message set most tests send: what users put in Kafka, edge cases included.

    Keys repeat (as with compaction keys), headers repeat names and keep their order, null and
    empty keys/values are distinct, bytes are arbitrary, and one value is large enough that
    it cannot share a 16 KiB batch with others.
    """
    rng = random.Random(seed)
    msgs: list[Msg] = []
    for i in range(n):
        headers: Headers = []
        if i % 3 == 0:
            headers = [("seq", str(i).encode()), ("dup", b"first"), ("dup", b"second")]
        msgs.append(Msg(f"key-{i % 7}".encode(), f"value-{i}-".encode() * (1 + i % 5), headers))
    msgs += [
        Msg(None, b"no key", []),
        Msg(b"tombstone-key", None, [("why", b"tombstone")]),
        Msg(b"", b"", []),
        Msg(b"bin\x00\xff", bytes(range(256)), [("bin", b"\x00\x01\xfe\xff")]),
        Msg(b"big-random", rng.randbytes(200_000), []),
        Msg(b"big-compressible", b"abcdefgh" * 40_000, [("size", b"320000")]),
        Msg(b"after-big", b"last", []),
    ]
    return msgs


def expected_single_partition(msgs: Sequence[Msg], partition: int = 0) -> list[Got]:
    return [Got(partition, i, m.key, m.value, list(m.headers)) for i, m in enumerate(msgs)]


def strip_ts(got: Iterable[Got]) -> list[Got]:
    return [Got(g.partition, g.offset, g.key, g.value, g.headers) for g in got]


def assert_same(got: Sequence[Got], expected: Sequence[Got]) -> None:
    """Compare record by record so a failure names the first differing offset."""
    got_n, exp_n = strip_ts(got), strip_ts(expected)
    for i, (g, e) in enumerate(zip(got_n, exp_n, strict=False)):
        assert g == e, f"record #{i} differs:\n  got      {_short(g)}\n  expected {_short(e)}"
    assert len(got_n) == len(exp_n), (
        f"got {len(got_n)} records, expected {len(exp_n)}; "
        f"first extra/missing: {_short((got_n + exp_n)[min(len(got_n), len(exp_n))])}"
    )


def _short(g: Got) -> str:
    def cut(b: bytes | None) -> str:
        if b is None:
            return "None"
        return repr(b[:40]) + (f"...({len(b)} bytes)" if len(b) > 40 else "")

    return f"p{g.partition}@{g.offset} key={cut(g.key)} value={cut(g.value)} headers={g.headers}"


# ---------------------------------------------------------------- confluent-kafka


def confluent_admin(bootstrap: str) -> AdminClient:
    return AdminClient({"bootstrap.servers": bootstrap})


def confluent_create_topic(
    bootstrap: str, topic: str, partitions: int = 1, config: dict[str, str] | None = None
) -> None:
    # The AdminClient must outlive the future: librdkafka fails pending requests with
    # _DESTROY when the handle is garbage collected.
    admin = confluent_admin(bootstrap)
    futures = admin.create_topics(
        [NewTopic(topic, num_partitions=partitions, replication_factor=1, config=config or {})],
        operation_timeout=15,
        request_timeout=15,
    )
    futures[topic].result(timeout=20)
    del admin


def confluent_consumer(bootstrap: str, **extra: object) -> Consumer:
    # group.id is mandatory for librdkafka's consumer even when only assign() is used; a
    # random one keeps tests independent. No offsets are committed.
    conf: dict[str, object] = {
        "bootstrap.servers": bootstrap,
        "group.id": f"e2e-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "enable.auto.offset.store": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
    }
    conf.update(extra)
    return Consumer(conf)


def confluent_consume(
    bootstrap: str,
    topic: str,
    partitions: Sequence[int] = (0,),
    expected: int | None = None,
    timeout: float = CONSUME_TIMEOUT_S,
    **extra: object,
) -> list[Got]:
    """Read from the beginning of the given partitions via assign(), not a group.

    With expected=None, reads up to each partition's high watermark as of the start.
    """
    consumer = confluent_consumer(bootstrap, **extra)
    try:
        if expected is None:
            expected = 0
            for p in partitions:
                _, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, p), timeout=10, cached=False
                )
                expected += high
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in partitions])
        out: list[Got] = []
        errors: list[str] = []
        deadline = time.monotonic() + timeout
        settle_until: float | None = None
        while time.monotonic() < deadline:
            if settle_until is not None and time.monotonic() >= settle_until:
                break
            msg = consumer.poll(0.2)
            if msg is None:
                continue
            err = msg.error()
            if err is not None:
                # Transient errors (e.g. a reconnect) are retried by librdkafka; keep them for
                # the failure message but stop only on fatal ones.
                errors.append(str(err))
                if err.fatal() or err.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    raise KafkaException(err)
                continue
            _ts_type, ts = msg.timestamp()
            out.append(
                Got(
                    msg.partition(),
                    msg.offset(),
                    msg.key(),
                    msg.value(),
                    list(msg.headers() or []),
                    ts,
                )
            )
            if len(out) >= expected and settle_until is None:
                settle_until = time.monotonic() + SETTLE_S
        if len(out) < expected:
            raise AssertionError(
                f"confluent consumer got {len(out)}/{expected} records from {topic} "
                f"in {timeout:.0f}s; client errors: {errors[-5:]}"
            )
        return out
    finally:
        consumer.close()


def confluent_produce(
    bootstrap: str,
    topic: str,
    msgs: Sequence[Msg],
    partition: int | None = 0,
    timestamps: Sequence[int] | None = None,
    **conf: object,
) -> list[tuple[int, int]]:
    """Produce and flush; raises on any delivery error. Returns (partition, offset) per msg."""
    from confluent_kafka import Producer

    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **conf})
    results: list[tuple[int, int] | None] = [None] * len(msgs)
    errors: list[str] = []

    def on_delivery(i: int):  # type: ignore[no-untyped-def]
        def cb(err, msg):  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(f"msg {i}: {err}")
            else:
                results[i] = (msg.partition(), msg.offset())

        return cb

    for i, m in enumerate(msgs):
        kwargs: dict[str, object] = {"key": m.key, "value": m.value, "on_delivery": on_delivery(i)}
        if m.headers:
            kwargs["headers"] = list(m.headers)
        if partition is not None:
            kwargs["partition"] = partition
        if timestamps is not None:
            kwargs["timestamp"] = timestamps[i]
        _produce_with_backpressure(producer, topic, kwargs)
    remaining = producer.flush(30)
    assert remaining == 0, f"{remaining} messages still undelivered after 30 s; errors: {errors}"
    assert not errors, f"delivery failed: {errors[:5]}"
    return [r if r is not None else (-1, -1) for r in results]


def _produce_with_backpressure(producer: object, topic: str, kwargs: dict[str, object]) -> None:
    while True:
        try:
            producer.produce(topic, **kwargs)  # type: ignore[attr-defined]
            producer.poll(0)  # type: ignore[attr-defined]
            return
        except BufferError:
            # Local queue full: serve delivery callbacks to make room, as apps are told to.
            producer.poll(0.1)  # type: ignore[attr-defined]


def confluent_topic_partitions(bootstrap: str, topic: str) -> int | None:
    md = confluent_admin(bootstrap).list_topics(topic=None, timeout=10)
    t = md.topics.get(topic)
    return None if t is None else len(t.partitions)


# ---------------------------------------------------------------- kafka-python


def kafka_python_consume(
    bootstrap: str,
    topic: str,
    partitions: Sequence[int] = (0,),
    expected: int = 0,
    timeout: float = CONSUME_TIMEOUT_S,
    **extra: object,
) -> list[Got]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=15_000,
        **extra,
    )
    try:
        tps = [KTP(topic, p) for p in partitions]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out: list[Got] = []
        deadline = time.monotonic() + timeout
        settle_until: float | None = None
        while time.monotonic() < deadline:
            if settle_until is not None and time.monotonic() >= settle_until:
                break
            batch = consumer.poll(timeout_ms=200)
            for _tp, records in sorted(batch.items(), key=lambda kv: kv[0].partition):
                for r in records:
                    out.append(
                        Got(r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp)
                    )
            if len(out) >= expected and settle_until is None:
                settle_until = time.monotonic() + SETTLE_S
        if len(out) < expected:
            raise AssertionError(
                f"kafka-python consumer got {len(out)}/{expected} records from {topic}"
            )
        return out
    finally:
        consumer.close()


def kafka_python_create_topic(bootstrap: str, topic: str, partitions: int = 1) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.admin import NewTopic as KNewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
    try:
        admin.create_topics(
            [KNewTopic(topic, num_partitions=partitions, replication_factor=1)],
            timeout_ms=15_000,
        )
    finally:
        admin.close()


# ---------------------------------------------------------------- aiokafka


async def aiokafka_consume_async(
    bootstrap: str,
    topic: str,
    partitions: Sequence[int] = (0,),
    expected: int = 0,
    timeout: float = CONSUME_TIMEOUT_S,
    **extra: object,
) -> list[Got]:
    from aiokafka import AIOKafkaConsumer
    from aiokafka import TopicPartition as ATP

    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=15_000,
        **extra,
    )
    await consumer.start()
    try:
        tps = [ATP(topic, p) for p in partitions]
        consumer.assign(tps)
        await consumer.seek_to_beginning(*tps)
        out: list[Got] = []
        deadline = time.monotonic() + timeout
        settle_until: float | None = None
        while time.monotonic() < deadline:
            if settle_until is not None and time.monotonic() >= settle_until:
                break
            batch = await consumer.getmany(timeout_ms=200)
            for _tp, records in sorted(batch.items(), key=lambda kv: kv[0].partition):
                for r in records:
                    out.append(
                        Got(r.partition, r.offset, r.key, r.value, list(r.headers), r.timestamp)
                    )
            if len(out) >= expected and settle_until is None:
                settle_until = time.monotonic() + SETTLE_S
        if len(out) < expected:
            raise AssertionError(f"aiokafka consumer got {len(out)}/{expected} from {topic}")
        return out
    finally:
        await consumer.stop()


def aiokafka_consume(bootstrap: str, topic: str, **kw: object) -> list[Got]:
    return asyncio.run(aiokafka_consume_async(bootstrap, topic, **kw))  # type: ignore[arg-type]


# ---------------------------------------------------------------- kcat


def kcat_path() -> str:
    path = shutil.which("kcat")
    assert path, "kcat is not installed (scripts/test installs it with apt-get)"
    return path


def kcat(args: Sequence[str], stdin: bytes | None = None, timeout: float = 60) -> str:
    """Run kcat; fail with its stderr on a non-zero exit (delivery failures set the code)."""
    proc = subprocess.run(
        [kcat_path(), *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise AssertionError(
            f"kcat {' '.join(args)} exited {proc.returncode}\n"
            f"stderr: {proc.stderr.decode(errors='replace')[-4000:]}"
        )
    return proc.stdout.decode(errors="replace")


def kcat_consume_json(bootstrap: str, topic: str, expected: int) -> list[Got]:
    out = kcat(
        [
            "-b",
            bootstrap,
            "-C",
            "-t",
            topic,
            "-o",
            "beginning",
            "-e",
            "-J",
            "-q",
            "-c",
            str(expected),
        ],
        timeout=60,
    )
    got: list[Got] = []
    for line in out.splitlines():
        if not line.strip():
            continue
        rec = json.loads(line)
        flat = rec.get("headers") or []
        headers: Headers = [
            (flat[i], None if flat[i + 1] is None else flat[i + 1].encode())
            for i in range(0, len(flat), 2)
        ]
        key = rec.get("key")
        payload = rec.get("payload")
        got.append(
            Got(
                rec["partition"],
                rec["offset"],
                None if key is None else key.encode(),
                None if payload is None else payload.encode(),
                headers,
                rec.get("ts"),
            )
        )
    return got


# ---------------------------------------------------------------- producing through trouble


@dataclass
class Stream:
    """What an idempotent producer reported while something was done to the cluster."""

    total: int
    delivered: list[tuple[int, int, int]]  # (partition, offset, sequence number)
    errors: list[str]
    undelivered: int


def stream_through(
    bootstrap: str,
    topic: str,
    total: int,
    disrupt: Callable[[], None],
    after_fraction: float = 1 / 3,
    timeout_s: float = 120.0,
    until_disrupted: bool = False,
    **conf: object,
) -> Stream:
    """Produce ``total`` numbered records (idempotent, acks=all), paced over ~2 s, and call
    ``disrupt`` (in another thread) once ``after_fraction`` of them were acknowledged, so the
    disruption cuts a live stream. Values are the sequence numbers. ``until_disrupted``: go on
    past ``total`` (at the same pace) until ``disrupt`` returned, so a slow disruption (a
    machine under load) still lands in the stream; ``Stream.total`` is then what was sent."""
    import threading

    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 8192,
            "message.timeout.ms": int(timeout_s * 1000) - 10_000,
            # Reconnect quickly once a broker is back, so tests are not mostly backoff.
            "reconnect.backoff.ms": 50,
            "reconnect.backoff.max.ms": 500,
            "retry.backoff.ms": 50,
            "topic.metadata.refresh.interval.ms": 1000,
            **conf,
        }
    )
    stream = Stream(total, [], [], 0)
    lock = threading.Lock()

    def on_delivery(err, msg) -> None:  # type: ignore[no-untyped-def]
        with lock:
            if err is not None:
                stream.errors.append(str(err))
            else:
                stream.delivered.append((msg.partition(), msg.offset(), int(msg.value())))

    done = threading.Event()
    failure: list[BaseException] = []

    def disrupt_midway() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            with lock:
                if len(stream.delivered) >= total * after_fraction:
                    break
            time.sleep(0.01)
        try:
            disrupt()
        except BaseException as exc:  # reported in the test's thread
            failure.append(exc)
        done.set()

    thread = threading.Thread(target=disrupt_midway, daemon=True)
    thread.start()
    seq = 0
    while seq < total or (until_disrupted and not done.is_set() and seq < 100 * total):
        kwargs: dict[str, object] = {
            "key": f"k{seq % 17}".encode(),
            "value": str(seq).encode(),
            "on_delivery": on_delivery,
        }
        _produce_with_backpressure(producer, topic, kwargs)
        if seq % 50 == 0:
            time.sleep(0.03)
        seq += 1
    stream.total = seq
    stream.undelivered = producer.flush(timeout_s)
    thread.join(60)
    if failure:
        raise failure[0]
    assert done.is_set(), "the disruption did not happen"
    return stream


def assert_exactly_once(stream: Stream, got: Sequence[Got], partitions: int) -> None:
    """Every record delivered exactly once, dense offsets, per-partition send order, and each
    delivery report's offset naming the record stored there."""
    assert stream.undelivered == 0, f"{stream.undelivered} records never acknowledged"
    assert not stream.errors, f"delivery errors: {stream.errors[:10]}"
    assert len(stream.delivered) == stream.total
    seqs = [int(g.value or b"-1") for g in got]
    dupes = sorted({s for s in seqs if seqs.count(s) > 1})
    assert not dupes, f"{len(dupes)} duplicated records, e.g. {dupes[:10]}"
    assert sorted(seqs) == list(range(stream.total)), "records lost"
    for p in range(partitions):
        in_part = [g for g in got if g.partition == p]
        offs = [g.offset for g in in_part]
        assert offs == list(range(len(offs))), f"partition {p}: offsets not dense from 0"
        ps = [int(g.value or b"-1") for g in in_part]
        assert ps == sorted(ps), f"partition {p}: records out of send order"
    stored = {(g.partition, g.offset): int(g.value or b"-1") for g in got}
    assert all(stored[(p, o)] == s for p, o, s in stream.delivered)


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = 30.0) -> float:
    """Poll ``predicate``; returns the seconds it took, fails the test after ``timeout``.

    A client error while polling (a metadata request sent to a broker the test just
    killed times out) counts as "not yet": the cluster is changing, which is what the
    caller waits out. The last one is named if the wait fails."""
    start = time.monotonic()
    last_error: KafkaException | None = None
    while True:
        try:
            if predicate():
                return time.monotonic() - start
        except KafkaException as exc:
            last_error = exc
        if time.monotonic() - start > timeout:
            cause = f" (last client error: {last_error})" if last_error else ""
            raise AssertionError(f"{what} did not happen within {timeout:.0f}s{cause}")
        time.sleep(0.05)
