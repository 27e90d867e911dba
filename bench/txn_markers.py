"""Transaction ends on diskless topics: object-store PUTs per end and EndTxn latency.

    .venv/bin/python -m bench.txn_markers                       # ~3 min
    .venv/bin/python -m bench.txn_markers --producers 1,8 --seconds 20 --repeats 3
    .venv/bin/python -m bench.txn_markers -o diskless.txn.marker.objects=true  # as before

One broker of a LocalCluster (SeaweedFS + PostgreSQL, the default PUT budget of
``object.store=s3``). For each count of producers: that many transactional
confluent-kafka producers (librdkafka: transaction version 1), each on its own thread,
every 100 ms (Kafka Streams' ``exactly_once_v2`` commit interval) begin a transaction,
send one 1 KiB record to each of 2 of the topic's 6 partitions, flush, and commit. The
commit is timed after the flush: the EndTxn round trip (the markers, one coordinator
call). Every 10th transaction aborts instead.

PUTs are counted in the bucket: the objects it gained during the phase (nothing is deleted
that soon) are the broker's produce flushes (``sluice_upload_seconds``: one object each)
and whatever else it uploaded; before issue 29 that was one object of markers per
transaction end. Figures are medians of --repeats runs; latencies are per run, all ends
of all producers together.
"""

from __future__ import annotations

import argparse
import asyncio
import threading
import time
import uuid
from dataclasses import dataclass

from .commit_latency import PUT_USD
from .harness import add_broker_options, broker_options, one_broker, say
from .produce_consume import RECORD_SIZE, create_topic
from .stats import med, percentile
from .storage_ops import MetricsDelta
from .workdir import workdir

PARTITIONS = 6
PER_TXN = 2  # partitions (one record each) per transaction
INTERVAL_S = 0.1
ABORT_EVERY = 10


@dataclass
class Phase:
    producers: int
    ends: int
    seconds: float
    objects: int  # objects the bucket gained
    flushes: float  # produce objects the broker uploaded
    end_ms: list[float]  # sorted

    @property
    def puts_per_end(self) -> float:
        return (self.objects - self.flushes) / self.ends if self.ends else float("nan")

    @property
    def puts_per_s(self) -> float:
        return self.objects / self.seconds

    @property
    def ends_per_s(self) -> float:
        return self.ends / self.seconds

    @property
    def p50_ms(self) -> float:
        return percentile(self.end_ms, 0.5)

    @property
    def p99_ms(self) -> float:
        return percentile(self.end_ms, 0.99)


def _one_producer(
    bootstrap: str, topic: str, index: int, stop: threading.Event, ends_ms: list[float]
) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": f"bench-markers-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
        }
    )
    producer.init_transactions(60)
    payload = bytes(RECORD_SIZE)
    count = 0
    next_at = time.perf_counter()
    while not stop.is_set():
        producer.begin_transaction()
        for i in range(PER_TXN):
            producer.produce(topic, payload, partition=(index + count + i) % PARTITIONS)
        producer.flush(60)
        count += 1
        t0 = time.perf_counter()
        if count % ABORT_EVERY == 0:
            producer.abort_transaction(60)
        else:
            producer.commit_transaction(60)
        ends_ms.append((time.perf_counter() - t0) * 1000)
        next_at += INTERVAL_S
        time.sleep(max(0.0, next_at - time.perf_counter()))


def _count_objects(cluster: object) -> int:
    from storage.objects.s3 import S3ObjectStore

    s3 = cluster.s3  # type: ignore[attr-defined]
    store = S3ObjectStore(s3.store_config(path_style=True))

    async def count() -> int:
        await store.start()
        try:
            return sum([len(page) async for page in store.list_objects()])
        finally:
            await store.close()

    return asyncio.run(count())


def phase(cluster: object, producers: int, seconds: float) -> Phase:
    broker = cluster.brokers[0]  # type: ignore[attr-defined]
    topic = create_topic(broker.bootstrap, PARTITIONS)
    stop = threading.Event()
    per_producer: list[list[float]] = [[] for _ in range(producers)]
    threads = [
        threading.Thread(
            target=_one_producer,
            args=(broker.bootstrap, topic, i, stop, per_producer[i]),
            daemon=True,
        )
        for i in range(producers)
    ]
    for t in threads:
        t.start()
    time.sleep(3)  # init_transactions and metadata, not measured
    # Ends are counted the moment a listing returns (an S3 client takes a while to start).
    scrape0, objects0 = broker.metrics(), _count_objects(cluster)
    warm, t0 = [len(e) for e in per_producer], time.perf_counter()
    time.sleep(seconds)
    scrape1, objects1 = broker.metrics(), _count_objects(cluster)
    done, t1 = [len(e) for e in per_producer], time.perf_counter()
    stop.set()
    for t in threads:
        t.join(120)
    delta = MetricsDelta(scrape0, scrape1)
    measured = sorted(x for e, a, b in zip(per_producer, warm, done, strict=True) for x in e[a:b])
    return Phase(
        producers,
        sum(done) - sum(warm),
        t1 - t0,
        objects1 - objects0,
        delta.histogram("sluice_upload_seconds").count,
        measured,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--producers", default="1,8", help="comma-separated counts")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--repeats", type=int, default=1)
    add_broker_options(parser, "the broker")
    args = parser.parse_args()
    options = broker_options(args.options)
    counts = [int(n) for n in args.producers.split(",")]
    results: dict[int, list[Phase]] = {n: [] for n in counts}
    with workdir(keep=False) as wd, one_broker(wd / "s3", options) as cluster:
        for _ in range(args.repeats):
            for n in counts:
                p = phase(cluster, n, args.seconds)
                results[n].append(p)
                say(
                    f"  {n} producers: {p.ends} ends in {p.seconds:.1f} s, "
                    f"{p.objects} objects, {p.flushes:.0f} produce flushes, "
                    f"EndTxn p50 {p.p50_ms:.1f} ms p99 {p.p99_ms:.1f} ms"
                )
    say()
    say(f"options: {options or 'defaults'}")
    say(
        f"{'producers':>9} {'ends/s':>7} {'PUTs/s':>7} {'produce':>8} {'PUT/end':>8} "
        f"{'p50 ms':>7} {'p99 ms':>7} {'$/month':>8}"
    )
    for n, phases in results.items():

        def m(f: object, phases: list[Phase] = phases) -> float:
            return med([f(p) for p in phases])  # type: ignore[operator]

        puts_s = m(lambda p: p.puts_per_s)
        say(
            f"{n:>9} {m(lambda p: p.ends_per_s):>7.1f} {puts_s:>7.2f} "
            f"{m(lambda p: p.flushes / p.seconds):>8.2f} {m(lambda p: p.puts_per_end):>8.3f} "
            f"{m(lambda p: p.p50_ms):>7.1f} {m(lambda p: p.p99_ms):>7.1f} "
            f"{puts_s * PUT_USD * 3600 * 24 * 30:>8.2f}"
        )


if __name__ == "__main__":
    main()
