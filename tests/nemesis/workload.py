"""The workload: stock confluent-kafka clients, each in a process of its own, each appending
what it was told to a JSON-lines file as it is told (a client that crashes, librdkafka
included, loses nothing it had recorded, and takes neither the harness nor the other clients
down; the harness starts it again under a new incarnation).

Every value is unique and names its writer: ``all/<producer>/<seq>`` (idempotent, acks=all),
``one/<producer>/<seq>`` (acks=1, not idempotent), ``txn/<producer>/<txn>/<i>``
(transactional); ``<producer>`` includes the incarnation. The checker attributes what it reads
back by these names.

    python -m tests.nemesis.workload '<spec json>' <record file>    # one client (the harness)
"""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections import defaultdict
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

# Records keep being retried through every fault of a run (librdkafka's default is 300 s).
MESSAGE_TIMEOUT_MS = 120_000
# The idempotent (acks=all) producers never give a record up (0: no message timeout). When
# librdkafka times records out while a request carrying others is in flight, it bumps the
# epoch and sends those others again under new sequence numbers (INTRODUCTION.md, "Message
# timeout considerations"): a duplicate no broker can recognise, Kafka's neither. Long run #4
# had 2,288 such duplicates after a 100 s object-store stall (copies at epochs 4, 11, 37, 50,
# 64, 97 of one producer). Without the timeout the producer retries with the same sequence
# numbers until answered, which is what the audit is about.
IDEMPOTENT_MESSAGE_TIMEOUT_MS = 0
# How long a producer's last records may take once it is told to stop.
FLUSH_S = 150.0
# librdkafka logs every refused connection at level 3; faults make hundreds of them. What the
# clients were told arrives through delivery reports and exceptions instead.
QUIET = {"log_level": 2}
# SLUICE_NEMESIS_CLIENT_DEBUG=eos,msg,protocol (librdkafka's debug contexts) makes the
# producers log them to their <name>.out: to see why a client did what the checker flags.
# By default the producers log librdkafka's eos context (epoch bumps, drains, sequence
# errors: a few lines per fault): long run #5's duplicates were re-sends under a bumped epoch
# whose cause the log did not show.
CLIENT_DEBUG = os.environ.get("SLUICE_NEMESIS_CLIENT_DEBUG", "eos")
PRODUCER_LOG = {"debug": CLIENT_DEBUG, "log_level": 7} if CLIENT_DEBUG else QUIET
# The transactional producers' librdkafka debug contexts (SLUICE_NEMESIS_TXN_DEBUG overrides).
TXN_DEBUG = "eos,msg"


@dataclass(frozen=True)
class Topic:
    name: str
    kind: str  # classic | diskless | tiered
    partitions: int
    pad: int = 0  # bytes added to each value (tiered topics must roll segments to tier)


@dataclass
class Ack:
    topic: str
    partition: int
    offset: int | None  # None: acknowledged without an offset
    value: str
    at: float  # time.time() of the delivery report


