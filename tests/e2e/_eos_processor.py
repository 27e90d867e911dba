"""A consume-transform-produce processor for the exactly-once tests, run as its own
process so the test can SIGKILL it anywhere.

usage: python -m tests.e2e._eos_processor BOOTSTRAP SOURCE SINK GROUP TRANSACTIONAL_ID

Reads SOURCE with the group (read_committed, static membership so a restart takes the old
member's place at once), writes each value prefixed with "out:" to SINK and commits the
consumed offsets in the same transaction, a few records at a time, until killed.
"""

from __future__ import annotations

import sys

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer


def main(bootstrap: str, source: str, sink: str, group: str, transactional_id: str) -> None:
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
        if not _commit(producer, consumer):
            # Aborted: rewind to the committed offsets, the records are read again.
            for tp in consumer.committed(consumer.assignment(), 30):
                if tp.offset < 0:
                    tp.offset = OFFSET_BEGINNING
                consumer.seek(tp)


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
    main(*sys.argv[1:6])
