"""Transactions on classic topics (three brokers, RF=3): a confluent-kafka transactional
producer commits and aborts; read_committed consumers (on the leader and on a follower, which
rebuilt the same state from the replicated markers) see only committed records and stop at
the last stable offset while a transaction is open; a transaction spanning a classic and a
diskless topic commits on both; markers a killed coordinator did not deliver are sent by the
next one."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.groups.placement import coordinator_for
from sluice.cluster import LocalCluster

from ._kafka import confluent_consume, unique_topic
from ._secure import classic_cluster, create_classic_rf3

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with classic_cluster(tmp_path_factory, "classic-txn") as c:
        yield c


def create_classic(cluster: LocalCluster) -> tuple[str, int, list[int]]:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    return create_classic_rf3(admin, "classic-txn", {"min.insync.replicas": "2"})


def txn_producer(cluster: LocalCluster) -> Producer:
    producer = Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": f"txn-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
        }
    )
    producer.init_transactions(30)
    return producer


def values(got: list) -> list[bytes]:  # type: ignore[type-arg]
    return [g.value for g in got]


def test_commit_and_abort_on_a_classic_topic(cluster: LocalCluster) -> None:
    topic, leader, replicas = create_classic(cluster)
    producer = txn_producer(cluster)
    for round_, commit in ((0, True), (1, False), (2, True)):
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, value=b"%d-%d" % (round_, i))
        # Written before the abort (librdkafka drops what it has not sent yet).
        assert producer.flush(20) == 0
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    expected = [b"%d-%d" % (r, i) for r in (0, 2) for i in range(10)]
    committed = confluent_consume(
        cluster.bootstrap, topic, expected=20, **{"isolation.level": "read_committed"}
    )
    assert values(committed) == expected
    everything = confluent_consume(
        cluster.bootstrap, topic, expected=30, **{"isolation.level": "read_uncommitted"}
    )
    assert len(everything) == 30
    # A follower replicated the markers and serves the same view (KIP-392, client.rack).
    rack_of = {b.node_id: b.rack for b in cluster.brokers}
    follower = next(r for r in replicas if r != leader)
    on_follower = confluent_consume(
        cluster.bootstrap,
        topic,
        expected=20,
        **{"isolation.level": "read_committed", "client.rack": rack_of[follower]},
    )
    assert values(on_follower) == expected
    producer.flush(10)


def test_read_committed_stops_at_the_open_transaction(cluster: LocalCluster) -> None:
    topic, _, _ = create_classic(cluster)
    plain = Producer({"bootstrap.servers": cluster.bootstrap, "acks": "all"})
    for i in range(5):
        plain.produce(topic, value=b"before-%d" % i)
    assert plain.flush(20) == 0
    producer = txn_producer(cluster)
    producer.begin_transaction()
    for i in range(5):
        producer.produce(topic, value=b"open-%d" % i)
    assert producer.flush(20) == 0
    for i in range(3):
        plain.produce(topic, value=b"after-%d" % i)
    assert plain.flush(20) == 0
    consumer = Consumer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "group.id": f"g-{uuid.uuid4().hex[:8]}",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    try:
        tp = TopicPartition(topic, 0)
        # ListOffsets with read_committed: the last stable offset, where the open one began.
        _, lso = consumer.get_watermark_offsets(tp, timeout=10, cached=False)
        assert lso == 5
        consumer.assign([TopicPartition(topic, 0, 0)])
        seen: list[bytes] = []
        deadline_polls = 20
        while deadline_polls and len(seen) < 5:
            m = consumer.poll(0.5)
            deadline_polls -= 1
            if m is not None and m.error() is None:
                seen.append(m.value())
        assert seen == [b"before-%d" % i for i in range(5)]
        assert consumer.poll(1.0) is None  # nothing past the LSO
        producer.commit_transaction(30)
        more: list[bytes] = []
        polls = 30
        while polls and len(more) < 8:
            m = consumer.poll(0.5)
            polls -= 1
            if m is not None and m.error() is None:
                more.append(m.value())
        assert more == [b"open-%d" % i for i in range(5)] + [b"after-%d" % i for i in range(3)]
    finally:
        consumer.close()


def test_a_transaction_spanning_classic_and_diskless_topics(cluster: LocalCluster) -> None:
    classic, _, _ = create_classic(cluster)
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    diskless = unique_topic("diskless-txn")
    admin.create_topics([NewTopic(diskless, 1, 1)])[diskless].result(20)
    producer = txn_producer(cluster)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(classic, value=b"aborted-%d" % i)
        producer.produce(diskless, value=b"aborted-%d" % i)
    assert producer.flush(20) == 0
    producer.abort_transaction(30)
    producer.begin_transaction()
    for i in range(4):
        producer.produce(classic, value=b"c-%d" % i)
        producer.produce(diskless, value=b"d-%d" % i)
    producer.commit_transaction(30)
    committed = {"isolation.level": "read_committed"}
    got_classic = confluent_consume(cluster.bootstrap, classic, expected=4, **committed)
    got_diskless = confluent_consume(cluster.bootstrap, diskless, expected=4, **committed)
    assert values(got_classic) == [b"c-%d" % i for i in range(4)]
    assert values(got_diskless) == [b"d-%d" % i for i in range(4)]


def test_markers_a_killed_coordinator_did_not_deliver_are_sent_by_the_next(
    cluster: LocalCluster,
) -> None:
    """The coordinator records the commit, then dies before the classic leader has the
    marker: the broker that takes the transactional id over sends it (the pending markers
    are in the database), so the LSO reaches the high watermark with no producer activity.
    Last in the module: it kills brokers (and restarts them)."""
    topic, leader, _ = create_classic(cluster)
    # A transactional id coordinated by another broker than the partition's leader.
    txn_id = next(
        t
        for t in (f"txn-{uuid.uuid4().hex[:8]}" for _ in range(1000))
        if (c := coordinator_for(t, cluster.brokers)) is not None and c.node_id != leader
    )
    chosen = coordinator_for(txn_id, cluster.brokers)
    assert chosen is not None
    coordinator, leader_process = cluster.broker(chosen.node_id), cluster.broker(leader)
    producer = Producer(
        {"bootstrap.servers": cluster.bootstrap, "transactional.id": txn_id, "linger.ms": 5}
    )
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(10):
        producer.produce(topic, value=b"v-%d" % i)
    assert producer.flush(20) == 0
    # The leader is frozen, so the coordinator's WriteTxnMarkers cannot be answered (it sits
    # in the leader's socket buffer); both then die, so that request is lost with them. The
    # stop is shorter than the session timeout: the leadership does not move meanwhile and
    # the coordinator keeps sending to the frozen leader.
    frozen = leader_process.pid
    os.kill(frozen, signal.SIGSTOP)
    errors: list[BaseException] = []

    def commit() -> None:
        try:
            producer.commit_transaction(60)
        except BaseException as exc:
            errors.append(exc)

    committer = threading.Thread(target=commit, daemon=True)
    try:
        committer.start()
        time.sleep(1.0)  # EndTxn reached the coordinator: outcome stored, marker in flight
        coordinator.kill()
        leader_process.kill()  # SIGKILL ends a stopped process too
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(frozen, signal.SIGCONT)
    try:
        # Restarted (min.insync.replicas=2 needs them back); the id's coordinator moves to a
        # survivor meanwhile and may move back: either must send the lost marker.
        coordinator.start()
        leader_process.start()
        committer.join(90)
        assert not committer.is_alive() and not errors, errors
        committed = confluent_consume(
            cluster.bootstrap,
            topic,
            expected=10,
            timeout=60,
            **{"isolation.level": "read_committed"},
        )
        assert values(committed) == [b"v-%d" % i for i in range(10)]
        ends = {}
        for isolation in ("read_committed", "read_uncommitted"):
            consumer = Consumer(
                {
                    "bootstrap.servers": cluster.bootstrap,
                    "group.id": f"g-{uuid.uuid4().hex[:8]}",
                    "isolation.level": isolation,
                }
            )
            try:
                _, ends[isolation] = consumer.get_watermark_offsets(
                    TopicPartition(topic, 0), timeout=10, cached=False
                )
            finally:
                consumer.close()
        # Nothing is left open: the LSO is the high watermark. Ten records and at least one
        # marker; a second identical COMMIT marker is allowed, as in Kafka: the old and the
        # new coordinator may both deliver it around the failover, and consumers skip it.
        assert ends["read_committed"] == ends["read_uncommitted"] >= 11, ends
    finally:
        for b in (coordinator, leader_process):
            if not b.alive():
                b.start()


def test_a_pipelining_transactional_producer_keeps_its_sequence_order(
    cluster: LocalCluster,
) -> None:
    """The audit's workload, no fault: ~300 records/s round-robin over three RF=3 classic
    partitions, linger 5 ms, a commit every 50 records. Each transaction's first batch per
    partition is verified with the coordinator (KIP-890) while the producer's next requests
    are already in flight; they must not be appended ahead of it (before the fix ~3 % of
    transactions died on OUT_OF_ORDER_SEQUENCE_NUMBER)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    topic = unique_topic("classic-txn-order")
    admin.create_topics(
        [NewTopic(topic, 3, 3, config={"diskless.enable": "false", "min.insync.replicas": "2"})]
    )[topic].result(20)
    producer = txn_producer(cluster)
    sent = 0
    transactions = 0
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        producer.begin_transaction()
        for _ in range(50):
            producer.produce(topic, value=b"%d" % sent, partition=sent % 3)
            producer.poll(0)
            sent += 1
            time.sleep(1 / 300)
        producer.commit_transaction(30)  # raises KafkaException on a fatal error
        transactions += 1
    assert transactions >= 20
    got = confluent_consume(
        cluster.bootstrap,
        topic,
        partitions=(0, 1, 2),
        expected=sent,
        **{"isolation.level": "read_committed"},
    )
    assert sorted(int(g.value) for g in got) == list(range(sent))
