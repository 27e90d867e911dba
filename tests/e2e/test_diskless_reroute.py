"""Routing around a dead or stuck broker is immediate for diskless topics (seed 001), at the
default liveness settings (broker.session.timeout.ms 9000): the other brokers suspect it from
their own probes within diskless.peer.suspect.ms (1 s) and route its AZ's clients elsewhere,
long before the controller fences it. A paused broker is routed around the same way but is
not fenced, and gets its clients back once it answers again.

The figures measured: for a killed broker, what a producer writing to it sees (stock
librdkafka, default settings, acks=all): the time from the kill to the acknowledgement of
its first record sent after it; for a paused one, the time until Metadata routes its AZ's
clients elsewhere."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.cluster import BrokerProcess, LocalCluster
from tests.fixtures.cluster import running_cluster

from ._kafka import wait_until

pytestmark = pytest.mark.e2e

RACKS = ("az-a", "az-b", "az-c")
# Seed 001: under 2 s at default settings; the test allows for a loaded CI machine.
REROUTE_LIMIT_S = 3.0


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory,
        "reroute",
        brokers=3,
        racks=RACKS,
        broker_options={"produce.commit.interval.ms": "20"},
        controllers=1,
    ) as local:
        admin = AdminClient({"bootstrap.servers": local.bootstrap})
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, "three brokers", 60)
        yield local


class Acks:
    """A producer in ``az`` sending a record every 10 ms; the times of its acknowledgements."""

    def __init__(self, bootstrap: str, topic: str, az: str) -> None:
        self.times: list[float] = []
        self.acked: list[tuple[float, float]] = []  # (sent, acknowledged)
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._producer = Producer(
            {
                "bootstrap.servers": bootstrap,
                "client.id": f"reroute,diskless_az={az}",
                "acks": "all",
                "linger.ms": 0,
            }
        )
        self._topic = topic
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        n = 0
        while not self._stop.is_set():
            sent = time.monotonic()

            def done(err: object, _msg: object, sent: float = sent) -> None:
                if err is None:
                    self.times.append(time.monotonic())
                    self.acked.append((sent, time.monotonic()))
                else:
                    self.errors.append(str(err))

            self._producer.produce(self._topic, b"%d" % n, partition=0, on_delivery=done)
            n += 1
            self._producer.poll(0.01)

    def first_after(self, moment: float, timeout: float = 20.0) -> float:
        """Seconds from ``moment`` to the acknowledgement of the first record sent after it
        that was acknowledged (records in flight before it do not count)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            later = [acked for sent, acked in list(self.acked) if sent > moment]
            if later:
                return min(later) - moment
            time.sleep(0.05)
        raise AssertionError(f"no acknowledgement within {timeout} s of the fault")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
        self._producer.flush(30)


def _in_rack(cluster: LocalCluster, rack: str) -> BrokerProcess:
    return next(b for b in cluster.brokers if b.rack == rack)


def _seen_by(broker: BrokerProcess, az: str, topic: str) -> tuple[int, list[int]]:
    """(leader for ``az``'s clients, live brokers) in ``broker``'s answer: a new client
    asks its bootstrap broker first, never the paused one."""
    admin = AdminClient({"bootstrap.servers": broker.bootstrap, "client.id": f"w,diskless_az={az}"})
    md = admin.list_topics(topic, timeout=10)
    return md.topics[topic].partitions[0].leader, sorted(md.brokers)


def _routed_to(cluster: LocalCluster, victim: BrokerProcess, topic: str) -> None:
    """Wait until every broker sends az-b's clients to ``victim`` (no peer suspected while
    all answer their probes), so that a producer started now writes to it."""
    wait_until(
        lambda: all(_seen_by(b, "az-b", topic)[0] == victim.node_id for b in cluster.brokers),
        "az-b's clients routed to their broker by every broker",
        20,
    )


def test_a_killed_broker_is_routed_around_within_two_seconds(
    cluster: LocalCluster, topic: str
) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(20)
    victim = _in_rack(cluster, "az-b")
    _routed_to(cluster, victim, topic)
    acks = Acks(cluster.bootstrap, topic, "az-b")
    try:
        wait_until(lambda: len(acks.times) > 50, "records acknowledged", 30)
        killed = time.monotonic()
        victim.kill()
        waited = acks.first_after(killed)
        print(f"killed broker {victim.node_id}: first acknowledgement after {waited:.2f} s")
        assert waited < REROUTE_LIMIT_S, f"unavailable for {waited:.2f} s after the kill"
    finally:
        acks.close()
        victim.start()
    wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, "the broker back", 60)


def test_a_paused_broker_is_routed_around_but_not_fenced(cluster: LocalCluster, topic: str) -> None:
    """A paused (SIGSTOPped) broker keeps its TCP connections: a client already writing to
    it waits for its own request timeout, as with Kafka. What the brokers do is route every
    client that asks for metadata elsewhere within the suspect time, without fencing it."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    admin.create_topics([NewTopic(topic, num_partitions=1)])[topic].result(20)
    victim = _in_rack(cluster, "az-b")
    witness = _in_rack(cluster, "az-a")
    _routed_to(cluster, victim, topic)
    assert victim.pid is not None
    paused = time.monotonic()
    os.kill(victim.pid, signal.SIGSTOP)
    try:
        wait_until(
            lambda: _seen_by(witness, "az-b", topic)[0] != victim.node_id,
            "az-b's clients routed around the paused broker",
            10,
        )
        waited = time.monotonic() - paused
        print(f"paused broker {victim.node_id}: routed around after {waited:.2f} s")
        assert waited < REROUTE_LIMIT_S, f"routed to the paused broker for {waited:.2f} s"
        # Routed around, yet still registered: a pause shorter than the session is not a
        # fence (the controller still lists it as a live broker).
        time.sleep(max(0.0, 4.0 - (time.monotonic() - paused)))
        assert victim.node_id in _seen_by(witness, "az-b", topic)[1]
    finally:
        os.kill(victim.pid, signal.SIGCONT)
    # Back: the AZ's clients are sent to it again once it answers.
    _routed_to(cluster, victim, topic)
