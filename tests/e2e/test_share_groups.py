"""Share groups (KIP-932) with confluent-kafka's ShareConsumer, on a diskless and on a
classic topic: consumers sharing one partition get each record once when they accept
them all, a released record comes back, and the records a SIGKILLed consumer held come
back to another once their acquisition lock (here 3 s) runs out."""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import AcknowledgeType as Ack
from confluent_kafka import KafkaError, KafkaException, Producer, ShareConsumer
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
    ResourceType,
)

from sluice.launch.kafka import ensure_jars, java_command
from tests.differential.wire import Connection, request_for

from ._kafka import unique_topic
from .conftest import SluiceBroker

pytestmark = pytest.mark.e2e

LOCK_MS = 3000
KINDS = ["diskless", "classic"]


@pytest.fixture(scope="module")
def share_broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SluiceBroker]:
    b = SluiceBroker(
        tmp_path_factory.mktemp("share"),
        options={
            "group.share.record.lock.duration.ms": str(LOCK_MS),
            "group.share.heartbeat.interval.ms": "1000",
        },
    )
    try:
        b.start()
        yield b
    finally:
        with contextlib.suppress(Exception):
            b.stop()


def bootstrap(broker: SluiceBroker) -> str:
    return f"127.0.0.1:{broker.port}"


def create(broker: SluiceBroker, kind: str, hint: str) -> str:
    topic = unique_topic(f"share-{kind}-{hint}")
    config = {"diskless.enable": "false"} if kind == "classic" else {}
    admin = AdminClient({"bootstrap.servers": bootstrap(broker)})
    end = time.monotonic() + 30
    while True:
        try:
            admin.create_topics([NewTopic(topic, 1, 1, config=config)])[topic].result(30)
            return topic
        except KafkaException as exc:
            # A broker just started listens before the controller unfenced it (the same
            # on main): classic placement refuses until then.
            if exc.args[0].code() != KafkaError.INVALID_REPLICATION_FACTOR:
                raise
            if time.monotonic() > end:
                raise
            time.sleep(0.2)


def consumer(broker: SluiceBroker, group: str, topic: str, **extra: str) -> ShareConsumer:
    c = ShareConsumer(
        {
            "bootstrap.servers": bootstrap(broker),
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
            **extra,
        }
    )
    c.subscribe([topic])
    return c


def produce(broker: SluiceBroker, topic: str, values: list[bytes]) -> None:
    p = Producer({"bootstrap.servers": bootstrap(broker), "linger.ms": 0})
    for i, v in enumerate(values):
        p.produce(topic, value=v)
        if i % 5 == 4:
            p.flush(10)  # small batches: the consumers can take turns
    assert p.flush(30) == 0


def joined(
    broker: SluiceBroker, group: str, topic: str, consumers: list[ShareConsumer], members: int = 0
) -> None:
    """Poll until every member has been answered its partitions and the topic's
    share-partition has started (share.auto.offset.reset is latest, so records produced
    before that are not delivered). As from Kafka, a new share group's members are given
    their partitions one heartbeat after they join (the fixture's heartbeat interval: 1 s).
    ``members``: how many (default: the consumers polled here)."""
    members = members or len(consumers)
    end = time.monotonic() + 30
    while not _started(broker, group, topic, members):
        assert time.monotonic() < end, f"share group {group} never started {topic}"
        for c in consumers:
            assert not list(c.poll(0.2))
        if not consumers:
            time.sleep(0.2)


def _started(broker: SluiceBroker, group: str, topic: str, members: int) -> bool:
    """ShareGroupDescribe: ``members`` members, each answered a non-empty assignment; and
    DescribeShareGroupOffsets: the share-partition has a start offset (its first ShareFetch)."""
    conn = Connection("127.0.0.1", broker.port)
    try:
        described = conn.send(request_for("share_group_describe", 1, {"group_ids": [group]}))
        offsets = conn.send(
            request_for(
                "describe_share_group_offsets",
                0,
                {
                    "groups": [
                        {"group_id": group, "topics": [{"topic_name": topic, "partitions": [0]}]}
                    ]
                },
            )
        )
    finally:
        conn.close()
    [g] = described.groups
    if g.error_code or len(g.members) != members:
        return False
    if any(
        m.member_epoch != g.assignment_epoch or not m.assignment.topic_partitions for m in g.members
    ):
        return False
    starts = [p.start_offset for t in offsets.groups[0].topics for p in t.partitions]
    return bool(starts) and all(o >= 0 for o in starts)


