"""Tiered storage of classic topics (KIP-405) and its disablement (KIP-950) on three
brokers behind one controller, with stock clients only.

The leader copies rolled segments to the object store, local retention then deletes them
from every replica's disk, and consumers still read the whole log from offset 0: the
broker serves those offsets from the remote segments. The remote log manager runs every
300 ms here and segments roll at 1 MiB, so each test takes seconds.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    NewTopic,
)

from sluice.cluster import LocalCluster
from tests.fixtures.cluster import fast_cluster

from ._kafka import (
    LIBRDKAFKA_0082_CONSUMER,
    LIBRDKAFKA_0082_RECORD,
    confluent_consume,
    kafka_python_consume,
    wait_until,
)

pytestmark = pytest.mark.e2e

TIERED = {
    "diskless.enable": "false",
    "remote.storage.enable": "true",
    "segment.bytes": "1048576",  # Kafka's minimum: about 1000 records a segment
    # Only the active segment stays on local disk once the others are tiered.
    "local.retention.bytes": "1",
    "min.insync.replicas": "2",
}
PAD = b"x" * 1000
# Quick to catch up, to tier and to apply local retention (this module and the KIP-950
# failover module, which runs three controllers).
TIERED_BROKERS = {
    "replica.lag.time.max.ms": "2000",
    "replica.fetch.backoff.ms": "200",
    "remote.log.manager.task.interval.ms": "300",
    "log.retention.check.interval.ms": "300",
}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with fast_cluster(
        tmp_path_factory,
        "tiered",
        brokers=3,
        broker_options=TIERED_BROKERS,
        controllers=1,
    ) as c:
        yield c


@pytest.fixture
def healthy(cluster: LocalCluster) -> Iterator[LocalCluster]:
    for b in cluster.brokers:
        if not b.alive():
            b.start()
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, "three live brokers", 20)
    yield cluster


def describe(admin: AdminClient, topic: str) -> tuple[int, list[int], list[int]]:
    """(leader, replicas, isr) of partition 0."""
    p = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
    return p.leader, list(p.replicas), sorted(p.isrs)


def create(admin: AdminClient, topic: str, **extra: str) -> None:
    admin.create_topics([NewTopic(topic, 1, 3, config={**TIERED, **extra})])[topic].result(20)
    wait_until(lambda: len(describe(admin, topic)[2]) == 3, "a full ISR", 15)


def produce(bootstrap: str, topic: str, start: int, count: int, first_timestamp: int = 0) -> None:
    """Records ``start``.. (value: the number); with ``first_timestamp``, record i is
    stamped ``first_timestamp + i`` ms."""
    producer = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    errors: list[str] = []
    for i in range(start, start + count):
        producer.produce(
            topic,
            value=b"%08d" % i + PAD,
            timestamp=first_timestamp + i if first_timestamp else 0,
            on_delivery=lambda e, _m: e and errors.append(str(e)),
        )
        producer.poll(0)
    assert producer.flush(60) == 0 and not errors, errors[:3]


def local_segments(cluster: LocalCluster, node: int, topic: str) -> list[int]:
    """Base offsets of the partition's segment files on one broker's disk."""
    directory = Path(cluster.broker(node).data_dir) / f"{topic}-0"
    if not directory.exists():
        return []
    return sorted(int(f.name[:-4]) for f in directory.iterdir() if f.name.endswith(".log"))


def wait_tiered(cluster: LocalCluster, topic: str, node: int) -> int:
    """Waits until the node's local log no longer starts at 0; returns its first offset."""
    try:
        wait_until(
            lambda: (local_segments(cluster, node, topic) or [0])[0] > 0,
            f"broker {node}'s tiered segments deleted from its disk",
            30,
        )
    except AssertionError as exc:
        segments = local_segments(cluster, node, topic)
        raise AssertionError(f"{exc} (segments {segments})\n{logs_about(cluster, topic)}") from None
    return local_segments(cluster, node, topic)[0]


def tiered_topic(
    cluster: LocalCluster, topic: str, count: int, **extra: str
) -> tuple[AdminClient, int, int]:
    """A tiered topic holding records 0..count-1 whose leader has tiered all but its active
    segment: (an admin client, the leader, its local log start)."""
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
    create(admin, topic, **extra)
    produce(cluster.bootstrap, topic, 0, count)
    leader, _, _ = describe(admin, topic)
    return admin, leader, wait_tiered(cluster, topic, leader)


