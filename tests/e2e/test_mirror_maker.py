"""Apache Kafka's MirrorMaker 2 between a real Apache Kafka 4.4 and Sluice, both ways: the path
by which users move their topics and consumer groups to Sluice (docs/migrating-from-kafka.md).

Each test mirrors one topic (partitions, records with keys, headers, null keys and values,
their timestamps) and one consumer group's committed offsets with MM2 in dedicated mode
(tests/e2e/_mirror.py): every record arrives in the copy (``<source alias>.<topic>``, or
the topic's own name with the IdentityReplicationPolicy) in order per partition; the group,
which had read everything produced before MM2 started, has its offsets translated and
committed on the target by MM2's checkpoint connector (sync.group.offsets.enabled), so a
consumer of the same group on the target, after more records were mirrored, reads exactly
those (none it had read on the source, none skipped); the topic's configs follow, at
creation and when changed on the source later, and so do a new partition and its ACLs.

Kafka -> Sluice puts MM2's own topics on Sluice (Connect's compacted config, offset and
status topics, the checkpoints and heartbeats); Sluice -> Kafka reads the source's group
offsets and ACLs and keeps the offset-syncs topic (compacted) on Sluice. Kafka -> Sluice
runs once with Sluice's topics diskless (the default) and once classic
(``log.diskless.enable=false``): the kind MM2's topics, the copy among them, are created
with.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, ConsumerGroupTopicPartitions, TopicPartition
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewPartitions,
    ResourcePatternType,
    ResourceType,
)

from sluice.launch.kafka import KafkaBroker
from sluice.launch.process import free_port

from ._kafka import (
    Got,
    Msg,
    assert_same,
    confluent_admin,
    confluent_consume,
    confluent_create_topic,
    confluent_produce,
    confluent_topic_partitions,
    unique_topic,
    wait_until,
)
from ._mirror import MirrorMaker
from .conftest import SluiceBroker

pytestmark = pytest.mark.e2e

PARTITIONS = 3
BEFORE = 40  # records per partition the group reads on the source before MM2 starts
AFTER = 25  # records per partition produced once the group's offsets were synced
MIRROR_TIMEOUT_S = 120.0  # MM2's JVM start, its herder's group join, then the first poll
CONFIG_KEY = "retention.ms"
# Both clusters authorize with Kafka's StandardAuthorizer, so MM2 has ACLs to copy; the
# anonymous PLAINTEXT principal is a super user and a resource without ACLs is open.
AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
    "allow.everyone.if.no.acl.found": "true",
}


@pytest.fixture
def kafka(tmp_path: Path) -> Iterator[KafkaBroker]:
    """A Kafka of the test's own: MM2 keeps its state (connector configs naming the other
    cluster's address) in topics on its target, which a later test's MM2 must not find."""
    broker = KafkaBroker(tmp_path / "kafka", dict(AUTHORIZER))
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture(params=["diskless", "classic"])
def sluice(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SluiceBroker]:
    """`sluice dev` whose new topics, MM2's among them, are of the parametrized kind; the
    test's own, as Kafka is (MM2's state on its target names the other cluster)."""
    options = {
        "log.diskless.enable": "true" if request.param == "diskless" else "false",
        **AUTHORIZER,
    }
    broker = SluiceBroker(tmp_path / f"sluice-{request.param}", options)
    broker.start()
    try:
        yield broker
    finally:
        broker.stop()


@pytest.fixture
def mirror_dir(tmp_path: Path) -> Path:
    return tmp_path / "mm2"


def messages(partition: int, start: int, n: int) -> list[Msg]:
    """Keys that repeat, headers with repeated names and binary values, a null key and a
    tombstone: what a mirror must carry unchanged."""
    out: list[Msg] = []
    for i in range(start, start + n):
        key: bytes | None = f"p{partition}-k{i % 7}".encode()
        value: bytes | None = f"p{partition}-v{i}-".encode() * (1 + i % 4)
        headers: list[tuple[str, bytes | None]] = [("seq", str(i).encode())]
        if i % 3 == 0:
            headers += [("dup", b"first"), ("dup", b"second"), ("bin", bytes([0, i % 256, 255]))]
        if i % 11 == 5:
            key = None
        if i % 13 == 7:
            value = None
        out.append(Msg(key, value, headers))
    return out


def produce(bootstrap: str, topic: str, start: int, n: int) -> None:
    for p in range(PARTITIONS):
        confluent_produce(bootstrap, topic, messages(p, start, n), partition=p)


def read_all(bootstrap: str, topic: str, expected: int) -> list[Got]:
    """Every record of ``topic`` (all partitions, from the beginning, no group), sorted by
    partition then offset."""
    got = confluent_consume(
        bootstrap, topic, partitions=range(PARTITIONS), expected=expected, timeout=60
    )
    return sorted(got, key=lambda g: (g.partition, g.offset))


def committed(bootstrap: str, group: str, topic: str) -> dict[int, int]:
    admin = confluent_admin(bootstrap)
    parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
    request = [ConsumerGroupTopicPartitions(group, parts)]
    answer = admin.list_consumer_group_offsets(request)[group].result(timeout=15)
    return {tp.partition: tp.offset for tp in answer.topic_partitions}


def topic_config(bootstrap: str, topic: str) -> dict[str, str | None]:
    admin = confluent_admin(bootstrap)
    resource = ConfigResource("topic", topic)
    entries = admin.describe_configs([resource])[resource].result(timeout=15)
    return {name: entry.value for name, entry in entries.items()}


def read_as_group(
    bootstrap: str,
    group: str,
    topic: str,
    expected: int,
    reset: str = "latest",
    protocol: str = "classic",
) -> list[Got]:
    """Subscribe as ``group`` (``protocol``: classic, or KIP-848's consumer), read
    ``expected`` records and a little more (a record read twice or from before the
    committed offsets must show), commit, leave. On the target the group resumes from its
    synced offsets: were they missing, ``latest`` would read nothing of what is there, which
    fails the test."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": protocol,
            "enable.auto.commit": False,
            "auto.offset.reset": reset,
        }
    )
    consumer.subscribe([topic])
    out: list[Got] = []
    deadline = time.monotonic() + 60
    settle_until: float | None = None
    try:
        while time.monotonic() < deadline:
            if settle_until is not None and time.monotonic() >= settle_until:
                break
            msg = consumer.poll(0.2)
            if msg is None or msg.error() is not None:
                continue
            _, ts = msg.timestamp()
            headers = list(msg.headers() or [])
            out.append(Got(msg.partition(), msg.offset(), msg.key(), msg.value(), headers, ts))
            if len(out) >= expected and settle_until is None:
                settle_until = time.monotonic() + 2.0
        if out:
            consumer.commit(asynchronous=False)
    finally:
        consumer.close()
    return sorted(out, key=lambda g: (g.partition, g.offset))