def accept_all(
    c: ShareConsumer, timeout: float, retriable_ok: bool = False
) -> list[tuple[int, bytes, int]]:
    """One poll; every record accepted and committed: (offset, value, delivery count).
    ``retriable_ok``: a retriable error event (a restarted broker's partitions not served
    yet) is passed over; any other error fails."""
    got = []
    for m in c.poll(timeout):
        if m.error() is not None and retriable_ok and m.error().retriable():
            continue
        assert m.error() is None, m.error()
        got.append((m.offset(), m.value(), m.delivery_count()))
        c.acknowledge(m, Ack.ACCEPT)
    if got:
        c.commit_sync(30)
    return got


@pytest.mark.parametrize("kind", KINDS)
def test_two_consumers_share_a_partition(share_broker: SluiceBroker, kind: str) -> None:
    topic = create(share_broker, kind, "two")
    group = unique_topic("sg")
    a = consumer(share_broker, group, topic, **{"max.poll.records": "5"})
    b = consumer(share_broker, group, topic, **{"max.poll.records": "5"})
    try:
        joined(share_broker, group, topic, [a, b])
        values = [b"r%03d" % i for i in range(100)]
        produce(share_broker, topic, values)
        seen: dict[str, list[bytes]] = {"a": [], "b": []}
        end = time.monotonic() + 60
        while len(seen["a"]) + len(seen["b"]) < len(values) and time.monotonic() < end:
            for name, c in (("a", a), ("b", b)):
                seen[name] += [v for _, v, _ in accept_all(c, 0.3)]
        for name, c in (("a", a), ("b", b)):  # nothing more comes: everything was accepted
            seen[name] += [v for _, v, _ in accept_all(c, 1.0)]
        everything = seen["a"] + seen["b"]
        assert sorted(everything) == values  # each record delivered exactly once
        assert seen["a"] and seen["b"], "both members of the share group got records"
    finally:
        a.close()
        b.close()


@pytest.mark.parametrize("kind", KINDS)
def test_a_released_record_is_delivered_again(share_broker: SluiceBroker, kind: str) -> None:
    topic = create(share_broker, kind, "release")
    group = unique_topic("sg")
    c = consumer(share_broker, group, topic)
    try:
        joined(share_broker, group, topic, [c])
        produce(share_broker, topic, [b"first", b"second"])
        first: list[tuple[int, bytes, int]] = []
        end = time.monotonic() + 30
        while len(first) < 2 and time.monotonic() < end:
            for m in c.poll(0.5):
                assert m.error() is None
                first.append((m.offset(), m.value(), m.delivery_count()))
                # Give "first" back, keep "second".
                c.acknowledge(m, Ack.RELEASE if m.value() == b"first" else Ack.ACCEPT)
            c.commit_sync(30)
        assert [(v, n) for _, v, n in first] == [(b"first", 1), (b"second", 1)]
        again: list[tuple[int, bytes, int]] = []
        end = time.monotonic() + 30
        while not again and time.monotonic() < end:
            again = accept_all(c, 0.5)
        assert again == [(first[0][0], b"first", 2)]  # its second delivery
        assert accept_all(c, 1.0) == []  # accepted: never delivered again
    finally:
        c.close()


_KILLED = """
import sys, time
from confluent_kafka import ShareConsumer
c = ShareConsumer({"bootstrap.servers": sys.argv[1], "group.id": sys.argv[2],
                   "share.acknowledgement.mode": "explicit"})
c.subscribe([sys.argv[3]])
print("ready", flush=True)
while True:
    got = [m for m in c.poll(0.5) if m.error() is None]
    if got:
        print(" ".join(str(m.offset()) for m in got), flush=True)
        time.sleep(600)  # holds its records, never acknowledges: killed here
"""


def line(proc: subprocess.Popen[str], timeout: float = 30.0) -> str:
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, "the consumer subprocess said nothing"
    return proc.stdout.readline().strip()