def watermarks(bootstrap: str, topic: str) -> tuple[int, int]:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "watermarks"})
    try:
        for _attempt in range(50):
            try:
                low, high = consumer.get_watermark_offsets(
                    TopicPartition(topic, 0), 5, cached=False
                )
                return int(low), int(high)
            except KafkaException:
                time.sleep(0.2)  # right after a kill the metadata may name the old leader
        raise AssertionError("no watermarks")
    finally:
        consumer.close()


def values(got: list) -> list[int]:  # type: ignore[type-arg]
    return [int((g.value or b"-1")[:8]) for g in got]


def alter(admin: AdminClient, topic: str, **configs: str) -> None:
    entries = [
        ConfigEntry(k.replace("_", "."), v, incremental_operation=AlterConfigOpType.SET)
        for k, v in configs.items()
    ]
    resource = ConfigResource("TOPIC", topic, incremental_configs=entries)
    admin.incremental_alter_configs([resource])[resource].result(20)


def test_stock_consumers_read_the_whole_log_from_remote_segments(
    healthy: LocalCluster, topic: str
) -> None:
    admin = AdminClient({"bootstrap.servers": healthy.bootstrap})
    create(admin, topic)
    produce(healthy.bootstrap, topic, 0, 3000)
    _, replicas, _ = describe(admin, topic)
    for node in replicas:  # followers delete tiered segments too
        wait_tiered(healthy, topic, node)
    assert watermarks(healthy.bootstrap, topic) == (0, 3000)
    for got in (
        confluent_consume(healthy.bootstrap, topic, expected=3000),
        kafka_python_consume(healthy.bootstrap, topic, expected=3000),
    ):
        assert [g.offset for g in got] == list(range(3000))
        assert values(got) == list(range(3000))


def test_librdkafka_0082_reads_remote_records_near_its_fetch_limit(
    healthy: LocalCluster, topic: str
) -> None:
    """librdkafka's test 0082 on a tiered topic: 10 records of 900 KiB in each of 3
    partitions led by one broker, 9 of them only in remote segments (one a segment), read
    with fetch.max.bytes=1000000 and receive.message.max.bytes=1000512: every answer must
    stay within the limit but for its first batch."""
    admin = AdminClient({"bootstrap.servers": healthy.bootstrap})
    new = NewTopic(topic, 3, replica_assignment=[[1, 2, 3]] * 3, config=TIERED)
    admin.create_topics([new])[topic].result(20)
    wait_until(
        lambda: all(
            len(p.isrs) == 3
            for p in admin.list_topics(topic, timeout=10).topics[topic].partitions.values()
        ),
        "a full ISR",
        15,
    )
    producer = Producer({"bootstrap.servers": healthy.bootstrap, "acks": "all"})
    for p in range(3):
        for i in range(10):
            producer.produce(
                topic, value=b"%04d" % i + os.urandom(LIBRDKAFKA_0082_RECORD), partition=p
            )
    assert producer.flush(60) == 0
    directory = Path(healthy.broker(1).data_dir)
    starts: list[int] = []

    def tiered() -> bool:
        starts[:] = [
            min((int(f.name[:-4]) for f in (directory / f"{topic}-{p}").glob("*.log")), default=0)
            for p in range(3)
        ]
        return starts == [9, 9, 9]

    try:
        wait_until(tiered, "the leader's first 9 segments of each partition tiered", 60)
    except AssertionError as exc:
        raise AssertionError(
            f"{exc} (local starts {starts})\n{logs_about(healthy, topic)}"
        ) from None
    started = time.monotonic()
    got = confluent_consume(
        healthy.bootstrap, topic, (0, 1, 2), expected=30, timeout=40, **LIBRDKAFKA_0082_CONSUMER
    )
    assert sorted((g.partition, g.offset) for g in got) == [
        (p, o) for p in range(3) for o in range(10)
    ]
    assert all(int((g.value or b"")[:4]) == g.offset for g in got)
    print(f"0082 tiered: 30 records of 900 KiB in {time.monotonic() - started:.1f} s")


