"""The metadata transformer on six brokers in three racks behind a controller quorum.

Every client names its AZ (``client.id=app,diskless_az=<az>``, or only ``client.rack`` for
KIP-392 consumers); the brokers count record bytes by client AZ and broker rack, so "no
byte crossed AZs" is measured, not inferred from Metadata answers.
"""

from __future__ import annotations

import asyncio
import re
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.cluster import BrokerProcess, LocalCluster
from tests.fixtures.cluster import FAST_LIVENESS, running_cluster

from ._kafka import wait_until

pytestmark = pytest.mark.e2e

RACKS = ("az-a", "az-b", "az-c")
SESSION_MS = int(FAST_LIVENESS["broker.session.timeout.ms"])
PARTITIONS = 6
# Fast metadata refreshes so clients follow a dead broker's partitions within seconds.
LIBRDKAFKA_FAST = {"topic.metadata.refresh.interval.ms": 500, "metadata.max.age.ms": 1500}
_SAMPLE = re.compile(
    r'sluice_client_bytes_total\{broker_rack="([^"]*)",client_az="([^"]*)",direction="([^"]*)"\}'
)

Bytes = dict[tuple[str, str, str], float]  # (direction, client_az, broker_rack) -> bytes


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory,
        "az",
        brokers=6,
        racks=RACKS,
        broker_options=FAST_LIVENESS,
        controllers=3,
        controller_options={"broker.session.timeout.ms": str(SESSION_MS)},
    ) as local:
        admin = AdminClient({"bootstrap.servers": local.bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 6, "six brokers", 60)
        yield local


def client_bytes(cluster: LocalCluster) -> Bytes:
    out: Bytes = {}
    for b in cluster.brokers:
        if not b.alive():
            continue  # a killed broker: its counters died with it (deltas only use live ones)
        for key, value in b.metrics().items():
            m = _SAMPLE.fullmatch(key)
            if m:
                rack, az, direction = m.groups()
                k = (direction, az, rack)
                out[k] = out.get(k, 0.0) + value
    return out


def delta(before: Bytes, after: Bytes) -> Bytes:
    return {k: v - before.get(k, 0.0) for k, v in after.items() if v - before.get(k, 0.0) > 0}


def assert_in_az(moved: Bytes, direction: str, az: str) -> None:
    local = sum(v for (d, a, r), v in moved.items() if d == direction and a == az and r == az)
    crossed = {k: v for k, v in moved.items() if k[0] == direction and k[1] == az and k[2] != az}
    assert local > 0, f"no {direction} bytes from {az} clients at all: {moved}"
    assert not crossed, f"{direction} bytes of {az} clients crossed AZs: {crossed}"


def create_topic(cluster: LocalCluster, name: str) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(name, num_partitions=PARTITIONS)])[name].result(20)
    wait_until(
        lambda: len(admin.list_topics(name, timeout=10).topics[name].partitions) == PARTITIONS,
        "the topic's partitions",
        10,
    )


def values(prefix: str, n: int) -> list[bytes]:
    return [f"{prefix}-{i}".encode() * 8 for i in range(n)]


# --- the three clients, producing and consuming with a client id -------------------------


def confluent_produce(bootstrap: str, topic: str, client_id: str, vals: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "client.id": client_id, "linger.ms": 5,
                  **LIBRDKAFKA_FAST})  # fmt: skip
    for i, v in enumerate(vals):
        p.produce(topic, value=v, partition=i % PARTITIONS)
        p.poll(0)
    assert p.flush(60) == 0


def confluent_consume(bootstrap: str, topic: str, expected: int, **conf: object) -> list[bytes]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"az-{uuid.uuid4().hex[:8]}",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  **LIBRDKAFKA_FAST, **conf})  # fmt: skip
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTITIONS)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < expected and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and m.error() is None:
                got.append(m.value())
    finally:
        c.close()
    return got


