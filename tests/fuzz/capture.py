"""Record the request frames stock clients send, as the protocol fuzzer's seed corpus.

    .venv/bin/python -m tests.fuzz.capture [--out tests/fuzz/corpus]

Starts `sluice dev` on 127.0.0.2:P advertising 127.0.0.1, and a recording TCP proxy on
127.0.0.1:P: every connection the clients open (bootstrap and the advertised address alike)
goes through the proxy, which writes each client->broker frame out. Then confluent-kafka,
kafka-python, aiokafka and kcat run an ordinary workload (metadata, topic admin, produce
with each compression type, consumer groups with commits, offsets, configs, deletes).

The corpus is committed so the CI fuzz run is deterministic; re-run this only to refresh it.
Frames are grouped per (client, API, version) and at most a few of each are kept.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from pathlib import Path

from sluice.launch.process import SluiceProcess, free_port

CORPUS_DIR = Path(__file__).parent / "corpus"
PER_KIND = 3  # frames kept per (client, api key, version)
MAX_FRAME = 8 * 1024  # keep the corpus small: record data is one bytes field anyway


class RecordingProxy:
    """Forwards TCP both ways; remembers each complete client->broker frame."""

    def __init__(self, listen_port: int, target: tuple[str, int]) -> None:
        self.listen_port = listen_port
        self.target = target
        self.frames: list[tuple[str, bytes]] = []  # (client label, frame without size)
        self.label = "unknown"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)

    async def _serve(self) -> None:
        await asyncio.start_server(self._handle, "127.0.0.1", self.listen_port)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(*self.target)

        async def client_to_broker() -> None:
            with contextlib.suppress(Exception):
                while True:
                    head = await reader.readexactly(4)
                    (size,) = struct.unpack(">i", head)
                    body = await reader.readexactly(size)
                    self.frames.append((self.label, body))
                    up_writer.write(head + body)
                    await up_writer.drain()
            up_writer.close()

        async def broker_to_client() -> None:
            with contextlib.suppress(Exception):
                while data := await up_reader.read(65536):
                    writer.write(data)
                    await writer.drain()
            writer.close()

        await asyncio.gather(client_to_broker(), broker_to_client())


def _confluent(bootstrap: str) -> None:
    from confluent_kafka import Consumer, Producer, TopicPartition
    from confluent_kafka.admin import AdminClient, ConfigResource, NewPartitions, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"cap-ck-{uuid.uuid4().hex[:6]}"
    for f in admin.create_topics([NewTopic(topic, 2, 1)]).values():
        f.result(30)
    admin.describe_configs([ConfigResource("topic", topic)])[ConfigResource("topic", topic)].result(
        30
    )
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        p = Producer({"bootstrap.servers": bootstrap, "compression.type": codec, "linger.ms": 5})
        for i in range(5):
            p.produce(topic, key=f"k{i}".encode(), value=b"v" * 50, headers=[("h", b"x")])
        p.flush(30)
    tp = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})
    tp.produce(topic, b"idem")
    tp.flush(30)
    c = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"cap-ck-{uuid.uuid4().hex[:6]}",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 30
    while got < 10 and time.monotonic() < deadline:
        m = c.poll(1)
        if m is not None and not m.error():
            got += 1
            c.commit(m, asynchronous=False)
    c.committed([TopicPartition(topic, 0)], 10)
    c.get_watermark_offsets(TopicPartition(topic, 0), 10)
    c.offsets_for_times([TopicPartition(topic, 0, int(time.time() * 1000) - 60_000)], 10)
    c.close()
    for f in admin.create_partitions([NewPartitions(topic, 3)]).values():
        f.result(30)
    admin.list_consumer_groups().result(30)
    for f in admin.delete_topics([topic]).values():
        f.result(30)


def _kafka_python(bootstrap: str) -> None:
    from kafka import KafkaConsumer, KafkaProducer
    from kafka.admin import KafkaAdminClient, NewTopic

    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    topic = f"cap-kp-{uuid.uuid4().hex[:6]}"
    admin.create_topics([NewTopic(topic, 1, 1)])
    for codec in (None, "gzip"):
        p = KafkaProducer(bootstrap_servers=bootstrap, compression_type=codec)
        for i in range(5):
            p.send(topic, key=f"k{i}".encode(), value=b"v" * 40, headers=[("h", b"y")])
        p.flush(30)
        p.close()
    c = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=f"cap-kp-{uuid.uuid4().hex[:6]}",
        auto_offset_reset="earliest",
        consumer_timeout_ms=8000,
    )
    for n, _m in enumerate(c):
        if n >= 5:
            break
    c.commit()
    c.close()
    # Extra admin requests for the corpus; whether they succeed does not matter here.
    for extra in (
        admin.list_groups,
        admin.describe_cluster,
        lambda: admin.describe_topics([topic]),
        admin.list_partition_reassignments,
    ):
        with contextlib.suppress(Exception):
            extra()
    admin.delete_topics([topic])
    admin.close()


def _aiokafka(bootstrap: str) -> None:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

    async def run() -> None:
        topic = f"cap-aio-{uuid.uuid4().hex[:6]}"
        p = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await p.start()
        for i in range(5):
            await p.send_and_wait(topic, key=f"k{i}".encode(), value=b"v" * 30)
        await p.stop()
        c = AIOKafkaConsumer(
            topic,
            bootstrap_servers=bootstrap,
            group_id=f"cap-aio-{uuid.uuid4().hex[:6]}",
            auto_offset_reset="earliest",
            enable_auto_commit=False,
        )
        await c.start()
        got = 0
        deadline = time.monotonic() + 30
        while got < 5 and time.monotonic() < deadline:
            batch = await c.getmany(timeout_ms=1000)
            got += sum(len(v) for v in batch.values())
        await c.commit()
        await c.stop()

    asyncio.run(run())


def _kcat(bootstrap: str) -> None:
    kcat = shutil.which("kcat")
    if kcat is None:
        print("kcat not found: skipped", file=sys.stderr)
        return
    topic = f"cap-kcat-{uuid.uuid4().hex[:6]}"
    subprocess.run([kcat, "-b", bootstrap, "-L"], check=True, capture_output=True, timeout=60)
    subprocess.run(
        [kcat, "-b", bootstrap, "-P", "-t", topic, "-K:"],
        input=b"a:1\nb:2\n",
        check=True,
        timeout=60,
    )
    subprocess.run(
        [kcat, "-b", bootstrap, "-C", "-t", topic, "-o", "beginning", "-c", "2", "-e"],
        check=True,
        capture_output=True,
        timeout=60,
    )


CLIENTS = {
    "confluent": _confluent,
    "kafka-python": _kafka_python,
    "aiokafka": _aiokafka,
    "kcat": _kcat,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CORPUS_DIR)
    args = parser.parse_args()
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="sluice-capture-") as tmp:
        broker = SluiceProcess(
            [
                "dev",
                "--host",
                "127.0.0.2",
                "--port",
                str(port),
                "--data-dir",
                f"{tmp}/data",
                "-o",
                "advertised.host=127.0.0.1",
                "-o",
                "produce.commit.interval.ms=20",
            ],
            Path(tmp) / "broker.log",
            port,
            host="127.0.0.2",
        )
        broker.start()
        proxy = RecordingProxy(port, ("127.0.0.2", port))
        proxy.start()
        try:
            for label, run in CLIENTS.items():
                proxy.label = label
                run(f"127.0.0.1:{port}")
                time.sleep(0.5)
        finally:
            broker.stop()
    kept: dict[tuple[str, int, int], list[bytes]] = defaultdict(list)
    for label, frame in proxy.frames:
        if len(frame) < 8 or len(frame) > MAX_FRAME:
            continue
        api_key, version = struct.unpack_from(">hh", frame, 0)
        bucket = kept[(label, api_key, version)]
        if frame not in bucket and len(bucket) < PER_KIND:
            bucket.append(frame)
    args.out.mkdir(parents=True, exist_ok=True)
    for old in args.out.glob("*.bin"):
        old.unlink()
    for (label, api_key, version), frames in sorted(kept.items()):
        for i, frame in enumerate(frames):
            (args.out / f"{label}-k{api_key:02d}-v{version:02d}-{i}.bin").write_bytes(frame)
    print(f"{sum(len(f) for f in kept.values())} frames of {len(kept)} kinds in {args.out}")


if __name__ == "__main__":
    main()