def test_delete_records_moves_the_start_of_the_tiered_log(
    healthy: LocalCluster, topic: str
) -> None:
    admin, _, local_start = tiered_topic(healthy, topic, 3000)
    below = local_start // 2  # inside the tiered part
    (future,) = admin.delete_records([TopicPartition(topic, 0, below)]).values()
    assert future.result(20).low_watermark == below
    assert watermarks(healthy.bootstrap, topic) == (below, 3000)
    got = confluent_consume(healthy.bootstrap, topic, expected=3000 - below)
    assert values(got) == list(range(below, 3000))


def test_offsets_for_times_finds_records_in_remote_segments(
    healthy: LocalCluster, topic: str
) -> None:
    admin = AdminClient({"bootstrap.servers": healthy.bootstrap})
    create(admin, topic)
    first = int(time.time() * 1000) - 600_000
    produce(healthy.bootstrap, topic, 0, 3000, first_timestamp=first)
    leader, _, _ = describe(admin, topic)
    local_start = wait_tiered(healthy, topic, leader)
    consumer = Consumer({"bootstrap.servers": healthy.bootstrap, "group.id": "times"})
    try:

        def offset_for(timestamp: int) -> int:
            (found,) = consumer.offsets_for_times([TopicPartition(topic, 0, timestamp)], 10)
            return int(found.offset)

        # Tiered (remote segments only), the last tiered record, the first local one, the end.
        for i in (0, local_start // 3, local_start - 1, local_start, 2999):
            assert offset_for(first + i) == i
        assert offset_for(first + 3000) == -1  # none at or after it (Kafka answers -1)
    finally:
        consumer.close()


def test_read_committed_skips_aborted_transactions_in_remote_segments_after_restarts(
    healthy: LocalCluster, topic: str
) -> None:
    admin = AdminClient({"bootstrap.servers": healthy.bootstrap})
    create(admin, topic)
    producer = Producer(
        {
            "bootstrap.servers": healthy.bootstrap,
            "transactional.id": f"txn-{uuid.uuid4().hex[:8]}",
            "linger.ms": 5,
        }
    )
    producer.init_transactions(30)
    committed: list[int] = []
    for txn in range(10):
        producer.begin_transaction()
        for i in range(txn * 100, txn * 100 + 100):
            producer.produce(topic, value=b"%08d" % i + PAD)
        # Sent before the end: librdkafka's abort drops records still in its queue.
        assert producer.flush(30) == 0
        if txn % 2:
            producer.abort_transaction(30)
        else:
            producer.commit_transaction(30)
            committed += range(txn * 100, txn * 100 + 100)
    produce(healthy.bootstrap, topic, 1000, 1500)  # later segments: the first ones tier
    committed += range(1000, 2500)
    _, replicas, _ = describe(admin, topic)
    for node in replicas:
        wait_tiered(healthy, topic, node)
    # No replica keeps the aborted transactions in memory now: they come from the segments.
    for node in replicas:
        healthy.broker(node).stop()
    for node in replicas:
        healthy.broker(node).start()
    wait_until(lambda: len(describe(admin, topic)[2]) == 3, "a full ISR after restarts", 30)
    got = confluent_consume(
        healthy.bootstrap, topic, expected=len(committed), **{"isolation.level": "read_committed"}
    )
    assert values(got) == committed


def test_remote_storage_is_refused_on_a_diskless_topic(healthy: LocalCluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": healthy.bootstrap})
    future = admin.create_topics(
        [NewTopic(topic, 1, 1, config={"diskless.enable": "true", "remote.storage.enable": "true"})]
    )[topic]
    with pytest.raises(KafkaException, match=r"INVALID_CONFIG|diskless"):
        future.result(20)


def test_a_killed_leader_leaves_the_log_readable_without_a_gap(
    healthy: LocalCluster, topic: str
) -> None:
    admin, leader, _ = tiered_topic(healthy, topic, 2000)
    healthy.broker(leader).stop(signal.SIGKILL)
    wait_until(lambda: describe(admin, topic)[0] not in (leader, -1), "a new leader", 20)
    new_leader = describe(admin, topic)[0]
    produce(healthy.bootstrap, topic, 2000, 2000)
    # The new leader copies after the tiered lineage (no gap, nothing twice) and deletes
    # its own local copies of what it tiered.
    first_local = wait_tiered(healthy, topic, new_leader)
    wait_until(
        lambda: local_segments(healthy, new_leader, topic)[0] > 2000,
        "the new leader's segments tiered",
        30,
    )
    assert first_local > 0
    healthy.broker(leader).start()
    wait_until(lambda: len(describe(admin, topic)[2]) == 3, "the old leader back in the ISR", 30)
    assert watermarks(healthy.bootstrap, topic) == (0, 4000)
    got = confluent_consume(healthy.bootstrap, topic, expected=4000)
    assert values(got) == list(range(4000))
    assert [g.offset for g in got] == list(range(4000))


def test_a_wiped_follower_starts_after_the_tiered_part(healthy: LocalCluster, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": healthy.bootstrap})
    create(admin, topic)
    produce(healthy.bootstrap, topic, 0, 2000)
    leader, replicas, _ = describe(admin, topic)
    leader_start = wait_tiered(healthy, topic, leader)
    follower = next(r for r in replicas if r != leader)
    broker = healthy.broker(follower)
    broker.stop(signal.SIGKILL)
    shutil.rmtree(Path(broker.data_dir) / f"{topic}-0")
    logged = broker.log_size()
    broker.start()
    # It does not fetch the tiered offsets again: told OFFSET_MOVED_TO_TIERED_STORAGE, its
    # log restarts at the leader's local start (the ISR may still name it: it was killed
    # less than replica.lag.time.max.ms ago, so the ISR alone says nothing).
    started = f"{topic}-0: starting after the tiered part"
    wait_until(
        lambda: started in broker.log_tail(10**8, since=logged),
        "the wiped follower starting after the tiered part",
        30,
    )
    assert local_segments(healthy, follower, topic)[0] >= leader_start
    wait_until(lambda: len(describe(admin, topic)[2]) == 3, "the wiped follower in the ISR", 30)
    produce(healthy.bootstrap, topic, 2000, 500)
    # It replicates from there on, and can lead: make it the only choice of leader.
    others = [r for r in replicas if r != follower]
    for r in others:
        healthy.broker(r).stop(signal.SIGKILL)
    # Asked of the survivor only: a client that knew the dead brokers may send its metadata
    # request to one of them and time out.
    survivor = AdminClient({"bootstrap.servers": healthy.broker(follower).bootstrap})
    wait_until(lambda: describe(survivor, topic)[0] == follower, "the wiped follower leads", 30)
    for r in others:
        healthy.broker(r).start()
    wait_until(lambda: len(describe(admin, topic)[2]) == 3, "a full ISR again", 30)
    got = confluent_consume(healthy.bootstrap, topic, expected=2500)
    assert values(got) == list(range(2500))


def tiered_end(cluster: LocalCluster, node: int, topic: str) -> int:
    """A broker's last tiered offset of partition 0 (ListOffsets LATEST_TIERED, KIP-1005;
    confluent-kafka has no OffsetSpec for it): -1 when nothing is."""
    from kio.schema.list_offsets.v8 import request as offsets_req
    from kio.schema.types import BrokerId, TopicName
    from kio.static.primitive import i8, i32, i64

    from broker.logs.classic.kafka_client import KafkaConnection

    async def ask() -> int:
        host, port = cluster.broker(node).bootstrap.rsplit(":", 1)
        conn = KafkaConnection(host, int(port), "test-tiered-end")
        try:
            partition = offsets_req.ListOffsetsPartition(partition_index=i32(0), timestamp=i64(-5))
            request = offsets_req.ListOffsetsRequest(
                replica_id=BrokerId(-1),
                isolation_level=i8(0),
                topics=(
                    offsets_req.ListOffsetsTopic(name=TopicName(topic), partitions=(partition,)),
                ),
            )
            response = await conn.request(request, 10.0)
            [answer] = response.topics[0].partitions
            return int(answer.offset) if int(answer.error_code) == 0 else -1
        finally:
            conn.close()

    return asyncio.run(ask())


def test_the_documents_scenario_a_returning_replica_starts_after_the_lineage(
    healthy: LocalCluster, topic: str
) -> None:
    """Seeds/002 on real brokers: a leader alone in the ISR tiers records that an unclean
    election later discards (orphans reaching further than the new lineage's tiered end:
    "θ5 > θ6"); the new leader tiers its own; the old leader returns, truncates its
    divergent tail, and starts replicating after the last tiered offset of the current
    lineage ("θ6"), neither fetching the tiered offsets again (the leader keeps them on
    its disk too here) nor starting past the orphans."""
    admin = AdminClient({"bootstrap.servers": healthy.bootstrap})
    config = {
        **TIERED,
        "local.retention.bytes": "-2",  # the leaders keep their tiered segments locally
        "min.insync.replicas": "1",
        "unclean.leader.election.enable": "true",
    }
    admin.create_topics([NewTopic(topic, 1, replica_assignment=[[1, 2, 3]], config=config)])[
        topic
    ].result(20)
    wait_until(lambda: describe(admin, topic)[2] == [1, 2, 3], "a full ISR", 15)
    produce(healthy.bootstrap, topic, 0, 1000)  # g1: on every replica
    # g2: 2 and 3 offline; 1 alone writes and tiers records the lineage will discard.
    for node in (2, 3):
        healthy.broker(node).stop(signal.SIGKILL)
    wait_until(lambda: describe(admin, topic)[2] == [1], "1 alone in the ISR", 30)
    produce(healthy.bootstrap, topic, 1000, 3000)
    wait_until(lambda: tiered_end(healthy, 1, topic) > 3000, "1 tiering its records", 30)
    orphans_end = tiered_end(healthy, 1, topic)
    # g3: 1 offline, 2 or 3 leads uncleanly from offset 1000 and tiers its own records.
    healthy.broker(1).stop(signal.SIGKILL)
    for node in (2, 3):
        healthy.broker(node).start()
    survivor = AdminClient({"bootstrap.servers": healthy.broker(2).bootstrap})
    wait_until(lambda: describe(survivor, topic)[0] in (2, 3), "an unclean leader", 30)
    leader = describe(survivor, topic)[0]
    produce(healthy.broker(2).bootstrap, topic, 1000, 1500)
    wait_until(
        lambda: tiered_end(healthy, leader, topic) > 1000, "the new leader tiering its own", 30
    )
    lineage_end = tiered_end(healthy, leader, topic)
    assert lineage_end < orphans_end
    # 1 returns: it truncates to 1000 and starts after the lineage's tiered end.
    broker = healthy.broker(1)
    logged = broker.log_size()
    broker.start()
    started = f"{topic}-0: starting after the tiered part of the log, at {lineage_end + 1} "
    wait_until(
        lambda: started in broker.log_tail(10**8, since=logged),
        f"1 starting after the lineage's tiered end {lineage_end}",
        30,
    )
    assert local_segments(healthy, 1, topic)[0] == lineage_end + 1
    wait_until(lambda: len(describe(admin, topic)[2]) == 3, "1 back in the ISR", 30)
    # The log is the new leader's lineage, with none of 1's discarded records.
    got = confluent_consume(healthy.bootstrap, topic, expected=2500)
    assert values(got) == list(range(2500))
    assert [g.offset for g in got] == list(range(2500))


def test_disable_with_retain_keeps_the_remote_data_readable(
    healthy: LocalCluster, topic: str
) -> None:
    admin, _, _ = tiered_topic(healthy, topic, 2000)
    alter(admin, topic, remote_storage_enable="false")  # remote.log.disable.policy=retain
    # Once DISABLED, tiering may be enabled again (refused while DISABLING): the sign
    # that every leader reported the partition done.
    produce(healthy.bootstrap, topic, 2000, 500)
    assert watermarks(healthy.bootstrap, topic)[0] == 0
    got = confluent_consume(healthy.bootstrap, topic, expected=2500)
    assert values(got) == list(range(2500))
    wait_until(lambda: _try_alter(admin, topic, remote_storage_enable="true"), "re-enabled", 30)


def _try_alter(admin: AdminClient, topic: str, **configs: str) -> bool:
    try:
        alter(admin, topic, **configs)
    except KafkaException:
        return False
    return True


def test_disable_with_delete_moves_the_log_start_to_the_local_log(
    healthy: LocalCluster, topic: str
) -> None:
    admin, leader, _ = tiered_topic(healthy, topic, 2000)
    # Kafka 3.9's spelling of KIP-950's remote.log.disable.policy=delete.
    alter(admin, topic, remote_storage_enable="false", remote_log_delete_on_disable="true")
    wait_until(
        lambda: watermarks(healthy.bootstrap, topic)[0] > 0, "the log start moved past 0", 30
    )
    low, high = watermarks(healthy.bootstrap, topic)
    assert high == 2000
    assert low == local_segments(healthy, leader, topic)[0]
    got = confluent_consume(healthy.bootstrap, topic, expected=high - low)
    assert values(got) == list(range(low, high))
    # Enabled again: a new tiering period starts from the local log.
    wait_until(lambda: _try_alter(admin, topic, remote_storage_enable="true"), "re-enabled", 30)
    produce(healthy.bootstrap, topic, 2000, 2000)
    wait_until(lambda: local_segments(healthy, leader, topic)[0] > 2000, "tiered again", 30)
    assert watermarks(healthy.bootstrap, topic) == (low, 4000)
    got = confluent_consume(healthy.bootstrap, topic, expected=4000 - low)
    assert values(got) == list(range(low, 4000))


def test_deleting_a_tiered_topic_deletes_its_remote_segments(
    healthy: LocalCluster, topic: str
) -> None:
    admin, _, _ = tiered_topic(healthy, topic, 2000)
    topic_id = _topic_id(admin, topic)
    assert _remote_objects(healthy, topic_id)
    admin.delete_topics([topic])[topic].result(20)
    wait_until(lambda: not _remote_objects(healthy, topic_id), "remote segments deleted", 30)


def test_a_topic_deleted_while_its_only_replica_is_down_loses_its_remote_segments(
    healthy: LocalCluster, topic: str
) -> None:
    admin = AdminClient({"bootstrap.servers": healthy.bootstrap})
    config = {**TIERED, "min.insync.replicas": "1"}
    new = NewTopic(topic, 1, replica_assignment=[[3]], config=config)
    admin.create_topics([new])[topic].result(20)
    wait_until(lambda: describe(admin, topic)[0] == 3, "a leader", 15)
    produce(healthy.bootstrap, topic, 0, 2000)
    wait_tiered(healthy, topic, 3)
    topic_id = _topic_id(admin, topic)
    assert _remote_objects(healthy, topic_id)
    healthy.broker(3).stop()
    others = AdminClient({"bootstrap.servers": healthy.broker(1).bootstrap})
    others.delete_topics([topic])[topic].result(20)
    healthy.broker(3).start()
    # No replica saw the deletion: the brokers' sweep of the remote metadata finds it.
    wait_until(lambda: not _remote_objects(healthy, topic_id), "remote segments deleted", 60)


def _topic_id(admin: AdminClient, topic: str) -> str:
    desc = admin.describe_topics(TopicCollection([topic]))[topic].result(10)
    u = desc.topic_id
    hi, lo = u.get_most_significant_bits() % (1 << 64), u.get_least_significant_bits() % (1 << 64)
    return str(uuid.UUID(int=(hi << 64) | lo))


def _remote_objects(cluster: LocalCluster, topic_id: str) -> list[str]:
    """The object keys of the topic's tiered segments in the cluster's bucket."""
    from storage.objects.s3 import S3ObjectStore

    s3 = cluster.s3
    store = S3ObjectStore(s3.store_config())

    async def keys() -> list[str]:
        await store.start()
        try:
            return [
                o.key
                async for page in store.list_objects()
                for o in page
                if o.key.startswith(f"tiered/{topic_id}/")
            ]
        finally:
            await store.close()

    return asyncio.run(keys())


def logs_about(cluster: LocalCluster, topic: str) -> str:
    """What the brokers and controllers logged about the topic and its disablement: a
    failure must say where the work stopped."""
    out = []
    for process in [*cluster.brokers, *cluster.controllers]:
        try:
            lines = process.log_path.read_text(errors="replace").splitlines()
        except OSError:
            continue
        wanted = [
            line
            for line in lines
            if topic in line or "tier" in line or "WARNING" in line or "ERROR" in line
        ]
        out.append(f"--- {process.log_path}\n" + "\n".join(wanted[-40:]))
    return "\n".join(out)