def kafka_python_produce(bootstrap: str, topic: str, client_id: str, vals: list[bytes]) -> None:
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, linger_ms=5)
    for i, v in enumerate(vals):
        p.send(topic, value=v, partition=i % PARTITIONS)
    p.flush(60)
    p.close()


def kafka_python_consume(bootstrap: str, topic: str, client_id: str, expected: int) -> list[bytes]:
    from kafka import KafkaConsumer
    from kafka import TopicPartition as KTP

    c = KafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, group_id=None,
                      enable_auto_commit=False, auto_offset_reset="earliest")  # fmt: skip
    c.assign([KTP(topic, p) for p in range(PARTITIONS)])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(got) < expected and time.monotonic() < deadline:
        for records in c.poll(timeout_ms=500).values():
            got.extend(r.value for r in records)
    c.close()
    return got


async def _aiokafka(
    bootstrap: str, topic: str, client_id: str, vals: list[bytes], expected: int
) -> list[bytes]:
    from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
    from aiokafka import TopicPartition as ATP

    p = AIOKafkaProducer(bootstrap_servers=bootstrap, client_id=client_id, linger_ms=5)
    await p.start()
    try:
        sent = [await p.send(topic, value=v, partition=i % PARTITIONS) for i, v in enumerate(vals)]
        await asyncio.gather(*sent)
    finally:
        await p.stop()
    c = AIOKafkaConsumer(bootstrap_servers=bootstrap, client_id=client_id, group_id=None,
                         enable_auto_commit=False, auto_offset_reset="earliest")  # fmt: skip
    await c.start()
    got: list[bytes] = []
    try:
        c.assign([ATP(topic, p) for p in range(PARTITIONS)])
        deadline = time.monotonic() + 30
        while len(got) < expected and time.monotonic() < deadline:
            for records in (await c.getmany(timeout_ms=500)).values():
                got.extend(r.value for r in records)
    finally:
        await c.stop()
    return got


# --- tests --------------------------------------------------------------------------------


def test_every_byte_stays_in_the_clients_az(cluster: LocalCluster, topic: str) -> None:
    create_topic(cluster, topic)
    before = client_bytes(cluster)
    boot = cluster.bootstrap

    a_vals = values("a", 300)
    confluent_produce(boot, topic, "app,diskless_az=az-a", a_vals)
    b_vals = values("b", 300)
    kafka_python_produce(boot, topic, "app,diskless_az=az-b", b_vals)
    c_vals = values("c", 300)
    total = len(a_vals) + len(b_vals) + len(c_vals)
    c_got = asyncio.run(_aiokafka(boot, topic, "app,diskless_az=az-c", c_vals, total))

    a_got = confluent_consume(boot, topic, total, **{"client.id": "app,diskless_az=az-a"})
    b_got = kafka_python_consume(boot, topic, "app,diskless_az=az-b", total)
    assert sorted(a_got) == sorted(b_got) == sorted(a_vals + b_vals + c_vals)
    assert sorted(c_got) == sorted(a_got)

    moved = delta(before, client_bytes(cluster))
    for az in RACKS:
        assert_in_az(moved, "produce", az)
        assert_in_az(moved, "fetch", az)


