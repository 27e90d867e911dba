"""Three brokers on one bucket (SeaweedFS) and one database (PostgreSQL), started with
`sluice.cluster.LocalCluster` exactly as `sluice cluster up` starts them.

Any broker serves any partition; producers on different brokers share a partition's offsets;
S3 and PostgreSQL outages and a broker killed mid-flush lose nothing that was acknowledged.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
from aiokafka.client import AIOKafkaClient
from confluent_kafka import KafkaError, Producer
from confluent_kafka.admin import AdminClient

from broker.groups.placement import coordinator_for
from sluice.cluster import LocalCluster
from tests.fixtures.cluster import FAST_LIVENESS, running_cluster

from ._direct import fetch, produce
from ._eos import Progress, fill, start_processor
from ._eos import assert_exactly_once as assert_output_exactly_once
from ._kafka import (
    aiokafka_consume,
    assert_exactly_once,
    assert_same,
    confluent_consume,
    confluent_create_topic,
    confluent_produce,
    expected_single_partition,
    kafka_python_consume,
    standard_messages,
    stream_through,
    wait_until,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory, "cluster", 3, broker_options=FAST_LIVENESS) as c:
        yield c


@pytest.fixture
def healthy(cluster: LocalCluster) -> Iterator[LocalCluster]:
    """The shared cluster with every process running, brokers seeing each other."""
    assert cluster.postgres is not None and cluster.seaweed is not None
    if not cluster.postgres.running:
        cluster.postgres.start()
    if not cluster.seaweed.is_running():
        cluster.seaweed.start()
    for b in cluster.brokers:
        b.log_mark = b.log_size()
        if not b.alive():
            b.start()
    asyncio.run(_wait_for_brokers(cluster, len(cluster.brokers)))
    yield cluster


async def _wait_for_brokers(cluster: LocalCluster, count: int, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    for b in cluster.brokers:
        if not b.alive():
            continue
        while True:
            client = AIOKafkaClient(bootstrap_servers=b.bootstrap)
            try:
                await client.bootstrap()
                seen = len(client.cluster.brokers())
            finally:
                await client.close()
            if seen == count:
                break
            assert time.monotonic() < deadline, f"broker {b.node_id} sees {seen}/{count} brokers"
            await asyncio.sleep(0.1)


@contextlib.asynccontextmanager
async def direct_client(cluster: LocalCluster) -> AsyncIterator[AIOKafkaClient]:
    client = AIOKafkaClient(bootstrap_servers=cluster.bootstrap)
    await client.bootstrap()
    try:
        yield client
    finally:
        await client.close()


def test_any_broker_serves_any_partition(healthy: LocalCluster, topic: str) -> None:
    confluent_create_topic(healthy.bootstrap, topic, partitions=3)
    nodes = [b.node_id for b in healthy.brokers]

    async def run() -> None:
        async with direct_client(healthy) as client:
            # Each broker writes to each partition...
            for partition in range(3):
                for node in nodes:
                    error, _ = await produce(
                        client, node, topic, partition, [f"{partition}/{node}".encode()]
                    )
                    assert error == 0
            # ...and every broker reads every partition, in the same order.
            for partition in range(3):
                expected = [(i, f"{partition}/{n}".encode()) for i, n in enumerate(nodes)]
                for node in nodes:
                    error, records = await fetch(client, node, topic, partition, 0)
                    assert (error, records) == (0, expected), f"via broker {node}"

    asyncio.run(run())


def test_concurrent_producers_on_different_brokers_share_one_partition(
    healthy: LocalCluster, topic: str
) -> None:
    confluent_create_topic(healthy.bootstrap, topic, partitions=1)
    requests_per_broker, records_per_request = 25, 8

    async def producer(client: AIOKafkaClient, node: int) -> list[tuple[int, list[bytes]]]:
        acked = []
        for i in range(requests_per_broker):
            values = [f"{node}-{i}-{j}".encode() for j in range(records_per_request)]
            error, base = await produce(client, node, topic, 0, values)
            assert error == 0, f"broker {node}: error {error}"
            acked.append((base, values))
        return acked

    async def run() -> list[tuple[int, list[bytes]]]:
        async with direct_client(healthy) as client:
            per_broker = await asyncio.gather(
                *(producer(client, b.node_id) for b in healthy.brokers)
            )
        return [a for acks in per_broker for a in acks]

    acked = asyncio.run(run())
    total = len(acked) * records_per_request
    # Acknowledged ranges are disjoint and tile [0, total).
    ranges = sorted((base, base + len(values)) for base, values in acked)
    assert ranges[0][0] == 0 and ranges[-1][1] == total
    assert all(a[1] == b[0] for a, b in itertools.pairwise(ranges))
    # Every acknowledged record is where its acknowledgement said, read by a stock consumer.
    got = confluent_consume(healthy.bootstrap, topic, expected=total)
    stored = {g.offset: g.value for g in got}
    assert len(got) == total
    for base, values in acked:
        assert [stored[base + j] for j in range(len(values))] == values


def test_stock_clients_across_three_brokers(healthy: LocalCluster, topic: str) -> None:
    confluent_create_topic(healthy.bootstrap, topic, partitions=6)
    msgs = standard_messages(n=180)
    placed = confluent_produce(healthy.bootstrap, topic, msgs, partition=None)
    expected = sorted(
        ((p, o, m.key, m.value, tuple(m.headers)) for (p, o), m in zip(placed, msgs, strict=True)),
        key=lambda t: (t[0], t[1]),
    )
    # Each client bootstraps through a different broker.
    bootstraps = [b.bootstrap for b in healthy.brokers]
    for name, got in (
        ("confluent", confluent_consume(bootstraps[2], topic, range(6), expected=len(msgs))),
        ("kafka-python", kafka_python_consume(bootstraps[1], topic, range(6), len(msgs))),
        ("aiokafka", aiokafka_consume(bootstraps[0], topic, partitions=range(6), expected=180)),
    ):
        seen = sorted(
            ((g.partition, g.offset, g.key, g.value, tuple(g.headers)) for g in got),
            key=lambda t: (t[0], t[1]),
        )
        assert seen == expected, name
    # The leaders are spread over all three brokers.
    md = AdminClient({"bootstrap.servers": healthy.bootstrap}).list_topics(topic, timeout=10)
    leaders = {p.leader for p in md.topics[topic].partitions.values()}
    assert leaders == {1, 2, 3}


def test_record_produced_through_a_killed_broker_is_read_through_another(
    healthy: LocalCluster, topic: str
) -> None:
    confluent_create_topic(healthy.bootstrap, topic, partitions=1)
    msgs = standard_messages(n=60)
    confluent_produce(healthy.bootstrap, topic, msgs, acks="all")
    md = AdminClient({"bootstrap.servers": healthy.bootstrap}).list_topics(topic, timeout=10)
    leader = md.topics[topic].partitions[0].leader
    healthy.broker(leader).kill()
    others = ",".join(b.bootstrap for b in healthy.brokers if b.node_id != leader)
    got = confluent_consume(others, topic, expected=len(msgs))
    assert_same(got, expected_single_partition(msgs))


def test_s3_outage_fails_produce_then_recovers_without_loss(
    healthy: LocalCluster, topic: str
) -> None:
    assert healthy.seaweed is not None
    confluent_create_topic(healthy.bootstrap, topic, partitions=3)

    def outage() -> None:
        assert healthy.seaweed is not None
        healthy.seaweed.stop()
        # While S3 is down a producer that does not retry gets an error, not an ack.
        probe = Producer(
            {
                "bootstrap.servers": healthy.bootstrap,
                "acks": "all",
                "message.send.max.retries": 0,
                "message.timeout.ms": 20_000,
            }
        )
        errors: list[KafkaError] = []
        probe.produce(
            topic, b"during outage", partition=0, on_delivery=lambda e, m: errors.append(e)
        )
        probe.flush(25)
        assert errors and errors[0] is not None, "a produce was acknowledged while S3 was down"
        assert errors[0].code() in (
            KafkaError.KAFKA_STORAGE_ERROR,
            KafkaError.REQUEST_TIMED_OUT,
            KafkaError._MSG_TIMED_OUT,
        ), errors[0]
        healthy.seaweed.start()

    stream = stream_through(healthy.bootstrap, topic, 1500, outage)
    got = confluent_consume(healthy.bootstrap, topic, partitions=range(3), expected=1500)
    assert_exactly_once(stream, got, 3)


def test_postgres_restart_mid_load_loses_nothing(healthy: LocalCluster, topic: str) -> None:
    assert healthy.postgres is not None
    confluent_create_topic(healthy.bootstrap, topic, partitions=3)
    stream = stream_through(healthy.bootstrap, topic, 1500, healthy.postgres.restart)
    got = confluent_consume(healthy.bootstrap, topic, partitions=range(3), expected=1500)
    assert_exactly_once(stream, got, 3)


def test_broker_killed_mid_flush_loses_no_acknowledged_record(
    healthy: LocalCluster, topic: str
) -> None:
    confluent_create_topic(healthy.bootstrap, topic, partitions=3)
    victim = healthy.brokers[1]

    def kill_and_restart() -> None:
        victim.kill()
        time.sleep(1.0)  # the others keep serving meanwhile
        victim.start()

    stream = stream_through(healthy.bootstrap, topic, 2000, kill_and_restart)
    got = confluent_consume(healthy.bootstrap, topic, partitions=range(3), expected=2000)
    assert_exactly_once(stream, got, 3)


def test_exactly_once_when_the_transaction_coordinator_is_killed(
    healthy: LocalCluster, topic: str, tmp_path: Path
) -> None:
    """Consume-transform-produce keeps going, exactly once, through a SIGKILL of the broker
    that coordinates its transactional id: the state is in the database, so the next
    coordinator finishes or aborts what the dead one left."""
    source, sink, n = topic, topic + "-out", 1500
    confluent_create_topic(healthy.bootstrap, source, partitions=3)
    confluent_create_topic(healthy.bootstrap, sink, partitions=3)
    fill(healthy.bootstrap, source, n, 3)
    group, txn_id = f"eos-{topic}", f"eos-{topic}"
    victim = coordinator_for(txn_id, healthy.brokers)
    assert victim is not None
    progress = Progress(healthy.bootstrap, group, source, 3)

    # Paced (>= 3 s for the 150 transactions) so that the kill lands while it is busy:
    # unpaced it can finish first and the test would check nothing.
    def start() -> subprocess.Popen[bytes]:
        return start_processor(
            healthy.bootstrap, source, sink, group, txn_id, tmp_path / "p.log", pause_s=0.02
        )

    proc = start()
    try:
        wait_until(lambda: progress() > 0, "a processor commit", 60)
        time.sleep(0.3)
        victim.kill()
        before = progress()
        assert before < n, "the processor finished before the coordinator was killed"
        victim.start()
        # librdkafka can block in send_offsets_to_transaction for good, ignoring its timeout,
        # when the group coordinator it cached has left the metadata (confluentinc/librdkafka
        # #5511 and #5456, open): as a liveness probe would, a processor that stops making
        # progress is killed and restarted. Exactly-once must hold either way.
        restarts, last, since = 0, before, time.monotonic()
        while (now := progress()) < n:
            if now > last:
                last, since = now, time.monotonic()
            elif time.monotonic() - since > 30:
                assert restarts < 3, f"no progress past {now}/{n} after {restarts} restarts"
                proc.kill()
                proc.wait(10)
                proc, restarts, since = start(), restarts + 1, time.monotonic()
            time.sleep(0.2)
        assert proc.poll() is None, "the processor died"
    finally:
        progress.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    assert_output_exactly_once(healthy.bootstrap, sink, n, 3)


def test_cluster_state_is_in_one_directory(healthy: LocalCluster) -> None:
    root = Path(healthy.root)
    for b in healthy.brokers:
        assert (root / f"broker-{b.node_id}" / "broker.log").exists()
        assert (root / f"broker-{b.node_id}" / "broker.properties").stat().st_mode & 0o077 == 0
    assert (root / "postgres" / "postgres.log").exists()
    assert (root / "seaweedfs" / "weed.log").exists()
    # No record data on the brokers' disks: it is all in the bucket. (The data directory
    # holds only the lock that keeps a second process off it.)
    for b in healthy.brokers:
        files = [p for p in (root / f"broker-{b.node_id}" / "data").rglob("*") if p.is_file()]
        assert [p.name for p in files] == [".lock"]


def test_metrics_and_health_endpoints(healthy: LocalCluster, topic: str) -> None:
    confluent_create_topic(healthy.bootstrap, topic, partitions=3)
    before = sum(b.metrics().get("sluice_produced_bytes_total", 0) for b in healthy.brokers)
    confluent_produce(healthy.bootstrap, topic, standard_messages(n=30), partition=None)
    after = sum(b.metrics().get("sluice_produced_bytes_total", 0) for b in healthy.brokers)
    assert after > before
    # Fresh objects go into the fetch cache on write; a tail read is then a cache hit.
    assert any(b.metrics().get("sluice_fetch_cache_bytes", 0) > 0 for b in healthy.brokers)
    confluent_consume(healthy.bootstrap, topic, partitions=range(3), expected=30)
    assert sum(b.metrics().get("sluice_fetch_cache_hit_blocks", 0) for b in healthy.brokers) > 0
    for b in healthy.brokers:
        assert b.http_get("/healthz")[0] == 200
        assert b.http_get("/readyz") == (200, "ready\n")
