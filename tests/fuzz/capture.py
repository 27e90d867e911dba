"""Record the request frames stock clients send, as the protocol fuzzer's seed corpus.

    .venv/bin/python -m tests.fuzz.capture [--out tests/fuzz/corpus] [--fresh]

Starts `sluice dev` with a PLAINTEXT and a SASL_PLAINTEXT listener on 127.0.0.2 (PLAIN and
SCRAM users, StandardAuthorizer) advertising 127.0.0.1, and a recording TCP proxy on the
same ports of 127.0.0.1: every connection the clients open (bootstrap and the advertised
addresses alike) goes through the proxy, which writes each client->broker frame out. Then
confluent-kafka, kafka-python, aiokafka and kcat run an ordinary workload (metadata, topic
admin, produce with each compression type, consumer groups with commits, offsets, configs,
deletes), transactions (commit with offsets, abort, an admin abort), the admin APIs each
client has (groups, records, ACLs, configs, log dirs, elections, reassignments, client
quotas, SCRAM users, transactions, producers, the metadata quorum), kafka-cluster.sh unregister
and kafka-features.sh (UnregisterBroker, UpdateFeatures), OffsetForLeaderEpoch on
a classic topic, PLAIN/SCRAM logins on the SASL listener, and share groups (confluent-kafka's
ShareConsumer, and kafka-share-groups.sh for the share-group admin APIs when Kafka's jars are
there).

The corpus is committed so the CI fuzz run is deterministic; re-run this only to refresh it.
Frames are grouped per (client, API, version) and at most a few of each are kept. By
default only kinds the corpus lacks are added; --fresh replaces it.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from sluice.launch.process import SluiceProcess, free_port

CORPUS_DIR = Path(__file__).parent / "corpus"
PER_KIND = 3  # frames kept per (client, api key, version)
MAX_FRAME = 8 * 1024  # keep the corpus small: record data is one bytes field anyway


class RecordingProxy:
    """Forwards TCP both ways; remembers each complete client->broker frame."""

    def __init__(self, routes: dict[int, tuple[str, int]]) -> None:
        self.routes = routes  # listen port on 127.0.0.1 -> broker address
        self.frames: list[tuple[str, bytes]] = []  # (client label, frame without size)
        self.label = "unknown"
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)

    def start(self) -> None:
        self._thread.start()
        asyncio.run_coroutine_threadsafe(self._serve(), self._loop).result(10)

    async def _serve(self) -> None:
        for port, target in self.routes.items():
            await asyncio.start_server(functools.partial(self._handle, target), "127.0.0.1", port)

    async def _handle(
        self,
        target: tuple[str, int],
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        up_reader, up_writer = await asyncio.open_connection(*target)

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


# The SASL listener's users: PLAIN ones from the JAAS file; the SCRAM one is created by the
# confluent admin run (AlterUserScramCredentials) before any client logs in with it.
PLAIN_USER, PLAIN_PASSWORD = "capture", "capture-pw"
SCRAM_USER, SCRAM_PASSWORD = "scram-capture", "scram-capture-pw"


def _attempt(what: str, call: Callable[[], object]) -> None:
    """Run one extra request for the corpus; whether the broker grants it does not matter."""
    try:
        call()
    except Exception as exc:
        print(f"  {what}: {type(exc).__name__}: {exc}"[:300], file=sys.stderr)


def _results(futures: object, timeout: float = 30) -> None:
    if isinstance(futures, dict):
        for f in futures.values():
            f.result(timeout)
    else:
        futures.result(timeout)  # type: ignore[attr-defined]


def _classic_topic(admin: object, topic: str, partitions: int = 1) -> None:
    """A classic (replicated, not diskless) topic: leader epochs, OffsetForLeaderEpoch,
    WriteTxnMarkers and DescribeProducers have real partitions to act on."""
    from confluent_kafka.admin import NewTopic

    new = NewTopic(topic, partitions, 1, config={"diskless.enable": "false"})
    _results(admin.create_topics([new]))  # type: ignore[attr-defined]


def _confluent_admin(bootstrap: str, sasl_bootstrap: str) -> None:
    """Transactions, the admin APIs librdkafka has, and OffsetForLeaderEpoch (classic)."""
    from confluent_kafka import (
        Consumer,
        ElectionType,
        Producer,
        TopicPartition,
    )
    from confluent_kafka.admin import (
        AclBinding,
        AclBindingFilter,
        AclOperation,
        AclPermissionType,
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourcePatternType,
        ResourceType,
        ScramCredentialInfo,
        ScramMechanism,
        UserScramCredentialDeletion,
        UserScramCredentialUpsertion,
    )

    admin = AdminClient({"bootstrap.servers": bootstrap})
    topic = f"cap-ckc-{uuid.uuid4().hex[:6]}"
    _classic_topic(admin, topic, 2)
    group = f"cap-ckc-{uuid.uuid4().hex[:6]}"

    def consume(n: int) -> None:
        c = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "auto.offset.reset": "earliest",
                "enable.auto.commit": False,
                "isolation.level": "read_committed",
            }
        )
        c.subscribe([topic])
        got, deadline = 0, time.monotonic() + 20
        while got < n and time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is not None and not m.error():
                got += 1
                c.commit(m, asynchronous=False)
        c.close()

    # Transactions: commit one (with the consumer offsets in it), abort another.
    tx = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"cap-tx-{group}"})
    tx.init_transactions(30)
    tx.begin_transaction()
    for i in range(4):
        tx.produce(topic, key=f"t{i}".encode(), value=b"txn", partition=i % 2)
    tx.flush(30)
    meta = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    tx.send_offsets_to_transaction(
        [TopicPartition(topic, 0, 1)], meta.consumer_group_metadata(), 30
    )
    meta.close()
    tx.commit_transaction(30)
    tx.begin_transaction()
    tx.produce(topic, b"aborted", partition=0)
    tx.flush(30)
    tx.abort_transaction(30)
    consume(3)
    # A position with a leader epoch is validated with OffsetForLeaderEpoch before fetching.
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    c.assign(
        [TopicPartition(topic, 0, 1, leader_epoch=0), TopicPartition(topic, 1, 0, leader_epoch=0)]
    )
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and c.poll(0.5) is None:
        pass
    c.close()

    res_topic = ConfigResource("topic", topic)
    _attempt("describe groups", lambda: _results(admin.describe_consumer_groups([group])))
    _attempt(
        "incremental alter configs",
        lambda: _results(
            admin.incremental_alter_configs(
                [
                    ConfigResource(
                        "topic",
                        topic,
                        incremental_configs=[
                            ConfigEntry(
                                "retention.ms",
                                "3600000",
                                incremental_operation=AlterConfigOpType.SET,
                            )
                        ],
                    )
                ]
            )
        ),
    )
    _attempt(
        "alter configs",
        lambda: _results(
            admin.alter_configs(
                [ConfigResource("topic", topic, set_config={"retention.ms": "7200000"})]
            )
        ),
    )
    _attempt("describe configs", lambda: _results(admin.describe_configs([res_topic])))
    _attempt(
        "delete records",
        lambda: _results(admin.delete_records([TopicPartition(topic, 0, 1)])),
    )
    _attempt(
        "elect leaders",
        lambda: admin.elect_leaders(ElectionType.PREFERRED, [TopicPartition(topic, 0)]).result(30),
    )
    acl = AclBinding(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.LITERAL,
        "User:alice",
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    acl_filter = AclBindingFilter(
        ResourceType.TOPIC,
        topic,
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    _attempt("create acls", lambda: _results(admin.create_acls([acl])))
    _attempt("describe acls", lambda: admin.describe_acls(acl_filter).result(30))
    _attempt("delete acls", lambda: _results(admin.delete_acls([acl_filter])))
    for mechanism in (ScramMechanism.SCRAM_SHA_256, ScramMechanism.SCRAM_SHA_512):
        upsert = UserScramCredentialUpsertion(
            SCRAM_USER, ScramCredentialInfo(mechanism, 4096), SCRAM_PASSWORD.encode()
        )
        _attempt("alter scram", lambda u=upsert: _results(admin.alter_user_scram_credentials([u])))
    gone = UserScramCredentialUpsertion(
        "cap-gone", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096), b"pw"
    )
    _attempt("alter scram", lambda: _results(admin.alter_user_scram_credentials([gone])))
    deletion = UserScramCredentialDeletion("cap-gone", ScramMechanism.SCRAM_SHA_256)
    _attempt("delete scram", lambda: _results(admin.alter_user_scram_credentials([deletion])))
    _attempt("describe scram", lambda: _results(admin.describe_user_scram_credentials()))
    _attempt(
        "describe scram user",
        lambda: _results(admin.describe_user_scram_credentials([SCRAM_USER])),
    )
    _attempt("delete groups", lambda: _results(admin.delete_consumer_groups([group])))


def _kafka_python_admin(bootstrap: str, sasl_bootstrap: str) -> None:
    """Transactions and the admin APIs kafka-python has that librdkafka lacks."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import (
        ACL,
        AbortTransactionSpec,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        ConfigResource,
        ConfigResourceType,
        KafkaAdminClient,
        NewTopic,
        ResourcePattern,
        ResourcePatternFilter,
        ResourceType,
        ScramMechanism,
        UserScramCredentialUpsertion,
    )
    from kafka.protocol.admin.client_quotas import (
        AlterClientQuotasRequest,
        DescribeClientQuotasRequest,
    )

    topic = f"cap-kpc-{uuid.uuid4().hex[:6]}"
    group = f"cap-kpc-{uuid.uuid4().hex[:6]}"
    admin = KafkaAdminClient(bootstrap_servers=bootstrap)
    admin.create_topics([NewTopic(topic, 2, 1, topic_configs={"diskless.enable": "false"})])
    tid = f"cap-kptx-{group}"

    p = KafkaProducer(bootstrap_servers=bootstrap, transactional_id=tid)
    p.init_transactions()
    p.begin_transaction()
    for i in range(3):
        p.send(topic, key=f"t{i}".encode(), value=b"txn", partition=i % 2)
    p.flush(30)
    p.send_offsets_to_transaction({TopicPartition(topic, 0): _offset_and_metadata(1)}, group)
    p.commit_transaction()
    p.begin_transaction()
    p.send(topic, b"aborted", partition=1)
    p.flush(30)
    # While this one is open: the transaction APIs have a live transaction to describe.
    _attempt("list transactions", admin.list_transactions)
    _attempt("describe transactions", lambda: admin.describe_transactions([tid]))
    _attempt(
        "describe producers",
        lambda: admin.describe_producers([TopicPartition(topic, 0), TopicPartition(topic, 1)]),
    )
    state = p._transaction_manager.producer_id_and_epoch
    spec = AbortTransactionSpec(TopicPartition(topic, 1), state.producer_id, state.epoch)
    _attempt("abort transaction (WriteTxnMarkers)", lambda: admin.abort_transaction(spec))
    _attempt("abort", p.abort_transaction)
    p.close()

    c = KafkaConsumer(
        topic,
        bootstrap_servers=bootstrap,
        group_id=group,
        auto_offset_reset="earliest",
        consumer_timeout_ms=5000,
        isolation_level="read_committed",
    )
    for n, _m in enumerate(c):
        if n >= 2:
            break
    c.commit()
    c.close()

    _attempt("describe groups", lambda: admin.describe_groups([group]))
    _attempt(
        "delete group offsets",
        lambda: admin.delete_group_offsets(group, [TopicPartition(topic, 0)]),
    )
    _attempt("delete groups", lambda: admin.delete_groups([group]))
    _attempt("delete records", lambda: admin.delete_records({TopicPartition(topic, 0): 1}))
    _attempt("describe log dirs", admin.describe_log_dirs)
    _attempt("describe log dirs of a topic", lambda: admin.describe_log_dirs([topic]))
    _attempt("describe topic partitions", lambda: admin.describe_topic_partitions([topic]))
    _attempt("describe metadata quorum", admin.describe_metadata_quorum)
    _attempt("elect leaders", lambda: admin.elect_leaders(0, [TopicPartition(topic, 0)]))
    _attempt(
        "alter reassignments",
        lambda: admin.alter_partition_reassignments({TopicPartition(topic, 0): [1]}),
    )
    _attempt("list reassignments", admin.list_partition_reassignments)
    resource = ConfigResource(ConfigResourceType.TOPIC, topic, {"retention.ms": "3600000"})
    _attempt(
        "alter configs",
        lambda: admin.alter_configs([resource], raise_on_unknown=False, incremental=False),
    )
    _attempt(
        "incremental alter configs",
        lambda: admin.alter_configs([resource], raise_on_unknown=False, incremental=True),
    )
    pattern = ResourcePattern(ResourceType.TOPIC, topic, ACLResourcePatternType.LITERAL)
    acl = ACL("User:bob", "*", ACLOperation.WRITE, ACLPermissionType.ALLOW, pattern)
    acl_filter = ACLFilter(
        None,
        None,
        ACLOperation.ANY,
        ACLPermissionType.ANY,
        ResourcePatternFilter(ResourceType.TOPIC, topic, ACLResourcePatternType.MATCH),
    )
    _attempt("create acls", lambda: admin.create_acls([acl]))
    _attempt("describe acls", lambda: admin.describe_acls(acl_filter))
    _attempt("delete acls", lambda: admin.delete_acls([acl_filter]))
    _attempt(
        "alter scram",
        lambda: admin.alter_user_scram_credentials(
            [UserScramCredentialUpsertion("cap-kp", ScramMechanism.SCRAM_SHA_512, "pw")]
        ),
    )
    _attempt("describe scram", admin.describe_user_scram_credentials)

    # Client quotas: kafka-python encodes these requests but has no admin method for them.
    entry = AlterClientQuotasRequest.EntryData
    alter = AlterClientQuotasRequest(
        entries=[
            entry(
                entity=[entry.EntityData(entity_type="client-id", entity_name="cap-quota")],
                ops=[entry.OpData(key="producer_byte_rate", value=1048576.0, remove=False)],
            )
        ],
        validate_only=False,
    )
    component = DescribeClientQuotasRequest.ComponentData
    describe = DescribeClientQuotasRequest(
        components=[component(entity_type="client-id", match_type=0, match="cap-quota")],
        strict=False,
    )
    describe_all = DescribeClientQuotasRequest(
        components=[component(entity_type="user", match_type=2, match=None)], strict=True
    )
    for what, request in (
        ("alter quotas", alter),
        ("describe quotas", describe),
        ("describe all quotas", describe_all),
    ):
        _attempt(what, lambda r=request: admin._manager.run(admin._manager.send, r))
    admin.close()