def waited(mm: MirrorMaker, predicate: Callable[[], bool], what: str) -> float:
    """wait_until, with MM2's warnings and errors in the failure: what it tripped on."""
    try:
        return wait_until(predicate, what, timeout=MIRROR_TIMEOUT_S)
    except AssertionError as exc:
        problems = "\n".join(mm.problems()[-40:])
        tail = mm.log()[-6000:]
        alive = "running" if mm.alive() else "exited"
        raise AssertionError(
            f"{exc}\nMM2 ({alive}, log {mm.log_path}) warnings and errors:\n{problems}\n"
            f"MM2 log tail:\n{tail}"
        ) from None


def mirror_and_check(
    mm_dir: Path,
    source: tuple[str, str],
    target: tuple[str, str],
    topic: str,
    *,
    exactly_once: bool = False,
    restart: bool = False,
    protocol: str = "classic",
    identity: bool = False,
) -> tuple[list[MirrorMaker], str]:
    """Mirror ``topic`` and a group of it from ``source`` to ``target`` (alias, bootstrap)
    and check records, offsets, configs and partitions; returns the MM2s run (stopped) and
    the mirrored topic. ``exactly_once``: MM2 writes into the target in transactions
    (KIP-618). ``restart``: MM2 is stopped once the first records and the group's offsets
    are across and a second one goes on from what the first left in its topics on the
    target (Connect's offsets, configs and status, the checkpoints) while records keep coming
    on the source. ``protocol``: the group protocol of the consumer resuming on the target.
    ``identity``: MM2's IdentityReplicationPolicy, the copy under the source's name (else
    the DefaultReplicationPolicy's ``<source alias>.<topic>``)."""
    (source_alias, source_bs), (target_alias, target_bs) = source, target
    group = unique_topic("group")
    remote = topic if identity else f"{source_alias}.{topic}"
    same_offsets = not exactly_once

    confluent_create_topic(source_bs, topic, PARTITIONS, config={CONFIG_KEY: "7200000"})
    create_acls(source_bs, topic)
    produce(source_bs, topic, 0, BEFORE)
    # The group reads everything there is and commits: where its users stopped on the
    # source, the offsets they must resume from on the target.
    first = read_as_group(source_bs, group, topic, PARTITIONS * BEFORE, reset="earliest")
    assert len(first) == PARTITIONS * BEFORE
    assert committed(source_bs, group, topic) == dict.fromkeys(range(PARTITIONS), BEFORE)

    flow = f"{source_alias}->{target_alias}"
    settings = {f"{flow}.topics": topic, f"{flow}.groups": group}
    if exactly_once:
        settings |= exactly_once_settings(source_alias, target_alias)
    if identity:
        settings["replication.policy.class"] = IDENTITY
    clusters = {source_alias: source_bs, target_alias: target_bs}
    runs = [MirrorMaker(mm_dir, clusters, [flow], settings)]
    mm = runs[0]
    mm.start()
    try:
        # Records: every one, in each partition's order, keys, headers and timestamps kept.
        waited(mm, lambda: mirrored_count(target_bs, remote) >= PARTITIONS * BEFORE, f"{remote}")
        copied = assert_mirrored(
            source_bs, topic, target_bs, remote, PARTITIONS * BEFORE, same_offsets=same_offsets
        )

        # The group's offsets, translated: on the target, just past the last record it had
        # read on the source.
        stopped = {g.partition: g.offset + 1 for g in copied}
        waited(
            mm,
            lambda: committed(target_bs, group, remote) == stopped,
            f"group {group}'s offsets synced to {remote}",
        )
        assert topic_config(target_bs, remote)[CONFIG_KEY] == "7200000"
        # The topic's ACLs, as MM2 copies them: ALLOW WRITE left out (only MM2 writes the
        # copy), ALLOW ALL narrowed to READ, the rest as they are.
        waited(
            mm,
            lambda: topic_acls(target_bs, remote) == MIRRORED_ACLS,
            f"{topic}'s ACLs copied to {remote}",
        )

        if restart:
            mm.stop()
            mm = MirrorMaker(mm_dir, clusters, [flow], settings)
            runs.append(mm)
            mm.start()

        # More records after the cut-over point (produced while a restarted MM2 starts).
        produce(source_bs, topic, BEFORE, AFTER)
        total = PARTITIONS * (BEFORE + AFTER)
        waited(mm, lambda: mirrored_count(target_bs, remote) >= total, f"{remote}'s new records")
        # None twice: a restarted MM2 went on from the source offsets the first one stored.
        mirrored = assert_mirrored(
            source_bs, topic, target_bs, remote, total, same_offsets=same_offsets
        )

        # The topic's config follows a change on the source, its partitions a new one.
        alter_config(source_bs, topic, CONFIG_KEY, "3600000")
        waited(
            mm,
            lambda: topic_config(target_bs, remote)[CONFIG_KEY] == "3600000",
            f"{CONFIG_KEY} changed on {source_alias}'s {topic} reaching {remote}",
        )
        add_partition(source_bs, topic)
        waited(
            mm,
            lambda: partitions(target_bs, remote) == PARTITIONS + 1,
            f"{source_alias}'s new partition of {topic} reaching {remote}",
        )
    finally:
        mm.stop()
    resumed = read_as_group(target_bs, group, remote, PARTITIONS * AFTER, protocol=protocol)
    # Exactly the records after the first BEFORE of each partition, at their target offsets.
    by_partition: dict[int, list[Got]] = {}
    for g in mirrored:
        by_partition.setdefault(g.partition, []).append(g)
    assert_same(resumed, [g for p in sorted(by_partition) for g in by_partition[p][BEFORE:]])
    return runs, remote


