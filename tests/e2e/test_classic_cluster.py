"""Classic topics (diskless.enable=false) on three brokers in three racks behind one
controller: local logs replicated leader to followers with Kafka's own Fetch.

Stock clients only. Each test takes seconds: liveness and replica.lag.time.max.ms are short.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import (
    Consumer,
    ElectionType,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, NewTopic
from kafka import KafkaAdminClient

from sluice.cluster import LocalCluster
from tests.fixtures.cluster import fast_cluster

from ._kafka import (
    LIBRDKAFKA_0082_CONSUMER,
    LIBRDKAFKA_0082_RECORD,
    aiokafka_consume,
    assert_exactly_once,
    confluent_consume,
    kafka_python_consume,
    stream_through,
    wait_until,
)

pytestmark = pytest.mark.e2e

RACKS = ("az-a", "az-b", "az-c")
LAG_MS = 2000
CLASSIC = {"diskless.enable": "false"}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with fast_cluster(
        tmp_path_factory,
        "classic",
        brokers=3,
        racks=RACKS,
        broker_options={
            "replica.lag.time.max.ms": str(LAG_MS),
            "replica.fetch.backoff.ms": "200",
        },
        controllers=1,
    ) as c:
        yield c


@pytest.fixture
def healthy(cluster: LocalCluster) -> Iterator[LocalCluster]:
    for b in cluster.brokers:
        if b.alive() and b.proc is not None:
            os.kill(b.proc.pid, signal.SIGCONT)
        if not b.alive():
            b.start()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, "three live brokers", 20)
    yield cluster


def describe(admin: AdminClient, topic: str) -> dict[int, tuple[int, list[int], list[int]]]:
    """partition -> (leader, replicas, isr)."""
    md = admin.list_topics(topic, timeout=10).topics[topic]
    return {p.id: (p.leader, list(p.replicas), sorted(p.isrs)) for p in md.partitions.values()}


def create(
    admin: AdminClient,
    topic: str,
    configs: dict[str, str],
    assignment: list[list[int]] | None = None,
) -> None:
    if assignment is not None:
        new = NewTopic(
            topic, len(assignment), replica_assignment=assignment, config={**CLASSIC, **configs}
        )
    else:
        new = NewTopic(topic, 1, 3, config={**CLASSIC, **configs})
    admin.create_topics([new])[topic].result(20)
    wait_until(
        lambda: all(len(isr) == 3 for _, _, isr in describe(admin, topic).values()),
        "a full ISR",
        15,
    )


def test_rf3_acks_all_with_confluent_consumed_by_kafka_python_and_aiokafka(
    healthy: LocalCluster, topic: str
) -> None:
    admin = AdminClient({"bootstrap.servers": healthy.bootstrap})
    create(admin, topic, {"min.insync.replicas": "2"})
    leader, replicas, isr = describe(admin, topic)[0]
    assert sorted(replicas) == [1, 2, 3] and isr == [1, 2, 3] and leader in replicas
    producer = Producer({"bootstrap.servers": healthy.bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[str] = []
    for i in range(2000):
        producer.produce(
            topic,
            key=b"k%d" % (i % 7),
            value=b"%d" % i,
            on_delivery=lambda err, _m: err and errors.append(str(err)),
        )
        producer.poll(0)
    assert producer.flush(30) == 0 and not errors
    for got in (
        kafka_python_consume(healthy.bootstrap, topic, expected=2000),
        aiokafka_consume(healthy.bootstrap, topic, expected=2000),
    ):
        assert [int(g.value or b"-1") for g in got] == list(range(2000))
        assert [g.offset for g in got] == list(range(2000))
    # KIP-392: a consumer in a follower's rack is sent to that follower and reads there.
    rack_of = {b.node_id: b.rack for b in healthy.brokers}
    follower = next(r for r in replicas if r != leader)
    before = _fetches_served(healthy, follower)
    got = confluent_consume(
        healthy.bootstrap, topic, expected=2000, **{"client.rack": rack_of[follower]}
    )
    assert [int(g.value or b"-1") for g in got] == list(range(2000))
    assert _fetches_served(healthy, follower) > before
    # Every replica holds the log locally, byte for byte the leader's.
    sizes = set()
    for b in healthy.brokers:
        directory = b.data_dir / f"{topic}-0"
        sizes.add(sum(f.stat().st_size for f in directory.glob("*.log")))
    wait_until(lambda: len(sizes) == 1, "equal replicas", 1)


def _fetches_served(cluster: LocalCluster, node: int) -> float:
    """Fetch requests broker ``node`` has answered (its /metrics)."""
    metrics = cluster.broker(node).metrics()
    return metrics.get('sluice_requests_total{api="Fetch"}', 0.0)


def _pid(cluster: LocalCluster, node: int) -> int:
    proc = cluster.broker(node).proc
    assert proc is not None
    return proc.pid


def test_stopped_follower_leaves_the_isr_and_rejoins(healthy: LocalCluster, topic: str) -> None:
    # Clients bootstrap from broker 1 only: the stopped broker must not be asked for metadata.
    boot = healthy.broker(1).bootstrap
    admin = AdminClient({"bootstrap.servers": boot})
    # Leader 1; broker 3 a follower of both topics.
    create(admin, topic, {"min.insync.replicas": "2"}, [[1, 2, 3]])
    strict = topic + "-strict"
    create(admin, strict, {"min.insync.replicas": "3"}, [[1, 2, 3]])
    # No retries: NOT_ENOUGH_REPLICAS is retriable, a retrying producer would only report
    # its own timeout.
    producer = Producer({"bootstrap.servers": boot, "acks": "all", "retries": 0})
    os.kill(_pid(healthy, 3), signal.SIGSTOP)
    try:
        wait_until(lambda: describe(admin, topic)[0][2] == [1, 2], "the ISR to shrink", 15)
        results: dict[str, list[KafkaError | None]] = {topic: [], strict: []}
        for t in (topic, strict):
            for i in range(20):
                producer.produce(
                    t, value=b"%d" % i, on_delivery=lambda err, _m, t=t: results[t].append(err)
                )
            producer.flush(25)
        # min.insync.replicas=2 with ISR {1,2}: produce goes on.
        assert results[topic] == [None] * 20
        # min.insync.replicas=3: refused, the records are not written.
        assert results[strict] and all(
            e is not None and e.code() == KafkaError.NOT_ENOUGH_REPLICAS for e in results[strict]
        ), results[strict][:3]
    finally:
        os.kill(_pid(healthy, 3), signal.SIGCONT)
    wait_until(lambda: describe(admin, topic)[0][2] == [1, 2, 3], "broker 3 back in the ISR", 20)
    got = confluent_consume(healthy.bootstrap, topic, expected=20)
    assert [int(g.value or b"-1") for g in got] == list(range(20))
    # Nothing of the refused records was written.
    check = Consumer({"bootstrap.servers": boot, "group.id": "check"})
    try:
        assert check.get_watermark_offsets(TopicPartition(strict, 0), 10, cached=False) == (0, 0)
    finally:
        check.close()


def test_preferred_leader_election_after_a_stopped_leader_returns(
    healthy: LocalCluster, topic: str
) -> None:
    """kafka-leader-election.sh --election-type PREFERRED: a leader that was away comes back
    as a follower; once it is in the ISR again the operator gives it its leadership back."""
    boot = healthy.broker(2).bootstrap  # not the broker that is stopped
    admin = AdminClient({"bootstrap.servers": boot})
    create(admin, topic, {"min.insync.replicas": "2"}, [[1, 2, 3]])
    os.kill(_pid(healthy, 1), signal.SIGSTOP)
    try:
        # A fresh client per look: one that knows broker 1 may ask the stopped broker.
        wait_until(
            lambda: describe(AdminClient({"bootstrap.servers": boot}), topic)[0][0] == 2,
            "leadership to move to 2",
            20,
        )
    finally:
        os.kill(_pid(healthy, 1), signal.SIGCONT)
    wait_until(lambda: describe(admin, topic)[0][2] == [1, 2, 3], "broker 1 back in the ISR", 20)
    assert describe(admin, topic)[0][0] == 2  # no automatic move yet (interval: 300 s)
    producer = Producer({"bootstrap.servers": boot, "acks": "all"})
    for i in range(10):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(20) == 0
    tp = TopicPartition(topic, 0)
    result = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(20)
    assert [(k.topic, k.partition) for k in result] == [(topic, 0)] and result[tp] is None
    assert describe(admin, topic)[0][0] == 1
    # Again: nothing to do, which Kafka reports as ELECTION_NOT_NEEDED.
    again = admin.elect_leaders(ElectionType.PREFERRED, [tp]).result(20)
    assert again[tp] is not None and again[tp].code() == KafkaError.ELECTION_NOT_NEEDED
    for i in range(10, 20):
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(20) == 0
    got = confluent_consume(healthy.bootstrap, topic, expected=20)
    assert [int(g.value or b"-1") for g in got] == list(range(20))


def test_librdkafka_0082_reads_records_near_its_fetch_limit(
    healthy: LocalCluster, topic: str
) -> None:
    """librdkafka's test 0082 on a classic RF=3 topic: 10 records of 900 KiB in each of 3
    partitions, consumed with fetch.max.bytes=1000000 and receive.message.max.bytes=1000512.
    An answer carrying two partitions' batches (1.84 MB) made librdkafka drop the
    connection and ask again forever: 0 of 30 in 40 s."""
    admin = AdminClient({"bootstrap.servers": healthy.bootstrap})
    # One leader for the three partitions: its answers could carry all of them.
    create(admin, topic, {}, [[1, 2, 3]] * 3)
    producer = Producer({"bootstrap.servers": healthy.bootstrap, "acks": "all"})
    for p in range(3):
        for i in range(10):
            producer.produce(
                topic, value=b"%04d" % i + os.urandom(LIBRDKAFKA_0082_RECORD), partition=p
            )
    assert producer.flush(60) == 0
    started = time.monotonic()
    got = confluent_consume(
        healthy.bootstrap, topic, (0, 1, 2), expected=30, timeout=40, **LIBRDKAFKA_0082_CONSUMER
    )
    assert sorted((g.partition, g.offset) for g in got) == [
        (p, o) for p in range(3) for o in range(10)
    ]
    assert all(int((g.value or b"")[:4]) == g.offset for g in got)
    print(f"0082 classic: 30 records of 900 KiB in {time.monotonic() - started:.1f} s")


def test_log_dirs_report_each_replica_of_a_classic_topic(healthy: LocalCluster, topic: str) -> None:
    """kafka-log-dirs.sh --describe (kafka-python's describe_log_dirs, every broker): each
    replica's local log with its size; diskless topics have no local log to list."""
    admin = AdminClient({"bootstrap.servers": healthy.bootstrap})
    create(admin, topic, {}, [[1, 2, 3]])
    diskless = topic + "-diskless"
    admin.create_topics([NewTopic(diskless, 1, 1)])[diskless].result(20)
    producer = Producer({"bootstrap.servers": healthy.bootstrap, "acks": "all"})
    for _ in range(50):
        producer.produce(topic, value=b"x" * 1000)
        producer.produce(diskless, value=b"x" * 1000)
    assert producer.flush(20) == 0
    client = KafkaAdminClient(bootstrap_servers=healthy.bootstrap)
    try:
        sizes: dict[int, int] = {}

        def replicas_caught_up() -> bool:
            sizes.clear()
            for broker in client.describe_log_dirs():
                for log_dir in broker["log_dirs"]:
                    assert log_dir["error_code"] == 0 and log_dir["total_bytes"] > 0
                    names = [t["name"] for t in log_dir["topics"]]
                    assert diskless not in names
                    for t in log_dir["topics"]:
                        if t["name"] == topic:
                            sizes[broker["broker"]] = t["partitions"][0]["partition_size"]
            return len(sizes) == 3 and len(set(sizes.values())) == 1

        wait_until(replicas_caught_up, "three replicas of one size", 20)
        assert sizes[1] > 50 * 1000  # the records and their batch headers
    finally:
        client.close()


def test_leader_killed_repeatedly_loses_and_duplicates_nothing(
    healthy: LocalCluster, topic: str
) -> None:
    admin = AdminClient({"bootstrap.servers": healthy.bootstrap})
    create(admin, topic, {"min.insync.replicas": "2"})

    kills: list[int] = []  # the high watermark when each kill happened

    def high_watermark() -> int:
        # A fresh client each time: librdkafka answers "Unknown partition" from its cache,
        # without asking again, once a Metadata answer has left out the broker its cached
        # leader is on (a restarting broker is fenced, and Kafka lists only unfenced ones).
        # Right after a kill the metadata may also still name the old leader: retried.
        watcher = Consumer({"bootstrap.servers": healthy.bootstrap, "group.id": "watch"})
        try:
            for _attempt in range(50):
                try:
                    return int(watcher.get_watermark_offsets(TopicPartition(topic, 0), 5)[1])
                except KafkaException:
                    time.sleep(0.2)
        finally:
            watcher.close()
        raise AssertionError("no high watermark")

    def kill_leaders() -> None:
        for _round in range(3):
            leader = describe(admin, topic)[0][0]
            kills.append(high_watermark())
            broker = healthy.broker(leader)
            broker.stop(signal.SIGKILL)
            wait_until(
                lambda leader=leader: describe(admin, topic)[0][0] not in (leader, -1),
                "a new leader",
                15,
            )
            time.sleep(0.3)
            broker.start()
            wait_until(
                lambda: len(describe(admin, topic)[0][2]) == 3, "the restarted replica in sync", 20
            )

    # ~15 s of paced records, and more until the third kill is over (on a loaded machine the
    # kills take longer than the 15 s): all three land mid-stream.
    stream = stream_through(
        healthy.bootstrap, topic, 24_000, kill_leaders, after_fraction=0.05, until_disrupted=True
    )
    total = stream.total
    assert len(kills) == 3 and kills[-1] < total, f"kills at offsets {kills} of {total}"
    got = confluent_consume(healthy.bootstrap, topic, expected=total)
    assert_exactly_once(stream, got, 1)


def test_an_acks_all_retry_is_not_acknowledged_before_its_replication(
    healthy: LocalCluster, topic: str
) -> None:
    """The lost-ack audit. Both followers are paused (still in the ISR: the lag limit has
    not passed), one record is produced by an idempotent producer whose requests time out
    quickly, and librdkafka retries the same batch. The leader must not answer the retry
    before the high watermark passes the batch. The leader is then killed and the followers
    resumed: whatever the producer was told was acknowledged must be in the new leader's
    log. (The previous code answered the retry at once, and the record was lost.)"""
    boot = healthy.broker(1).bootstrap
    admin = AdminClient({"bootstrap.servers": boot})
    create(admin, topic, {"min.insync.replicas": "2"}, [[1, 2, 3]])
    delivered: list[KafkaError | None] = []
    producer = Producer(
        {
            "bootstrap.servers": boot,
            "enable.idempotence": True,
            "request.timeout.ms": 400,
            "message.timeout.ms": 60_000,
            "retry.backoff.ms": 50,
        }
    )
    for i in range(5):  # replicated everywhere; the producer has its id and connection
        producer.produce(topic, value=b"%d" % i)
    assert producer.flush(20) == 0
    for follower in (2, 3):
        os.kill(_pid(healthy, follower), signal.SIGSTOP)
    leader = healthy.broker(1)
    try:
        time.sleep(0.3)  # the followers' fetches in flight are answered to nobody
        producer.produce(topic, value=b"5", on_delivery=lambda err, _m: delivered.append(err))
        # Several request timeouts and retries, well within the 2 s lag limit.
        deadline = time.monotonic() + 1.4
        while not delivered and time.monotonic() < deadline:
            producer.poll(0.05)
        acked_before_kill = delivered == [None]
        leader.stop(signal.SIGKILL)
    finally:
        for follower in (2, 3):
            os.kill(_pid(healthy, follower), signal.SIGCONT)
    assert not acked_before_kill, "acknowledged while only the leader held the record"
    wait_until(lambda: describe(admin_of(healthy, 2), topic)[0][0] in (2, 3), "a new leader", 20)
    # The producer goes on retrying at the new leader, which appends the record itself.
    assert producer.flush(30) == 0 and delivered == [None], delivered
    leader.start()
    wait_until(lambda: describe(admin_of(healthy, 2), topic)[0][2] == [1, 2, 3], "a full ISR", 30)
    got = confluent_consume(healthy.broker(2).bootstrap, topic, expected=6)
    assert sorted(int(g.value or b"-1") for g in got) == list(range(6))


def admin_of(cluster: LocalCluster, node: int) -> AdminClient:
    return AdminClient({"bootstrap.servers": cluster.broker(node).bootstrap})