def _offset_and_metadata(offset: int) -> object:
    from kafka.structs import OffsetAndMetadata

    try:
        return OffsetAndMetadata(offset, "", -1)
    except TypeError:  # older kafka-python: no leader epoch
        return OffsetAndMetadata(offset, "")


def _aiokafka_txn(bootstrap: str, sasl_bootstrap: str) -> None:
    from aiokafka import AIOKafkaProducer
    from aiokafka.structs import TopicPartition

    async def run() -> None:
        topic = f"cap-aiotx-{uuid.uuid4().hex[:6]}"
        group = f"cap-aiotx-{uuid.uuid4().hex[:6]}"
        p = AIOKafkaProducer(bootstrap_servers=bootstrap, transactional_id=f"cap-aiotx-{group}")
        await p.start()
        async with p.transaction():
            await p.send_and_wait(topic, b"txn", partition=0)
            await p.send_offsets_to_transaction({TopicPartition(topic, 0): 1}, group)
        await p.begin_transaction()
        await p.send_and_wait(topic, b"aborted", partition=0)
        await p.abort_transaction()
        await p.stop()

    asyncio.run(run())


# ---------------------------------------------------------------- SASL (its own listener)


def _confluent_sasl(bootstrap: str, sasl_bootstrap: str) -> None:
    from confluent_kafka.admin import AdminClient

    for mechanism, user, password in (
        ("PLAIN", PLAIN_USER, PLAIN_PASSWORD),
        ("SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD),
        ("SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD),
        ("PLAIN", PLAIN_USER, "wrong"),  # a failed login
    ):
        admin = AdminClient(
            {
                "bootstrap.servers": sasl_bootstrap,
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanisms": mechanism,
                "sasl.username": user,
                "sasl.password": password,
            }
        )
        _attempt(f"confluent {mechanism}", lambda a=admin: a.list_topics(timeout=3))


def _kafka_python_sasl(bootstrap: str, sasl_bootstrap: str) -> None:
    from kafka.admin import KafkaAdminClient

    for mechanism, user, password in (
        ("PLAIN", PLAIN_USER, PLAIN_PASSWORD),
        ("SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD),
    ):

        def login(m: str = mechanism, u: str = user, pw: str = password) -> None:
            admin = KafkaAdminClient(
                bootstrap_servers=sasl_bootstrap,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism=m,
                sasl_plain_username=u,
                sasl_plain_password=pw,
            )
            admin.list_topics()
            admin.close()

        _attempt(f"kafka-python {mechanism}", login)


def _aiokafka_sasl(bootstrap: str, sasl_bootstrap: str) -> None:
    from aiokafka.admin import AIOKafkaAdminClient

    async def run() -> None:
        for mechanism, user, password in (
            ("PLAIN", PLAIN_USER, PLAIN_PASSWORD),
            ("SCRAM-SHA-256", SCRAM_USER, SCRAM_PASSWORD),
        ):
            admin = AIOKafkaAdminClient(
                bootstrap_servers=sasl_bootstrap,
                security_protocol="SASL_PLAINTEXT",
                sasl_mechanism=mechanism,
                sasl_plain_username=user,
                sasl_plain_password=password,
            )
            try:
                await admin.start()
                await admin.list_topics()
            except Exception as exc:
                print(f"  aiokafka {mechanism}: {exc}"[:300], file=sys.stderr)
            finally:
                await admin.close()

    asyncio.run(run())


def _kcat_sasl(bootstrap: str, sasl_bootstrap: str) -> None:
    kcat = shutil.which("kcat")
    if kcat is None:
        return
    for mechanism, user, password in (
        ("PLAIN", PLAIN_USER, PLAIN_PASSWORD),
        ("SCRAM-SHA-512", SCRAM_USER, SCRAM_PASSWORD),
    ):
        args = ["-X", "security.protocol=SASL_PLAINTEXT", "-X", f"sasl.mechanisms={mechanism}"]
        args += ["-X", f"sasl.username={user}", "-X", f"sasl.password={password}"]
        _attempt(
            f"kcat {mechanism}",
            lambda a=args: subprocess.run(
                [kcat, "-b", sasl_bootstrap, *a, "-L"], check=True, capture_output=True, timeout=60
            ),
        )


def _confluent_share(bootstrap: str) -> None:
    """Share groups (KIP-932): ShareGroupHeartbeat, ShareFetch and ShareAcknowledge from
    confluent-kafka's ShareConsumer, group configs from its AdminClient."""
    from confluent_kafka import AcknowledgeType, Producer, ShareConsumer
    from confluent_kafka.admin import (
        AdminClient,
        AlterConfigOpType,
        ConfigEntry,
        ConfigResource,
        ResourceType,
    )

    topic, group = f"cap-share-{uuid.uuid4().hex[:6]}", f"cap-sg-{uuid.uuid4().hex[:6]}"
    admin = AdminClient({"bootstrap.servers": bootstrap})
    entry = ConfigEntry(
        "share.auto.offset.reset", "earliest", incremental_operation=AlterConfigOpType.SET
    )
    resource = ConfigResource(ResourceType.GROUP, group, incremental_configs=[entry])
    _attempt(
        "group config", lambda: admin.incremental_alter_configs([resource])[resource].result(10)
    )
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(5):
        producer.produce(topic, value=f"s{i}".encode())
    producer.flush(10)
    consumer = ShareConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "share.acknowledgement.mode": "explicit",
        }
    )
    consumer.subscribe([topic])
    end = time.monotonic() + 10
    got = 0
    while got < 5 and time.monotonic() < end:
        for i, m in enumerate(consumer.poll(0.5)):
            got += 1
            consumer.acknowledge(m, AcknowledgeType.RELEASE if i == 0 else AcknowledgeType.ACCEPT)
        consumer.commit_sync(10)
    consumer.close()
    _SHARED.append((group, topic))


def _confluent_consumer_protocol(bootstrap: str) -> None:
    """KIP-848 (group.protocol=consumer): ConsumerGroupHeartbeat from a consumer that joins,
    consumes, commits and leaves; ConsumerGroupDescribe from the AdminClient."""
    from confluent_kafka import Consumer, Producer
    from confluent_kafka.admin import AdminClient

    topic, group = f"cap-cg-{uuid.uuid4().hex[:6]}", f"cap-kip848-{uuid.uuid4().hex[:6]}"
    producer = Producer({"bootstrap.servers": bootstrap})
    for i in range(3):
        producer.produce(topic, value=f"c{i}".encode())
    producer.flush(10)
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "group.protocol": "consumer",
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([topic])
    end, got = time.monotonic() + 15, 0
    while got < 3 and time.monotonic() < end:
        if (m := consumer.poll(0.5)) is not None and not m.error():
            got += 1
    _attempt("commit", lambda: consumer.commit(asynchronous=False))
    admin = AdminClient({"bootstrap.servers": bootstrap})
    _attempt("describe", lambda: _results(admin.describe_consumer_groups([group])))
    consumer.close()


_SHARED: list[tuple[str, str]] = []  # (group, topic) the share workload left for the Java tool


def _java_share_groups(bootstrap: str) -> None:
    """kafka-share-groups.sh (Kafka's Java admin): ShareGroupDescribe and the share-group
    offsets APIs, which no Python client sends. Skipped without Kafka's jars."""
    try:
        from sluice.launch.kafka import ensure_jars, java_command

        ensure_jars()
    except Exception as exc:
        print(f"skipping kafka-share-groups.sh: {exc}", file=sys.stderr)
        return
    tool = "org.apache.kafka.tools.consumer.group.ShareGroupCommand"
    group, topic = _SHARED[-1]
    base = ["--bootstrap-server", bootstrap, "--group", group]
    for args in (
        ["--describe", "--members"],
        ["--describe"],
        ["--reset-offsets", "--to-earliest", "--topic", topic, "--execute"],
        ["--delete-offsets", "--topic", topic],
    ):
        subprocess.run(java_command(tool, *base, *args), capture_output=True, timeout=120)


def _java_cluster_tools(bootstrap: str) -> None:
    """kafka-cluster.sh unregister (UnregisterBroker) and kafka-features.sh (UpdateFeatures:
    a dry-run downgrade, then an upgrade to the level already finalized), which no Python
    client sends. The unregistered id was never registered (the broker stays). Skipped
    without Kafka's jars."""
    try:
        from sluice.launch.kafka import ensure_jars, java_command

        ensure_jars()
    except Exception as exc:
        print(f"skipping kafka-cluster.sh / kafka-features.sh: {exc}", file=sys.stderr)
        return
    base = ["--bootstrap-server", bootstrap]
    features = "org.apache.kafka.tools.FeatureCommand"
    for tool, args in (
        ("org.apache.kafka.tools.ClusterTool", ["unregister", *base, "--id", "99"]),
        (features, [*base, "downgrade", "--feature", "transaction.version=1", "--dry-run"]),
        (features, [*base, "upgrade", "--feature", "transaction.version=2"]),
    ):
        subprocess.run(java_command(tool, *args), capture_output=True, timeout=120)


def _plain(run: Callable[[str], None]) -> Callable[[str, str], None]:
    return lambda bootstrap, _sasl: run(bootstrap)


# (client label, workload): each workload gets the PLAINTEXT and the SASL_PLAINTEXT bootstrap.
WORKLOADS: list[tuple[str, Callable[[str, str], None]]] = [
    ("confluent", _plain(_confluent)),
    ("kafka-python", _plain(_kafka_python)),
    ("aiokafka", _plain(_aiokafka)),
    ("kcat", _plain(_kcat)),
    ("confluent", _confluent_admin),
    ("kafka-python", _kafka_python_admin),
    ("aiokafka", _aiokafka_txn),
    ("confluent", _confluent_sasl),
    ("kafka-python", _kafka_python_sasl),
    ("aiokafka", _aiokafka_sasl),
    ("kcat", _kcat_sasl),
    ("confluent", _plain(_confluent_consumer_protocol)),
    ("confluent", _plain(_confluent_share)),
    ("java", _plain(_java_share_groups)),
    ("java", _plain(_java_cluster_tools)),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=CORPUS_DIR)
    parser.add_argument(
        "--fresh",
        action="store_true",
        help="replace the whole corpus (default: keep the frames already there and add only "
        "(client, API, version) kinds it lacks, so the CI fuzz run's seeds change little)",
    )
    args = parser.parse_args()
    port, sasl_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="sluice-capture-") as tmp:
        jaas = Path(tmp) / "plain.jaas"
        jaas.write_text(
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'user_{PLAIN_USER}="{PLAIN_PASSWORD}";'
        )
        # The broker binds 127.0.0.2 and advertises the proxy's 127.0.0.1, so every
        # connection, bootstrap or not, is recorded. An authorizer makes the ACL APIs real
        # (PLAINTEXT clients are User:ANONYMOUS, a super user here).
        options = {
            "listeners": f"PLAINTEXT://127.0.0.2:{port},SASL_PLAINTEXT://127.0.0.2:{sasl_port}",
            "advertised.listeners": (
                f"PLAINTEXT://127.0.0.1:{port},SASL_PLAINTEXT://127.0.0.1:{sasl_port}"
            ),
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "sasl.jaas.config": f"${{file:{jaas}}}",
            "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": f"User:ANONYMOUS;User:{PLAIN_USER};User:{SCRAM_USER}",
            "produce.commit.interval.ms": "20",
        }
        command = ["dev", "--host", "127.0.0.2", "--port", str(port), "--data-dir", f"{tmp}/data"]
        for key, value in options.items():
            command += ["-o", f"{key}={value}"]
        broker = SluiceProcess(command, Path(tmp) / "broker.log", port, host="127.0.0.2")
        broker.start()
        proxy = RecordingProxy({p: ("127.0.0.2", p) for p in (port, sasl_port)})
        proxy.start()
        try:
            for label, run in WORKLOADS:
                print(f"{label}: {run.__name__}", file=sys.stderr)
                proxy.label = label
                run(f"127.0.0.1:{port}", f"127.0.0.1:{sasl_port}")
                time.sleep(0.5)
        finally:
            broker.stop()
            log = (Path(tmp) / "broker.log").read_text(errors="replace")
            if "Traceback" in log:
                print(log[log.index("Traceback") - 2000 :][:6000], file=sys.stderr)
    kept: dict[tuple[str, int, int], list[bytes]] = defaultdict(list)
    for label, frame in proxy.frames:
        if len(frame) < 8 or len(frame) > MAX_FRAME:
            continue
        api_key, version = struct.unpack_from(">hh", frame, 0)
        bucket = kept[(label, api_key, version)]
        if frame not in bucket and len(bucket) < PER_KIND:
            bucket.append(frame)
    args.out.mkdir(parents=True, exist_ok=True)
    existing = {p.name.rsplit("-", 1)[0] for p in args.out.glob("*.bin")}
    if args.fresh:
        for old in args.out.glob("*.bin"):
            old.unlink()
        existing = set()
    added = 0
    for (label, api_key, version), frames in sorted(kept.items()):
        kind = f"{label}-k{api_key:02d}-v{version:02d}"
        if kind in existing:
            continue
        for i, frame in enumerate(frames):
            (args.out / f"{kind}-{i}.bin").write_bytes(frame)
            added += 1
    print(f"{added} frames written to {args.out} ({len(kept)} kinds seen)")


if __name__ == "__main__":
    main()