def test_admin_views_are_per_az(cluster: LocalCluster, topic: str) -> None:
    """DescribeTopicPartitions (newer admin tools) routes like Metadata; DescribeCluster
    shows every broker's rack and a live broker as controller."""
    from kafka.admin import KafkaAdminClient

    create_topic(cluster, topic)
    rack_of = {b.node_id: b.rack for b in cluster.brokers}
    admin = KafkaAdminClient(bootstrap_servers=cluster.bootstrap, client_id="tool,diskless_az=az-b")
    try:
        pages = [admin.describe_topic_partitions([topic], response_partition_limit=4)]
        assert pages[0]["next_cursor"] == {"topic_name": topic, "partition_index": 4}
        pages.append(admin.describe_topic_partitions([topic], 4, cursor=pages[0]["next_cursor"]))
        assert pages[1]["next_cursor"] is None
    finally:
        admin.close()
    partitions = [p for page in pages for t in page["topics"] for p in t["partitions"]]
    assert [p["partition_index"] for p in partitions] == list(range(PARTITIONS))
    for p in partitions:
        assert rack_of[p["leader_id"]] == "az-b", p
        assert p["replica_nodes"] == p["isr_nodes"] == [p["leader_id"]], p

    plain = AdminClient({"bootstrap.servers": cluster.bootstrap})  # kept alive for the result
    described = plain.describe_cluster().result(20)
    assert {(n.id, n.rack) for n in described.nodes} == set(rack_of.items())
    assert described.controller.id == min(rack_of)


def test_client_rack_consumer_reads_from_its_az(cluster: LocalCluster, topic: str) -> None:
    create_topic(cluster, topic)
    vals = values("r", 300)
    confluent_produce(cluster.bootstrap, topic, "unaware-producer", vals)
    before = client_bytes(cluster)
    got = confluent_consume(cluster.bootstrap, topic, len(vals), **{"client.rack": "az-b"})
    assert sorted(got) == sorted(vals)
    # Partitions led outside az-b were redirected (KIP-392) before any record moved.
    assert_in_az(delta(before, client_bytes(cluster)), "fetch", "az-b")


def _kill_and_wait_fenced(cluster: LocalCluster, victims: list[BrokerProcess]) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    for v in victims:
        v.kill()
    dead = {v.node_id for v in victims}
    wait_until(
        lambda: not dead & set(admin.list_topics(timeout=10).brokers),
        "the dead brokers to be fenced",
        SESSION_MS / 1000 + 8,
    )


def test_dead_broker_partitions_move_to_the_other_broker_of_its_az(
    cluster: LocalCluster, topic: str
) -> None:
    create_topic(cluster, topic)
    boot = cluster.bootstrap
    first = values("before", 120)
    confluent_produce(boot, topic, "app,diskless_az=az-a", first)
    victim = next(b for b in cluster.brokers if b.rack == "az-a")
    other = next(b for b in cluster.brokers if b.rack == "az-a" and b is not victim)
    _kill_and_wait_fenced(cluster, [victim])
    try:
        before = client_bytes(cluster)
        second = values("after", 240)
        confluent_produce(boot, topic, "app,diskless_az=az-a", second)
        got = confluent_consume(boot, topic, len(first) + len(second),
                                **{"client.id": "app,diskless_az=az-a"})  # fmt: skip
        assert sorted(got) == sorted(first + second)
        moved = delta(before, client_bytes(cluster))
        assert_in_az(moved, "produce", "az-a")
        assert_in_az(moved, "fetch", "az-a")
        on_other = other.metrics()
        assert any(
            k.startswith("sluice_client_bytes_total") and 'client_az="az-a"' in k and v > 0
            for k, v in on_other.items()
        )
    finally:
        victim.start()


def test_az_without_brokers_falls_back_across_azs(cluster: LocalCluster, topic: str) -> None:
    create_topic(cluster, topic)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 6, "six brokers", 60)
    victims = [b for b in cluster.brokers if b.rack == "az-c"]
    _kill_and_wait_fenced(cluster, victims)
    boot = ",".join(f"{b.host}:{b.port}" for b in cluster.brokers if b.rack != "az-c")
    vals = values("fallback", 200)
    confluent_produce(boot, topic, "app,diskless_az=az-c", vals)
    got = confluent_consume(boot, topic, len(vals), **{"client.id": "app,diskless_az=az-c"})
    assert sorted(got) == sorted(vals)
    miss = sum(
        v
        for b in cluster.brokers
        if b.rack != "az-c"
        for k, v in b.metrics().items()
        if k == 'sluice_client_az_requests_total{result="miss"}'
    )
    assert miss > 0