IDENTITY = "org.apache.kafka.connect.mirror.IdentityReplicationPolicy"
SOURCE_ACLS = [
    ("User:alice", AclOperation.READ, AclPermissionType.ALLOW),
    ("User:bob", AclOperation.ALL, AclPermissionType.ALLOW),
    ("User:carol", AclOperation.WRITE, AclPermissionType.ALLOW),
    ("User:dave", AclOperation.DESCRIBE, AclPermissionType.DENY),
]
MIRRORED_ACLS = {
    ("User:alice", AclOperation.READ, AclPermissionType.ALLOW),
    ("User:bob", AclOperation.READ, AclPermissionType.ALLOW),
    ("User:dave", AclOperation.DESCRIBE, AclPermissionType.DENY),
}


def create_acls(bootstrap: str, topic: str) -> None:
    admin = confluent_admin(bootstrap)
    bindings = [
        AclBinding(ResourceType.TOPIC, topic, ResourcePatternType.LITERAL, who, "*", op, kind)
        for who, op, kind in SOURCE_ACLS
    ]
    for future in admin.create_acls(bindings).values():
        future.result(timeout=15)


def topic_acls(bootstrap: str, topic: str) -> set[tuple[str, AclOperation, AclPermissionType]]:
    admin = confluent_admin(bootstrap)
    pattern = AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    found = admin.describe_acls(pattern).result(timeout=15)
    return {(b.principal, b.operation, b.permission_type) for b in found}