@pytest.mark.parametrize("kind", KINDS)
def test_records_of_a_killed_consumer_come_back_after_the_lock(
    share_broker: SluiceBroker, kind: str, tmp_path: Path
) -> None:
    topic = create(share_broker, kind, "kill")
    group = unique_topic("sg")
    script = tmp_path / "killed.py"
    script.write_text(_KILLED)
    victim = subprocess.Popen(
        [sys.executable, str(script), bootstrap(share_broker), group, topic],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    survivor = None
    try:
        assert line(victim) == "ready"
        joined(share_broker, group, topic, [], members=1)
        produce(share_broker, topic, [b"k%02d" % i for i in range(10)])
        held = [int(o) for o in line(victim).split()]
        assert held, "the victim got records"
        os.kill(victim.pid, signal.SIGKILL)
        killed_at = time.monotonic()
        victim.wait(10)
        survivor = consumer(share_broker, group, topic)
        got: dict[int, int] = {}
        redelivered_at = None
        end = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < end:
            for offset, _value, count in accept_all(survivor, 0.5):
                got[offset] = count
                if offset in held and redelivered_at is None:
                    redelivered_at = time.monotonic()
        assert sorted(got) == list(range(10))
        # What the victim held came back with a second delivery, once its lock ran out.
        assert all(got[o] == 2 for o in held)
        assert redelivered_at is not None
        assert redelivered_at - killed_at > 0.5 * LOCK_MS / 1000 - 1.0
    finally:
        with contextlib.suppress(Exception):
            victim.kill()
        if survivor is not None:
            survivor.close()


def java_tool(main: str, *args: str, timeout: float = 120) -> list[str]:
    """Run one of Kafka 4.4's tools (kafka-share-groups.sh, kafka-console-share-consumer.sh
    are these classes); its output lines without the client's config dump."""
    done = subprocess.run(
        java_command(main, *args), capture_output=True, text=True, timeout=timeout, check=False
    )
    assert done.returncode == 0, f"{main} {args} exited {done.returncode}:\n{done.stderr[-3000:]}"
    return [ln for ln in done.stdout.splitlines() if ln.strip() and not ln.startswith("\t")]


SHARE_GROUPS = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
CONSOLE_SHARE_CONSUMER = "org.apache.kafka.tools.consumer.ConsoleShareConsumer"
CONFIG_COMMAND = "org.apache.kafka.tools.ConfigCommand"


@pytest.mark.parametrize("kind", KINDS)
def test_kafka_share_groups_tool_and_the_java_share_consumer(
    share_broker: SluiceBroker, kind: str
) -> None:
    ensure_jars()
    topic = create(share_broker, kind, "tool")
    group = unique_topic("sg-java")
    boot = ["--bootstrap-server", bootstrap(share_broker)]

    def tool(*args: str) -> list[str]:
        return java_tool(SHARE_GROUPS, *boot, *args)

    produce(share_broker, topic, [b"j%d" % i for i in range(10)])
    # A new group would start at the log end (share.auto.offset.reset latest): start it at
    # the beginning instead, as kafka-share-groups.sh does.
    reset = tool("--reset-offsets", "--to-earliest", "--group", group, "--topic", topic,
                 "--execute")  # fmt: skip
    assert reset[-1].split() == [group, topic, "0", "0"]
    assert group in tool("--list")
    consumed = java_tool(
        CONSOLE_SHARE_CONSUMER, *boot, "--topic", topic, "--group", group,
        "--max-messages", "10", "--timeout-ms", "30000",
    )  # fmt: skip
    assert sorted(ln for ln in consumed if ln.startswith("j")) == [f"j{i}" for i in range(10)]
    # Everything accepted: the start offset is past the last record, nothing lags.
    assert tool("--describe", "--group", group)[-1].split() == [group, topic, "0", "10", "0"]
    assert tool("--describe", "--group", group, "--state")[-1].split()[-2:] == ["Empty", "0"]
    deleted = tool("--delete-offsets", "--group", group, "--topic", topic)
    assert deleted[-1].split() == [topic, "Successful"]
    tool("--reset-offsets", "--to-latest", "--group", group, "--topic", topic, "--execute")
    # kafka-configs.sh --entity-type groups: the group's own settings.
    config = [*boot, "--entity-type", "groups", "--entity-name", group]
    java_tool(CONFIG_COMMAND, *config, "--alter", "--add-config", "share.delivery.count.limit=3")
    described = java_tool(CONFIG_COMMAND, *config, "--describe")
    assert any(ln.strip().startswith("share.delivery.count.limit=3 ") for ln in described)
    removed = tool("--delete", "--group", group)
    assert any("successful" in ln for ln in removed), removed
    assert group not in tool("--list")
    # Deleting the topic deletes its share-partitions: the group has nothing left.
    tool("--reset-offsets", "--to-latest", "--group", group, "--topic", topic, "--execute")
    assert group in tool("--list")
    admin = AdminClient({"bootstrap.servers": bootstrap(share_broker)})
    admin.delete_topics([topic])[topic].result(30)
    assert group not in tool("--list")


def set_group_configs(broker: SluiceBroker, group: str, configs: dict[str, str]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap(broker)})
    ops = [
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in configs.items()
    ]
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=ops)
    admin.incremental_alter_configs([resource])[resource].result(30)
    [described] = admin.describe_configs([ConfigResource(ResourceType.GROUP, group)]).values()
    shown = described.result(30)
    assert {k: shown[k].value for k in configs} == configs


