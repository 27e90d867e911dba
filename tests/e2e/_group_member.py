"""One consumer-group member in its own process, driven by the group e2e tests.

A process per member, because the tests SIGKILL members (a crash sends no LeaveGroup:
only the broker's session timeout notices) and mix three client libraries that each
want their own threads or event loop. The member uses a stock client's ``subscribe()``
and reports on stdout, one JSON object per line:

    {"event": "ready"}                                    subscribed, polling
    {"event": "assignment", "partitions": [0, 3]}         after each change
    {"event": "assigned"|"revoked", "partitions": [...]}  rebalance callbacks (confluent)
    {"event": "record", "partition": 0, "offset": 7, "value": "..."}
    {"event": "closed"}                                   after a clean close

With ``--protocol consumer`` the confluent member uses KIP-848's consumer group protocol.
A line "stop" on stdin makes it close cleanly (a dynamic member then sends LeaveGroup).
With --commit it commits each record's offset synchronously before reporting it (a
commit that fails, say during a rebalance, is reported as "commit_failed").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import warnings
from collections.abc import Callable
from typing import Any

POLL_S = 0.1


def emit(event: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
    sys.stdout.flush()


def stop_requested() -> threading.Event:
    stop = threading.Event()

    def watch() -> None:
        for line in sys.stdin:
            if line.strip() == "stop":
                break
        stop.set()  # "stop" or stdin closed (the test went away)

    threading.Thread(target=watch, daemon=True).start()
    return stop


class Reporter:
    def __init__(self) -> None:
        self._last: list[int] | None = None

    def assignment(self, partitions: list[int]) -> None:
        partitions = sorted(partitions)
        if partitions != self._last:
            self._last = partitions
            emit("assignment", partitions=partitions)


def run_confluent(args: argparse.Namespace, stop: threading.Event) -> None:
    from confluent_kafka import Consumer, TopicPartition

    conf: dict[str, Any] = {
        "bootstrap.servers": args.bootstrap,
        "group.id": args.group,
        "client.id": args.name,
        "auto.offset.reset": "earliest",
        "enable.auto.commit": False,
        "max.poll.interval.ms": args.rebalance_ms,
    }
    if args.protocol == "consumer":
        # KIP-848: the broker sets the session timeout and heartbeat interval and assigns
        # (the client may only name a server assignor).
        conf["group.protocol"] = "consumer"
        if args.strategy:
            conf["group.remote.assignor"] = args.strategy
    else:
        conf["session.timeout.ms"] = args.session_ms
        conf["heartbeat.interval.ms"] = args.heartbeat_ms
        conf["partition.assignment.strategy"] = args.strategy or "range,roundrobin"
    if args.instance_id:
        conf["group.instance.id"] = args.instance_id
    consumer = Consumer(conf)
    reporter = Reporter()

    def on_assign(c: Any, partitions: list[Any]) -> None:
        emit("assigned", partitions=sorted(p.partition for p in partitions))

    def on_revoke(c: Any, partitions: list[Any]) -> None:
        emit("revoked", partitions=sorted(p.partition for p in partitions))

    consumer.subscribe([args.topic], on_assign=on_assign, on_revoke=on_revoke)
    emit("ready")
    while not stop.is_set():
        msg = consumer.poll(POLL_S)
        reporter.assignment([p.partition for p in consumer.assignment()])
        if msg is None or msg.error() is not None:
            continue
        if args.commit:
            tp = TopicPartition(msg.topic(), msg.partition(), msg.offset() + 1)
            try:
                consumer.commit(offsets=[tp], asynchronous=False)
            except Exception as exc:  # e.g. during a rebalance: the record comes again
                emit("commit_failed", error=str(exc))
        emit("record", partition=msg.partition(), offset=msg.offset(), value=msg.value().decode())
    consumer.close()
    emit("closed")


def run_kafka_python(args: argparse.Namespace, stop: threading.Event) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        from kafka import KafkaConsumer, OffsetAndMetadata

    consumer = KafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        client_id=args.name,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=args.session_ms,
        heartbeat_interval_ms=args.heartbeat_ms,
        max_poll_interval_ms=args.rebalance_ms,
        request_timeout_ms=max(30_000, args.session_ms + 5000),
        group_instance_id=args.instance_id or None,
    )
    reporter = Reporter()
    emit("ready")
    while not stop.is_set():
        batches = consumer.poll(timeout_ms=int(POLL_S * 1000))
        reporter.assignment([tp.partition for tp in consumer.assignment()])
        for tp, records in batches.items():
            for r in records:
                if args.commit:
                    try:
                        consumer.commit({tp: OffsetAndMetadata(r.offset + 1, "", -1)})
                    except Exception as exc:
                        emit("commit_failed", error=str(exc))
                emit("record", partition=r.partition, offset=r.offset, value=r.value.decode())
    consumer.close()
    emit("closed")


def run_aiokafka(args: argparse.Namespace, stop: threading.Event) -> None:
    async def main() -> None:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            args.topic,
            bootstrap_servers=args.bootstrap,
            group_id=args.group,
            client_id=args.name,
            auto_offset_reset="earliest",
            enable_auto_commit=False,
            session_timeout_ms=args.session_ms,
            heartbeat_interval_ms=args.heartbeat_ms,
            max_poll_interval_ms=args.rebalance_ms,
            rebalance_timeout_ms=args.rebalance_ms,
            group_instance_id=args.instance_id or None,
        )
        await consumer.start()
        reporter = Reporter()
        emit("ready")
        while not stop.is_set():
            batches = await consumer.getmany(timeout_ms=int(POLL_S * 1000))
            reporter.assignment([tp.partition for tp in consumer.assignment()])
            for tp, records in batches.items():
                for r in records:
                    if args.commit:
                        offsets = {TopicPartition(tp.topic, tp.partition): r.offset + 1}
                        try:
                            await consumer.commit(offsets)
                        except Exception as exc:
                            emit("commit_failed", error=str(exc))
                    emit("record", partition=r.partition, offset=r.offset, value=r.value.decode())
        await consumer.stop()
        emit("closed")

    asyncio.run(main())


CLIENTS: dict[str, Callable[[argparse.Namespace, threading.Event], None]] = {
    "confluent": run_confluent,
    "kafka-python": run_kafka_python,
    "aiokafka": run_aiokafka,
}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--client", choices=sorted(CLIENTS), required=True)
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--name", default="member")
    parser.add_argument("--session-ms", type=int, default=6000)
    parser.add_argument("--heartbeat-ms", type=int, default=500)
    parser.add_argument("--rebalance-ms", type=int, default=15_000)
    parser.add_argument("--instance-id", default="")
    parser.add_argument("--strategy", default="")
    parser.add_argument("--commit", action="store_true")
    # confluent only: "consumer" is KIP-848's group.protocol=consumer.
    parser.add_argument("--protocol", choices=["classic", "consumer"], default="classic")
    args = parser.parse_args()
    CLIENTS[args.client](args, stop_requested())


if __name__ == "__main__":
    main()