def add_partition(bootstrap: str, topic: str) -> None:
    admin = confluent_admin(bootstrap)
    admin.create_partitions([NewPartitions(topic, PARTITIONS + 1)])[topic].result(timeout=15)


def partitions(bootstrap: str, topic: str) -> int:
    return confluent_topic_partitions(bootstrap, topic) or 0


def exactly_once_settings(source_alias: str, target_alias: str) -> dict[str, str]:
    """MM2's exactly-once delivery into ``target_alias`` (KIP-618, as Kafka's docs give it):
    its herder's source tasks write each poll's records and their source offsets in one
    transaction; the source is read read_committed; the internal REST server lets the
    leader fence zombie tasks' transactional producers."""
    return {
        f"{target_alias}.exactly.once.source.support": "enabled",
        f"{source_alias}.consumer.isolation.level": "read_committed",
        "dedicated.mode.enable.internal.rest": "true",
        "listeners": f"http://127.0.0.1:{free_port()}",
    }


def mirrored_count(bootstrap: str, topic: str) -> int:
    """How many records ``topic`` holds (0 while MM2 has not created it)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "mm2-test-watermarks"})
    try:
        md = consumer.list_topics(topic, timeout=10)
        if topic not in md.topics or md.topics[topic].error is not None:
            return 0
        total = 0
        for p in md.topics[topic].partitions:
            low, high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)
            total += high - low
        return total
    finally:
        consumer.close()


def assert_mirrored(
    source_bs: str, topic: str, target_bs: str, remote: str, expected: int, *, same_offsets: bool
) -> list[Got]:
    """The target's copy equals the source, partition by partition in order: keys, values,
    headers and timestamps. At the same offsets too (both start empty) unless MM2 writes
    transactions (exactly-once), whose commit markers take offsets of their own."""
    want = read_all(source_bs, topic, expected)
    got = read_all(target_bs, remote, expected)
    assert len(want) == expected

    def content(records: list[Got]) -> list[Got]:
        return [Got(g.partition, 0, g.key, g.value, g.headers, g.timestamp) for g in records]

    assert_same(content(got), content(want))
    assert [g.timestamp for g in got] == [w.timestamp for w in want]
    if same_offsets:
        assert [(g.partition, g.offset) for g in got] == [(w.partition, w.offset) for w in want]
    return got


def alter_config(bootstrap: str, topic: str, key: str, value: str) -> None:
    admin = confluent_admin(bootstrap)
    resource = ConfigResource(
        "topic",
        topic,
        incremental_configs=[ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)],
    )
    admin.incremental_alter_configs([resource])[resource].result(timeout=15)


def kind(bootstrap: str, topic: str) -> str:
    return "diskless" if topic_config(bootstrap, topic)["diskless.enable"] == "true" else "classic"


@pytest.mark.parametrize("mode", ["at-least-once", "exactly-once-same-names"])
def test_kafka_to_sluice(
    kafka: KafkaBroker,
    sluice: SluiceBroker,
    mirror_dir: Path,
    mode: str,
    request: pytest.FixtureRequest,
) -> None:
    """A migration's path: Kafka's topic and group, mirrored into Sluice by MM2 as it runs
    by default (at least once, the copy named ``kafka.<topic>``), or set up for a migration:
    exactly once, under the topic's own name (IdentityReplicationPolicy), across a restart
    of MM2 (which goes on from the state the first left on Sluice). The group resumes on
    Sluice with KIP-848's protocol, as a current client would."""
    topic = unique_topic("orders")
    migration = mode == "exactly-once-same-names"
    runs, remote = mirror_and_check(
        mirror_dir,
        ("kafka", kafka.bootstrap),
        ("sluice", sluice.bootstrap),
        topic,
        exactly_once=migration,
        restart=migration,
        protocol="consumer",
        identity=migration,
    )
    expected_kind = request.node.callspec.params["sluice"]
    assert kind(sluice.bootstrap, remote) == expected_kind
    # MM2's own topics on Sluice: Connect's config, offset and status topics must be
    # compacted (Connect checks and refuses to start otherwise), the checkpoints too.
    for internal in (
        "mm2-configs.kafka.internal",
        "mm2-offsets.kafka.internal",
        "mm2-status.kafka.internal",
        "kafka.checkpoints.internal",
    ):
        config = topic_config(sluice.bootstrap, internal)
        assert config["cleanup.policy"] == "compact", internal
        assert kind(sluice.bootstrap, internal) == expected_kind, internal
    assert_quiet(runs)


@pytest.mark.parametrize("sluice", ["diskless"], indirect=True)
def test_sluice_to_kafka(kafka: KafkaBroker, sluice: SluiceBroker, mirror_dir: Path) -> None:
    """The way back: a Sluice topic (diskless, the default) and group, mirrored into Kafka."""
    topic = unique_topic("back")
    runs, _remote = mirror_and_check(
        mirror_dir, ("sluice", sluice.bootstrap), ("kafka", kafka.bootstrap), topic
    )
    # The offset syncs MM2 keeps on the source, compacted, on Sluice.
    syncs = topic_config(sluice.bootstrap, "mm2-offset-syncs.kafka.internal")
    assert syncs["cleanup.policy"] == "compact"
    assert_quiet(runs)


def assert_quiet(runs: list[MirrorMaker]) -> None:
    """MM2 logged no error: a broker answer it did not expect shows there, even where its
    clients retried their way through."""
    for mm in runs:
        errors = [line for line in mm.problems() if " ERROR " in line]
        assert not errors, f"MM2 logged errors ({mm.log_path}):\n" + "\n".join(errors[:20])