@pytest.mark.parametrize("kind", KINDS)
def test_earliest_and_read_committed_group_configs(share_broker: SluiceBroker, kind: str) -> None:
    topic = create(share_broker, kind, "txn")
    group = unique_topic("sg")
    set_group_configs(
        share_broker,
        group,
        {"share.auto.offset.reset": "earliest", "share.isolation.level": "read_committed"},
    )
    producer = Producer(
        {"bootstrap.servers": bootstrap(share_broker), "transactional.id": unique_topic("tx")}
    )
    producer.init_transactions(30)
    for prefix, commit in (("c", True), ("a", False), ("d", True)):
        producer.begin_transaction()
        for i in range(5):
            producer.produce(topic, value=f"{prefix}{i}".encode())
        assert producer.flush(30) == 0  # in the log before the abort
        if commit:
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    # Produced before the group existed: earliest delivers it; read_committed leaves out
    # the aborted transaction (and the markers).
    c = consumer(share_broker, group, topic)
    try:
        got: list[bytes] = []
        end = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < end:
            got += [v for _, v, _ in accept_all(c, 0.5)]
        got += [v for _, v, _ in accept_all(c, 1.0)]
        assert sorted(got) == sorted(f"{p}{i}".encode() for p in "cd" for i in range(5))
    finally:
        c.close()


@pytest.mark.parametrize("kind", KINDS)
def test_share_state_survives_a_broker_restart(tmp_path: Path, kind: str) -> None:
    """The share-partition state and the group's configs are in the coordinator database:
    after a restart the group goes on where it was (accepted records stay done)."""
    broker = SluiceBroker(tmp_path / "sluice")
    broker.start()
    try:
        topic = create(broker, kind, "restart")
        group = unique_topic("sg")
        set_group_configs(broker, group, {"share.auto.offset.reset": "earliest"})
        produce(broker, topic, [b"s%02d" % i for i in range(20)])
        first = consumer(broker, group, topic, **{"max.poll.records": "5"})
        accepted: list[bytes] = []
        end = time.monotonic() + 30
        while not accepted and time.monotonic() < end:
            accepted = [v for _, v, _ in accept_all(first, 0.5)]
        first.close()  # what it had acquired and not accepted goes back
        assert 0 < len(accepted) < 20
        broker.stop()
        broker.start()
        second = consumer(broker, group, topic)
        try:
            rest: list[bytes] = []
            end = time.monotonic() + 30
            while len(rest) < 20 - len(accepted) and time.monotonic() < end:
                rest += [v for _, v, _ in accept_all(second, 0.5, retriable_ok=True)]
            rest += [v for _, v, _ in accept_all(second, 1.0, retriable_ok=True)]
            assert sorted(accepted + rest) == [b"s%02d" % i for i in range(20)]
        finally:
            second.close()
    finally:
        broker.stop()


@pytest.mark.parametrize("kind", KINDS)
def test_fetch_max_bytes_zero_acquires_nothing(share_broker: SluiceBroker, kind: str) -> None:
    """A ShareFetch with MaxBytes 0 (fetch.max.bytes=0) is answered with no records, as
    Kafka answers it (librdkafka's 0180 test), and acquires none: another member of the
    group then gets every record at its first delivery."""
    topic = create(share_broker, kind, "maxbytes0")
    group = unique_topic("sg")
    set_group_configs(share_broker, group, {"share.auto.offset.reset": "earliest"})
    produce(share_broker, topic, [f"m{i}".encode() for i in range(10)])
    c = consumer(share_broker, group, topic, **{"fetch.max.bytes": "0"})
    try:
        end = time.monotonic() + 6
        while time.monotonic() < end:
            assert [m.offset() for m in c.poll(0.5)] == []
    finally:
        c.close()
    c = consumer(share_broker, group, topic)
    try:
        got: list[tuple[int, bytes, int]] = []
        end = time.monotonic() + 30
        while len(got) < 10 and time.monotonic() < end:
            got += accept_all(c, 0.5)
        assert sorted(got) == [(i, f"m{i}".encode(), 1) for i in range(10)]
    finally:
        c.close()
