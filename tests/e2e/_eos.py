"""Exactly-once runs: a consume-transform-produce processor (``_eos_processor``) in its own
process, the group's committed progress, and the final check of the output."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from ._kafka import confluent_consume

ROOT = Path(__file__).resolve().parents[2]


def fill(bootstrap: str, topic: str, n: int, partitions: int) -> None:
    """Records "0" .. "n-1", spread over the partitions, each exactly once."""
    producer = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    for i in range(n):
        producer.produce(topic, value=f"{i}".encode(), partition=i % partitions)
    assert producer.flush(60) == 0


def start_processor(
    bootstrap: str,
    source: str,
    sink: str,
    group: str,
    transactional_id: str,
    log: Path,
    pause_s: float = 0.0,
) -> subprocess.Popen[bytes]:
    with open(log, "ab") as out:
        return subprocess.Popen(
            [
                sys.executable,
                "-m",
                "tests.e2e._eos_processor",
                bootstrap,
                source,
                sink,
                group,
                transactional_id,
                str(pause_s),
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )


class Progress:
    """What the group committed on the source (only committed transactions move it)."""

    def __init__(self, bootstrap: str, group: str, source: str, partitions: int) -> None:
        self._consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
        self._partitions = [TopicPartition(source, p) for p in range(partitions)]

        self._last = 0

    def __call__(self) -> int:
        try:
            committed = self._consumer.committed(self._partitions, 10)
        except KafkaException:
            # The group's coordinator moving (a broker died): ask again on the next call.
            return self._last
        self._last = sum(max(tp.offset, 0) for tp in committed)
        return self._last

    def close(self) -> None:
        self._consumer.close()


def assert_exactly_once(bootstrap: str, sink: str, n: int, partitions: int) -> None:
    got = confluent_consume(
        bootstrap,
        sink,
        list(range(partitions)),
        expected=n,
        timeout=60,
        **{"isolation.level": "read_committed"},
    )
    outputs = sorted((g.value or b"" for g in got), key=lambda v: int(v.split(b":")[1]))
    assert outputs == [f"out:{i}".encode() for i in range(n)], "lost or duplicated records"