@dataclass
class Ledger:
    """Everything the clients were told, read back from their record files."""

    acks_all: list[Ack] = field(default_factory=list)
    acks_one: list[Ack] = field(default_factory=list)
    failed: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # kind -> count
    # transactional.id/txn -> (topic, outcome, values); outcome committed|aborted|unknown
    txns: dict[str, tuple[str, str, list[str]]] = field(default_factory=dict)
    txn_fatal: list[str] = field(default_factory=list)
    producer_fatal: list[str] = field(default_factory=list)  # idempotent producers
    # group offsets sampled: (topic, partition) -> [(time, offset)]
    group_offsets: dict[tuple[str, int], list[tuple[float, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    group_regressions: list[str] = field(default_factory=list)
    group_consumed: int = 0
    reader_seen: dict[str, list[tuple[str, int, int]]] = field(
        default_factory=lambda: defaultdict(list)
    )
    reader_regressions: list[str] = field(default_factory=list)
    # Groups that joined while the migrating topic moved between kinds (issue 31): group ->
    # (topic, partition) -> offsets read, in order.
    joined: dict[str, dict[tuple[str, int], list[int]]] = field(
        default_factory=lambda: defaultdict(lambda: defaultdict(list))
    )
    errors: list[str] = field(default_factory=list)  # client errors worth a look

    @classmethod
    def load(cls, paths: list[Path]) -> Ledger:
        ledger = cls()
        for path in sorted(paths):
            with open(path) as f:
                for line in f:
                    try:
                        r = json.loads(line)
                    except ValueError:
                        continue  # the last line of a client that crashed mid-write
                    ledger._add(r)
        return ledger

    def _add(self, r: dict[str, Any]) -> None:
        kind = r.pop("r")
        if kind == "ack":
            sink = self.acks_all if r.pop("acks") == "all" else self.acks_one
            sink.append(Ack(**r))
        elif kind == "failed":
            self.failed[r["kind"]] += 1
        elif kind == "txn":
            self.txns[r["key"]] = (r["topic"], r["outcome"], r["values"])
        elif kind == "txn_fatal":
            self.txn_fatal.append(r["what"])
        elif kind == "producer_fatal":
            self.producer_fatal.append(r["what"])
        elif kind == "offset":
            self.group_offsets[(r["topic"], r["partition"])].append((r["at"], r["offset"]))
        elif kind == "group_regress":
            self.group_regressions.append(r["what"])
        elif kind == "consumed":
            self.group_consumed += r["n"]
        elif kind == "seen":
            self.reader_seen[r["value"]].append((r["topic"], r["partition"], r["offset"]))
        elif kind == "reader_regress":
            self.reader_regressions.append(r["what"])
        elif kind == "joined":
            self.joined[r["group"]][(r["topic"], r["partition"])].extend(r["offsets"])
        elif kind == "error":
            self.errors.append(r["what"])


class Recorder:
    """Appends one JSON line per fact, flushed at once (a crash keeps what was written)."""

    def __init__(self, out: TextIO) -> None:
        self.out = out
        self.lock = threading.Lock()

    def __call__(self, r: str, **fields: Any) -> None:
        line = json.dumps({"r": r, **fields}) + "\n"
        with self.lock:
            self.out.write(line)
            self.out.flush()


def _value(prefix: str, pad: int) -> bytes:
    return prefix.encode() + (b"|" + b"x" * pad if pad else b"")


def parse_value(raw: bytes | None) -> str | None:
    if raw is None:
        return None
    return raw.split(b"|", 1)[0].decode(errors="replace")


class Worker:
    def __init__(self, name: str, stop: threading.Event, rec: Recorder) -> None:
        self.name = name
        self.stop_event = stop
        self.rec = rec
        self.notes = 0

    def note(self, what: str) -> None:
        if self.notes < 50:  # a client in a long outage repeats itself
            self.notes += 1
            self.rec("error", what=f"{time.strftime('%H:%M:%S')} {self.name}: {what}")

    def run(self) -> None:
        raise NotImplementedError


class ProducerWorker(Worker):
    """Produces ``rate`` records/s round-robin over the topic's partitions and records every
    delivery report. acks=all producers are idempotent; acks=1 ones are not."""

    def __init__(
        self,
        name: str,
        stop: threading.Event,
        rec: Recorder,
        bootstrap: str,
        topics: list[Topic],
        acks: str,
        rate: float,
        request_timeout_ms: int,
    ) -> None:
        super().__init__(name, stop, rec)
        # Several topics of one kind (the migrating ones) share a producer, in turn.
        self.topics, self.acks, self.rate = topics, acks, rate
        self.topic = topics[0]
        self.kind = "all" if acks == "all" else "one"
        self.config = {
            **PRODUCER_LOG,
            "bootstrap.servers": bootstrap,
            "acks": acks,
            "enable.idempotence": acks == "all",
            "linger.ms": 5,
            "request.timeout.ms": request_timeout_ms,
            "message.timeout.ms": (
                IDEMPOTENT_MESSAGE_TIMEOUT_MS if acks == "all" else MESSAGE_TIMEOUT_MS
            ),
            "retry.backoff.ms": 100,
        }

    def run(self) -> None:
        producer = Producer(self.config)

        def report(err: KafkaError | None, msg: Any) -> None:
            if err is None:
                value = parse_value(msg.value()) or ""
                self.rec(
                    "ack",
                    acks=self.kind,
                    topic=msg.topic(),
                    partition=msg.partition(),
                    offset=msg.offset(),
                    value=value,
                    at=time.time(),
                )
            else:
                self.rec("failed", kind=f"{self.topic.kind}/{self.kind}")
                self.note(f"delivery failed: {err}")

        seq = 0
        interval = 1.0 / self.rate
        next_at = time.monotonic()
        try:
            while not self.stop_event.is_set():
                topic = self.topics[seq % len(self.topics)]
                value = _value(f"{self.kind}/{self.name}/{seq}", topic.pad)
                try:
                    producer.produce(
                        topic.name,
                        value=value,
                        partition=(seq // len(self.topics)) % topic.partitions,
                        on_delivery=report,
                    )
                    seq += 1
                except BufferError:
                    pass
                producer.poll(0)
                next_at += interval
                delay = next_at - time.monotonic()
                if delay > 0:
                    producer.poll(delay)
                else:
                    next_at = time.monotonic()
            left = producer.flush(FLUSH_S)
            if left:
                self.note(f"{left} records still undelivered at the end")
        except KafkaException as exc:
            # A fatal error (idempotence) ends a producer; the harness starts a new one.
            self.rec("producer_fatal", what=f"{time.strftime('%H:%M:%S')} {self.name}: {exc}")
            raise


class TxnWorker(Worker):
    """A transactional producer: transactions of ``size`` records over the topic's partitions,
    one in four aborted on purpose. The outcome recorded is what the client was told:
    committed / aborted only when commit/abort returned success, else unknown."""

    def __init__(
        self,
        name: str,
        stop: threading.Event,
        rec: Recorder,
        bootstrap: str,
        topic: Topic,
        rate: float,
        size: int,
        seed: int,
    ) -> None:
        super().__init__(name, stop, rec)
        self.topic, self.rate, self.size = topic, rate, size
        self.rng = random.Random(seed)
        self.config = {
            **QUIET,
            "bootstrap.servers": bootstrap,
            # One transactional.id per worker across incarnations: a new one fences the old.
            "transactional.id": f"nemesis-{name.split('.')[0]}",
            "linger.ms": 5,
            # The clients' default transaction timeout; records fail (an abortable error)
            # well before it, so an outage that outlasts them leaves the producer time to
            # abort. With both at 30 s a record retried through a 30 s outage took the whole
            # transaction timeout and the coordinator's abort fenced the producer, as Kafka's
            # would: the producer's configuration, not the broker, made that fatal.
            "transaction.timeout.ms": 60_000,
            "message.timeout.ms": 30_000,
        }
        # Always logged (eos,msg: a line per request and per answer, some MB an hour): the
        # checker reads it to tell a fatal error the client caused itself (client_logs.py).
        self.config.update(log_level=7, debug=os.environ.get("SLUICE_NEMESIS_TXN_DEBUG", TXN_DEBUG))

    def _new_producer(self) -> Producer | None:
        while not self.stop_event.is_set():
            producer = Producer(self.config)
            try:
                producer.init_transactions(30)
                return producer
            except KafkaException as exc:
                self.note(f"init_transactions: {exc}")
                time.sleep(1)
        return None

    def run(self) -> None:
        producer = self._new_producer()
        txn = unknown = 0
        while producer is not None and not self.stop_event.is_set():
            key = f"{self.name}/{txn}"
            values = [f"txn/{self.name}/{txn}/{i}" for i in range(self.size)]
            abort = self.rng.random() < 0.25
            self.rec("txn", key=key, topic=self.topic.name, outcome="unknown", values=values)
            try:
                producer.begin_transaction()
                for i, v in enumerate(values):
                    producer.produce(
                        self.topic.name, value=v.encode(), partition=i % self.topic.partitions
                    )
                    producer.poll(0)
                    time.sleep(1.0 / self.rate)
                outcome = self._finish(producer, abort)
            except KafkaException as exc:
                outcome = self._recover(producer, exc)
            unknown = unknown + 1 if outcome == "unknown" else 0
            if outcome == "fatal" or unknown >= 3:
                # A fatal error ends this producer (librdkafka's rule), and one that fails
                # every transaction is as good as dead (a long run once spun 5 million times
                # through begin_transaction errors): a new one with the same transactional.id
                # fences it and aborts what it left open.
                time.sleep(1)
                producer = self._new_producer()
                unknown = 0
            else:
                self.rec("txn", key=key, topic=self.topic.name, outcome=outcome, values=values)
                if outcome == "unknown":
                    time.sleep(0.5)
            txn += 1

    def _finish(self, producer: Producer, abort: bool) -> str:
        for _ in range(10):
            try:
                if abort:
                    producer.abort_transaction(30)
                    return "aborted"
                producer.commit_transaction(30)
                return "committed"
            except KafkaException as exc:
                if exc.args[0].retriable():
                    continue
                return self._recover(producer, exc)
        return "unknown"

    def _recover(self, producer: Producer, exc: KafkaException) -> str:
        err = exc.args[0]
        if err.txn_requires_abort():
            self.note(f"abortable: {err}")
            try:
                producer.abort_transaction(30)
                return "aborted"
            except KafkaException as again:
                err = again.args[0]
        if err.fatal():
            self.rec("txn_fatal", what=f"{time.strftime('%H:%M:%S')} {self.name}: {err}")
            return "fatal"
        self.note(f"transaction: {err}")
        return "unknown"


def member_config(bootstrap: str, group: str) -> dict[str, Any]:
    """A group member that commits itself and starts at the beginning of a partition."""
    return {
        **QUIET,
        "bootstrap.servers": bootstrap,
        "group.id": group,
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 10_000,
    }


class GroupWorker(Worker):
    """A member of a consumer group reading the topics and committing synchronously every
    ``commit_every`` records."""

    def __init__(
        self,
        name: str,
        stop: threading.Event,
        rec: Recorder,
        bootstrap: str,
        group: str,
        topics: list[str],
        commit_every: int = 50,
    ) -> None:
        super().__init__(name, stop, rec)
        self.topics, self.commit_every = topics, commit_every
        self.config = member_config(bootstrap, group)

    def run(self) -> None:
        consumer = Consumer(self.config)
        consumer.subscribe(self.topics)
        n = 0
        try:
            while not self.stop_event.is_set():
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue
                n += 1
                if n % self.commit_every == 0:
                    self.rec("consumed", n=self.commit_every)
                    try:
                        consumer.commit(asynchronous=False)
                    except KafkaException as exc:
                        self.note(f"commit: {exc}")
        finally:
            consumer.close()


class JoinerWorker(Worker):
    """A consumer of a new group that joins while the migrating topic moves between kinds
    (auto.offset.reset=earliest): it must start at the partition's first record, not at a
    migration boundary (issue 31). Writes the offsets it reads, a batch a line."""

    def __init__(
        self,
        name: str,
        stop: threading.Event,
        rec: Recorder,
        bootstrap: str,
        group: str,
        topic: str,
    ) -> None:
        super().__init__(name, stop, rec)
        self.group, self.topic = group, topic
        self.config = member_config(bootstrap, group)

    def run(self) -> None:
        consumer = Consumer(self.config)
        consumer.subscribe([self.topic])
        read: dict[int, list[int]] = defaultdict(list)

        def flush() -> None:
            for partition, offsets in read.items():
                if offsets:
                    self.rec(
                        "joined", group=self.group, topic=self.topic, partition=partition,
                        offsets=offsets,
                    )  # fmt: skip
            read.clear()

        try:
            while not self.stop_event.is_set():
                for msg in consumer.consume(500, 0.5):
                    if not msg.error():
                        read[msg.partition()].append(msg.offset())
                flush()
        finally:
            flush()
            consumer.close()


class OffsetSampler(Worker):
    """Samples the group's committed offsets once a second and notes any that went backwards.

    Through a consumer of the group that never subscribes (it does not join): librdkafka's
    admin ListConsumerGroupOffsets crashes the process when a coordinator answers
    NOT_COORDINATOR (librdkafka issue 5040), which coordinator moves make routine here."""

    def __init__(
        self,
        name: str,
        stop: threading.Event,
        rec: Recorder,
        bootstrap: str,
        group: str,
        topics: list[Topic],
    ) -> None:
        super().__init__(name, stop, rec)
        self.partitions = [TopicPartition(t.name, p) for t in topics for p in range(t.partitions)]
        self.config = {
            **QUIET,
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
        }

    def run(self) -> None:
        consumer = Consumer(self.config)
        highest: dict[tuple[str, int], int] = {}
        try:
            while not self.stop_event.wait(1.0):
                try:
                    result = consumer.committed(self.partitions, timeout=5)
                except KafkaException:
                    continue  # the coordinator may be down: no sample
                now = time.time()
                for tp in result:
                    if tp.error is not None or tp.offset < 0:
                        continue
                    key = (tp.topic, tp.partition)
                    self.rec(
                        "offset", topic=tp.topic, partition=tp.partition, offset=tp.offset, at=now
                    )
                    if tp.offset < highest.get(key, -1):
                        self.rec(
                            "group_regress",
                            what=f"{tp.topic}-{tp.partition}: committed offset {highest[key]} "
                            f"then {tp.offset}",
                        )
                    highest[key] = max(highest.get(key, -1), tp.offset)
        finally:
            consumer.close()


class CommittedReader(Worker):
    """A read_committed consumer of every partition from the beginning (no group): records
    what it saw, and notes an offset that went backwards."""

    def __init__(
        self, name: str, stop: threading.Event, rec: Recorder, bootstrap: str, topics: list[Topic]
    ) -> None:
        super().__init__(name, stop, rec)
        self.topics = topics
        self.config = {
            **QUIET,
            "bootstrap.servers": bootstrap,
            "group.id": "nemesis-reader",
            "enable.auto.commit": False,
            "isolation.level": "read_committed",
            "auto.offset.reset": "earliest",
        }

    def run(self) -> None:
        consumer = Consumer(self.config)
        consumer.assign(
            [
                TopicPartition(t.name, p, OFFSET_BEGINNING)
                for t in self.topics
                for p in range(t.partitions)
            ]
        )
        last: dict[tuple[str, int], int] = {}
        try:
            while not self.stop_event.is_set():
                msg = consumer.poll(0.5)
                if msg is None or msg.error():
                    continue
                key = (msg.topic(), msg.partition())
                if msg.offset() <= last.get(key, -1):
                    self.rec(
                        "reader_regress",
                        what=f"{key[0]}-{key[1]}: offset {msg.offset()} after {last[key]}",
                    )
                last[key] = msg.offset()
                value = parse_value(msg.value()) or ""
                self.rec("seen", value=value, topic=key[0], partition=key[1], offset=msg.offset())
        finally:
            consumer.close()


def _build(spec: dict[str, Any], stop: threading.Event, rec: Recorder) -> Worker:
    role, name, b = spec["role"], spec["name"], spec["bootstrap"]
    if role == "producer":
        topics = [Topic(**t) for t in spec["topics"]]
        return ProducerWorker(
            name, stop, rec, b, topics, spec["acks"], spec["rate"], spec["request_timeout_ms"]
        )
    if role == "txn":
        return TxnWorker(name, stop, rec, b, Topic(**spec["topic"]), spec["rate"], 10, spec["seed"])
    if role == "group":
        return GroupWorker(name, stop, rec, b, spec["group"], spec["topics"])
    if role == "offsets":
        return OffsetSampler(
            name, stop, rec, b, spec["group"], [Topic(**t) for t in spec["topics"]]
        )
    if role == "reader":
        return CommittedReader(name, stop, rec, b, [Topic(**t) for t in spec["topics"]])
    if role == "joiner":
        return JoinerWorker(name, stop, rec, b, spec["group"], spec["topic"])
    raise ValueError(role)


def worker_main(argv: list[str]) -> int:
    """One client: runs until SIGTERM, then finishes what it has in flight and exits."""
    spec = json.loads(argv[0])
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with open(argv[1], "a") as out:
        _build(spec, stop, Recorder(out)).run()
    return 0


@dataclass
class Client:
    spec: dict[str, Any]
    proc: subprocess.Popen[bytes] | None = None
    incarnation: int = 0
    crashes: list[int] = field(default_factory=list)  # exit codes of unexpected exits


@dataclass
class Workload:
    """The clients of a run, as processes; :meth:`check` starts again any that crashed."""

    bootstrap: str
    topics: dict[str, Topic]  # kind (migrating-<k> for each migrating topic) -> topic
    seed: int
    directory: Path
    request_timeout_ms: int = 1500
    clients: list[Client] = field(default_factory=list)

    def specs(self) -> list[dict[str, Any]]:
        b = self.bootstrap
        out: list[dict[str, Any]] = []
        by_kind: dict[str, list[Topic]] = defaultdict(list)
        for topic in self.topics.values():
            by_kind[topic.kind].append(topic)
        for kind, topics in by_kind.items():
            out.append(
                {
                    "role": "producer",
                    "name": f"{kind}-all",
                    "topics": [asdict(t) for t in topics],
                    "acks": "all",
                    "rate": 20.0 if kind == "tiered" else 60.0,
                    "request_timeout_ms": self.request_timeout_ms,
                }
            )
        for kind in ("classic", "diskless"):
            if kind not in self.topics:
                continue
            topic = asdict(self.topics[kind])
            out.append(
                {
                    "role": "producer",
                    "name": f"{kind}-one",
                    "topics": [topic],
                    "acks": "1",
                    "rate": 30.0,
                    "request_timeout_ms": self.request_timeout_ms,
                }
            )
            out.append(
                {
                    "role": "txn",
                    "name": f"{kind}-txn",
                    "topic": topic,
                    "rate": 60.0,
                    "seed": self.seed + len(kind),
                }
            )
        plain = [t for k, t in self.topics.items() if k != "tiered"]
        for i in range(2):
            out.append(
                {
                    "role": "group",
                    "name": f"group-{i}",
                    "group": "nemesis-group",
                    "topics": [t.name for t in plain],
                }
            )
        out.append(
            {
                "role": "offsets",
                "name": "offsets",
                "group": "nemesis-group",
                "topics": [asdict(t) for t in plain],
            }
        )
        out.append({"role": "reader", "name": "reader", "topics": [asdict(t) for t in plain]})
        for spec in out:
            spec["bootstrap"] = b
        return out

    def start(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)
        self.clients = [Client(spec) for spec in self.specs()]
        for client in self.clients:
            self._spawn(client)

    def _spawn(self, client: Client) -> None:
        client.incarnation += 1
        spec = {**client.spec, "name": f"{client.spec['name']}.{client.incarnation}"}
        path = self.directory / f"{spec['name']}.jsonl"
        client.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.nemesis.workload", json.dumps(spec), str(path)],
            stdin=subprocess.DEVNULL,
            stdout=open(self.directory / f"{spec['name']}.out", "ab"),  # noqa: SIM115
            stderr=subprocess.STDOUT,
            # The repo on the path whoever started us (pytest puts it on sys.path only).
            env={**os.environ, "PYTHONPATH": _path_with_repo(), "PYTHONFAULTHANDLER": "1"},
        )

    def add_joiner(self, topic: str) -> None:
        """A consumer of a new group, joining now (during a migration of ``topic``)."""
        n = sum(1 for c in self.clients if c.spec["role"] == "joiner")
        spec = {
            "role": "joiner",
            "name": f"joiner-{n}",
            "group": f"nemesis-joiner-{n}",
            "topic": topic,
            "bootstrap": self.bootstrap,
        }
        client = Client(spec)
        self.clients.append(client)
        self._spawn(client)

    def check(self) -> None:
        """Start again every client that exited on its own (a client library crash)."""
        for client in self.clients:
            if client.proc is not None and client.proc.poll() is not None:
                client.crashes.append(client.proc.returncode)
                self._spawn(client)

    def crashes(self) -> dict[str, list[int]]:
        return {c.spec["name"]: c.crashes for c in self.clients if c.crashes}

    def finish(self, timeout: float = FLUSH_S + 30) -> None:
        """Stop producing and wait until each client has its last delivery report."""
        self.check()
        for client in self.clients:
            if client.proc is not None:
                client.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for client in self.clients:
            assert client.proc is not None
            try:
                client.proc.wait(max(1.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                client.proc.kill()
                client.proc.wait()
            if client.proc.returncode not in (0,):
                client.crashes.append(client.proc.returncode)

    def kill(self) -> None:
        for client in self.clients:
            if client.proc is not None and client.proc.poll() is None:
                client.proc.kill()
                client.proc.wait()

    def ledger(self) -> Ledger:
        return Ledger.load(list(self.directory.glob("*.jsonl")))


def _path_with_repo() -> str:
    repo = str(Path(__file__).resolve().parents[2])
    current = os.environ.get("PYTHONPATH", "")
    return repo + (os.pathsep + current if current else "")


if __name__ == "__main__":
    sys.exit(worker_main(sys.argv[1:]))
