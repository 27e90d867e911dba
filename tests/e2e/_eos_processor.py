"""A consume-transform-produce processor for the exactly-once tests, run as its own
process so the test can SIGKILL it anywhere.

usage: python -m tests.e2e._eos_processor BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID [PAUSE_S]

Reads SOURCE with the group (read_committed, static membership so a restart takes the old
member's place at once), writes each value prefixed with "out:" to SINK and commits the
consumed offsets in the same transaction, a few records at a time, until killed. PAUSE_S
(default 0) is slept after each commit, so a test can be sure to kill something while the
processor is still busy.
"""

from __future__ import annotations

import sys
import time

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

_COORDINATOR_MOVING = (
    KafkaError.NOT_COORDINATOR,
    KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
)


def main(
    bootstrap: str, source: str, sink: str, group: str, transactional_id: str, pause_s: str = "0"
) -> None:
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.instance.id": f"{group}-processor",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "session.timeout.ms": 10_000,
        }
    )
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": transactional_id})
    producer.init_transactions(60)
    consumer.subscribe([source])
    print("ready", flush=True)
    while True:
        msgs = consumer.consume(num_messages=10, timeout=0.5)
        msgs = [m for m in msgs if m.error() is None]
        if not msgs:
            continue
        producer.begin_transaction()
        for m in msgs:
            producer.produce(sink, key=m.key(), value=b"out:" + m.value(), partition=m.partition())
        if _commit(producer, consumer):
            time.sleep(float(pause_s))
        else:
            # Aborted: rewind to the committed offsets, the records are read again.
            for tp in _committed(consumer):
                if tp.offset < 0:
                    tp.offset = OFFSET_BEGINNING
                consumer.seek(tp)


def _committed(consumer: Consumer) -> list[TopicPartition]:
    """The group's committed offsets, retrying retriable errors (NOT_COORDINATOR while the
    group's coordinator moves, say), as an application would."""
    while True:
        try:
            return consumer.committed(consumer.assignment(), 30)
        except KafkaException as exc:
            # librdkafka does not flag NOT_COORDINATOR as retriable here, but it is.
            if not exc.args[0].retriable() and exc.args[0].code() not in _COORDINATOR_MOVING:
                raise
            time.sleep(0.2)


def _commit(producer: Producer, consumer: Consumer) -> bool:
    """Send the offsets and commit; retriable errors (a coordinator that died, say) are
    retried, abortable ones abort. False when the transaction was aborted."""
    offsets_sent = False
    while True:
        try:
            if not offsets_sent:
                producer.send_offsets_to_transaction(
                    consumer.position(consumer.assignment()),
                    consumer.consumer_group_metadata(),
                    60,
                )
                offsets_sent = True
            producer.commit_transaction(60)
            return True
        except KafkaException as exc:
            error = exc.args[0]
            if error.retriable():
                continue
            if error.txn_requires_abort():
                producer.abort_transaction(60)
                return False
            raise


if __name__ == "__main__":
    main(*sys.argv[1:7])
