"""Kafka Streams 4.4 against Sluice: a word count with processing.guarantee=exactly_once_v2
(transaction version 2 as the 4.x client negotiates it, KIP-447 offsets in the transaction,
in-memory stores restored from their changelog), SIGKILLed mid-stream and started again:
the output, read_committed, has for every word exactly the counts 1 .. n, once each.

The program is tests/e2e/java/StreamsCheck.java; kafka-streams comes from Maven Central
(tests/e2e/java/streams-pom.xml) into a cache of its own beside the broker's jars."""

from __future__ import annotations

import collections
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

from sluice.launch.kafka import KAFKA_VERSION, compiled_program, ensure_jars, java

from ._kafka import confluent_create_topic
from .conftest import SluiceBroker

pytestmark = pytest.mark.e2e

JAVA = Path(__file__).parent / "java"
PROGRAM = JAVA / "StreamsCheck.java"
POM = JAVA / "streams-pom.xml"
WORDS = [f"w{i:02d}" for i in range(12)]
LINES = 600  # 4 words a line: 2400 counts
DONE_TIMEOUT_S = 240.0
PAUSE_MS = 20  # per input line: ~12 s of processing, so the kill lands mid-stream


def ensure_streams_jars() -> Path:
    """kafka-streams and its dependencies, fetched with Maven on first use."""
    if shutil.which("mvn") is None:
        pytest.skip("mvn not found: Kafka Streams is fetched with Maven")
    return ensure_jars(KAFKA_VERSION, POM, "kafka-streams")


@pytest.fixture(scope="module")
def classpath() -> str:
    # The broker's jars first: their slf4j 2 and its simple backend log the program.
    return f"{ensure_jars()}/*:{ensure_streams_jars()}/*"


def start(
    classpath: str, bootstrap: str, app: str, source: str, sink: str, state: Path, log: Path
) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                java(),
                "-Xmx384m",
                "-XX:TieredStopAtLevel=1",
                "-XX:+UseSerialGC",
                "-cp",
                f"{compiled_program(PROGRAM, classpath)}:{classpath}",
                PROGRAM.stem,
                bootstrap,
                app,
                source,
                sink,
                str(state),
                str(PAUSE_MS),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )


class Output:
    """The sink, read_committed, as it grows: per word, the counts in offset order."""

    def __init__(self, bootstrap: str, sink: str) -> None:
        self._consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": f"check-{sink}",
                "isolation.level": "read_committed",
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
            }
        )
        # Assigned, not subscribed: no group join delays the first records.
        self._consumer.assign([TopicPartition(sink, p, OFFSET_BEGINNING) for p in range(3)])
        self.counts: dict[str, list[int]] = collections.defaultdict(list)
        self.total = 0

    def read(self, seconds: float) -> int:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            for m in self._consumer.consume(500, 0.5):
                if m.error() is None:
                    self.counts[m.key().decode()].append(int(m.value().decode()))
                    self.total += 1
        return self.total

    def close(self) -> None:
        self._consumer.close()


def committed_lines(group: Consumer, parts: list[TopicPartition]) -> int:
    """How many input lines the application's group has committed (KIP-447 offsets)."""
    return sum(max(tp.offset, 0) for tp in group.committed(parts, timeout=10))


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[bytes]]]:
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for p in started:
        if p.poll() is None:
            p.kill()
            p.wait(30)


def test_word_count_exactly_once_across_a_sigkill(
    broker: SluiceBroker,
    topic: str,
    classpath: str,
    tmp_path: Path,
    processes: list[subprocess.Popen[bytes]],
) -> None:
    source, sink, app = f"{topic}-in", f"{topic}-out", f"wc-{topic}"
    confluent_create_topic(broker.bootstrap, source, partitions=3)
    confluent_create_topic(broker.bootstrap, sink, partitions=3)
    producer = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True})
    expected: collections.Counter[str] = collections.Counter()
    for i in range(LINES):
        words = [WORDS[(i * 7 + k * 5) % len(WORDS)] for k in range(4)]
        expected.update(words)
        producer.produce(source, key=str(i).encode(), value=" ".join(words).encode())
    assert producer.flush(60) == 0
    total = sum(expected.values())

    log = tmp_path / "streams.log"
    out = Output(broker.bootstrap, sink)
    try:
        processes.append(
            start(classpath, broker.bootstrap, app, source, sink, tmp_path / "s1", log)
        )
        # Killed once a quarter of the input is committed (the group's offsets move with
        # each transaction), before all of it: mid-stream, a transaction open.
        group = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": app})
        parts = [TopicPartition(source, p) for p in range(3)]
        deadline = time.monotonic() + DONE_TIMEOUT_S
        try:
            while (done := committed_lines(group, parts)) < LINES // 4:
                assert processes[0].poll() is None, log.read_text()[-4000:]
                assert time.monotonic() < deadline, log.read_text()[-4000:]
                time.sleep(0.2)
        finally:
            group.close()
        assert done < LINES, "the input was all processed before the kill"
        processes[0].kill()
        processes[0].wait(30)
        # Started again (with in-memory stores Streams keeps no process id in the state
        # dir: a new transactional id; the killed one's open transaction is aborted by its
        # timeout, its group generation is fenced, KIP-447); the counts come back from the
        # changelog.
        processes.append(
            start(classpath, broker.bootstrap, app, source, sink, tmp_path / "s1", log)
        )
        while out.read(1) < total:
            assert processes[1].poll() is None, log.read_text()[-4000:]
            assert time.monotonic() < deadline, log.read_text()[-4000:]
        out.read(3)  # nothing more may come
        for word, n in expected.items():
            assert out.counts[word] == list(range(1, n + 1)), word
        assert out.total == total
    finally:
        out.close()
