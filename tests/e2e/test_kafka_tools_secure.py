"""Apache Kafka's own command-line tools against a secured three-broker Sluice cluster
(``sluice cluster up --secure``: SASL_SSL listeners, SCRAM, Kafka's StandardAuthorizer, the
super user ``admin``), each run as an operator runs it: the tool's class (as kafka-*.sh
does) with ``--command-config`` naming the admin's login. test_kafka_tools.py covers the
tools of a plain cluster; here are the ones that need security (kafka-acls, SCRAM users in
kafka-configs) and the rest of the operator's kit: quotas, leader election, the perf and
verifiable clients, kafka-metadata-quorum, kafka-features and kafka-cluster.

Each test checks the tool's exit status and the facts in its output an operator reads, and
the effect through another client (librdkafka, or the controller's own status)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.cluster import LocalCluster
from sluice.launch.kafka import ensure_jars, java_command

from ._kafka import wait_until
from ._secure import classic_cluster, cluster_admin_conf, sasl_conf

pytestmark = pytest.mark.e2e

CLASSIC = {"diskless.enable": "false"}
# Short quota windows (as test_client_quotas.py): a client bursts about two windows' worth,
# then moves at its quota.
WINDOWS = {"quota.window.num": "3", "quota.window.size.seconds": "1"}


class Tools:
    """The cluster and the admin's login for Kafka's Java tools (a PEM truststore: the
    cluster's CA)."""

    def __init__(self, cluster: LocalCluster, workdir: Path) -> None:
        self.cluster = cluster
        self.boot = cluster.bootstrap.split(",")[0]
        self.admin_conf = cluster_admin_conf(cluster)
        password = cluster.tls.admin_password().replace("\\", "\\\\").replace('"', '\\"')
        self.config = workdir / "admin.properties"
        self.config.write_text(
            "security.protocol=SASL_SSL\n"
            "sasl.mechanism=SCRAM-SHA-512\n"
            "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="admin" password="{password}";\n'
            "ssl.truststore.type=PEM\n"
            f"ssl.truststore.location={cluster.tls.ca}\n"
        )
        self.config.chmod(0o600)

    def run(self, cls: str, *args: str, ok: bool = True, timeout: float = 120) -> str:
        """A tool's standard output; ``ok``: a non-zero exit fails the test with the tool's
        own words (else the exit must be non-zero and stdout + stderr are returned)."""
        done = subprocess.run(
            java_command(cls, *args), capture_output=True, text=True, timeout=timeout, check=False
        )
        if ok:
            assert done.returncode == 0, (
                f"{cls} {' '.join(args)} exited {done.returncode}:\n{done.stdout}\n"
                f"{done.stderr[-3000:]}"
            )
            return done.stdout
        assert done.returncode != 0, f"{cls} {' '.join(args)} succeeded:\n{done.stdout}"
        return done.stdout + done.stderr

    def admin_tool(self, cls: str, *args: str, ok: bool = True) -> str:
        """A tool taking ``--bootstrap-server`` and ``--command-config``."""
        return self.run(
            cls, "--bootstrap-server", self.boot, "--command-config", str(self.config), *args,
            ok=ok,
        )  # fmt: skip

    def configs(self, *args: str) -> str:
        return self.admin_tool("org.apache.kafka.tools.ConfigCommand", *args)

    def admin(self) -> AdminClient:
        return AdminClient(self.admin_conf)

    def classic_topic(self, name: str, partitions: int = 1, **kwargs: Any) -> None:
        admin = self.admin()  # kept alive until the answer: its handle serves the future
        admin.create_topics([NewTopic(name, partitions, config=CLASSIC, **kwargs)])[name].result(20)


@pytest.fixture(scope="module")
def tools(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tools]:
    ensure_jars()  # fetched once (Maven) before any broker starts
    with classic_cluster(tmp_path_factory, "tools-secure", WINDOWS, secure=True) as local:
        t = Tools(local, tmp_path_factory.mktemp("tools-secure-client"))
        admin = t.admin()
        wait_until(lambda: len(admin.list_topics(timeout=10).brokers) == 3, "three brokers", 60)
        yield t


def produce(
    conf: dict[str, Any], topic: str, n: int, size: int = 10, **extra: Any
) -> list[KafkaError]:
    """The delivery errors of ``n`` records (none: all acknowledged)."""
    errors: list[KafkaError] = []

    def delivered(err: KafkaError | None, _msg: object) -> None:
        if err is not None:
            errors.append(err)

    producer = Producer({**conf, "acks": "all", **extra})
    for i in range(n):
        producer.produce(topic, b"x" * size, key=b"%d" % i, on_delivery=delivered)
        producer.poll(0)
    assert producer.flush(60) == 0
    return errors


def test_scram_users_and_acls(tools: Tools, topic: str) -> None:
    """kafka-configs creates a SCRAM user, kafka-acls grants it a topic prefix and a group,
    and takes it back: the user logs in, then is allowed, then refused."""
    user, password = f"alice-{uuid.uuid4().hex[:6]}", "alice-secret"
    out = tools.configs(
        "--alter", "--entity-type", "users", "--entity-name", user,
        "--add-config", f"SCRAM-SHA-256=[iterations=8192,password={password}]",
    )  # fmt: skip
    assert f"Completed updating config for user {user}." in out, out
    # Every user's credentials (the Java AdminClient asks with an empty list: all users).
    described = tools.configs("--describe", "--entity-type", "users")
    for line in (
        f"SCRAM credential configs for user-principal '{user}' are SCRAM-SHA-256=iterations=8192",
        "SCRAM credential configs for user-principal 'admin' are SCRAM-SHA-512=iterations=",
    ):
        assert line in described, described
    tools.classic_topic(topic)
    group = f"g-{uuid.uuid4().hex[:6]}"
    alice = sasl_conf(
        tools.cluster.bootstrap, "SCRAM-SHA-256", user, password, tools.cluster.tls.ca
    )

    def alice_produces() -> set[int]:
        """The error codes of alice's five records (empty: all acknowledged)."""
        errors = produce(alice, topic, 5, **{"message.timeout.ms": 10_000})
        return {e.code() for e in errors}

    # Alice logs in (a failed login would be an authentication error); the authorizer,
    # with no ACL for her, refuses.
    assert alice_produces() == {KafkaError.TOPIC_AUTHORIZATION_FAILED}

    acl = "org.apache.kafka.tools.AclCommand"
    prefix = topic[: len(topic) - 4]
    topics = ("--topic", prefix, "--resource-pattern-type", "prefixed")
    out = tools.admin_tool(
        acl, "--add", "--allow-principal", f"User:{user}", "--operation", "Write",
        "--operation", "Read", "--operation", "Describe", *topics,
    )  # fmt: skip
    assert f"name={prefix}, patternType=PREFIXED" in out, out
    tools.admin_tool(
        acl, "--add", "--allow-principal", f"User:{user}", "--operation", "Read", "--group", group
    )
    listed = tools.admin_tool(acl, "--list", "--principal", f"User:{user}")
    for operation in ("READ", "WRITE", "DESCRIBE"):
        assert f"(principal=User:{user}, host=*, operation={operation}, permissionType=ALLOW)" in (
            listed
        ), listed
    assert f"name={group}, patternType=LITERAL" in listed, listed

    assert alice_produces() == set()
    consumer = Consumer(
        {**alice, "group.id": group, "auto.offset.reset": "earliest", "enable.auto.commit": False}
    )
    try:
        consumer.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 30
        while got < 5 and time.monotonic() < deadline:
            msg = consumer.poll(1)
            if msg is not None:
                assert msg.error() is None, msg.error()
                got += 1
        assert got == 5
        consumer.commit(asynchronous=False)  # READ on the group
    finally:
        consumer.close()

    # Without --operation or a principal, --remove takes every ACL of the resource (with
    # them, only the ACLs of exactly that operation: an ALL filter matches ALL, as on Kafka).
    removed = tools.admin_tool(acl, "--remove", "--force", *topics)
    assert "Error" not in removed, removed
    tools.admin_tool(acl, "--remove", "--force", "--group", group)
    assert alice_produces() == {KafkaError.TOPIC_AUTHORIZATION_FAILED}


def test_quotas_for_clients_and_users(tools: Tools, topic: str) -> None:
    client = f"slow-{uuid.uuid4().hex[:6]}"
    rate = 10 * 1024
    out = tools.configs(
        "--alter", "--entity-type", "clients", "--entity-name", client,
        "--add-config", f"producer_byte_rate={rate},consumer_byte_rate={2 * rate}",
    )  # fmt: skip
    assert f"Completed updating config for client {client}." in out, out
    described = tools.configs("--describe", "--entity-type", "clients", "--entity-name", client)
    assert (
        f"Quota configs for client-id '{client}' are consumer_byte_rate={2 * rate}.0, "
        f"producer_byte_rate={rate}.0"
    ) in described, described
    user = f"bob-{uuid.uuid4().hex[:6]}"
    tools.configs(
        "--alter", "--entity-type", "users", "--entity-name", user,
        "--add-config", "producer_byte_rate=4096,request_percentage=50",
    )  # fmt: skip
    described = tools.configs("--describe", "--entity-type", "users", "--entity-name", user)
    assert (
        f"Quota configs for user-principal '{user}' are producer_byte_rate=4096.0, "
        "request_percentage=50.0"
    ) in described, described

    # The client's quota holds its producer back: over 10 KiB/s its produce answers carry a
    # throttle time (and its connection is paused for it, KIP-219).
    tools.classic_topic(topic)
    assert throttled_produce(tools.admin_conf, topic, client) > 0, "not held to its quota"
    tools.configs(
        "--alter", "--entity-type", "clients", "--entity-name", client,
        "--delete-config", "producer_byte_rate,consumer_byte_rate",
    )  # fmt: skip
    # Every broker has the change once its metadata caught up (a moment for the others).
    wait_until(lambda: throttled_produce(tools.admin_conf, topic, client) == 0, "unthrottled", 30)


def throttled_produce(conf: dict[str, Any], topic: str, client: str) -> int:
    """The largest throttle time (ms) the answers to 64 KiB in 4 KiB requests carried."""
    throttles: list[int] = []
    producer = Producer(
        {
            **conf,
            "client.id": client,
            "linger.ms": 5,
            "batch.size": 4096,
            "throttle_cb": lambda event: throttles.append(int(event.throttle_time * 1000)),
        }
    )
    for _ in range(64):
        producer.produce(topic, b"x" * 1000, partition=0)
        producer.poll(0)
    assert producer.flush(60) == 0
    producer.poll(0.5)  # throttle events are served by poll
    return max(throttles, default=0)


def test_preferred_leader_election(tools: Tools, topic: str, tmp_path: Path) -> None:
    """Reordering a partition's replicas leaves its leader in place; kafka-leader-election
    then moves it to the new preferred (first) replica, as on Kafka."""
    tools.classic_topic(topic, 2, replica_assignment=[[1, 2, 3], [2, 3, 1]])
    admin = tools.admin()

    def leaders() -> list[int]:
        parts = admin.list_topics(topic, timeout=10).topics[topic].partitions
        return [parts[p].leader for p in sorted(parts)]

    wait_until(lambda: leaders() == [1, 2], "the first leaders", 20)
    plan = tmp_path / "reorder.json"
    plan.write_text(
        json.dumps(
            {
                "version": 1,
                "partitions": [
                    {"topic": topic, "partition": 0, "replicas": [3, 1, 2]},
                    {"topic": topic, "partition": 1, "replicas": [1, 2, 3]},
                ],
            }
        )
    )
    tools.admin_tool(
        "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
        "--reassignment-json-file", str(plan), "--execute",
    )  # fmt: skip
    replicas = [
        list(p.replicas)
        for _, p in sorted(admin.list_topics(topic, timeout=10).topics[topic].partitions.items())
    ]
    assert replicas == [[3, 1, 2], [1, 2, 3]] and leaders() == [1, 2]

    elect = "org.apache.kafka.tools.LeaderElectionCommand"
    out = tools.admin_tool(elect, "--election-type", "preferred", "--all-topic-partitions")
    assert "Successfully completed leader election (PREFERRED) for partitions" in out, out
    assert f"{topic}-0" in out and f"{topic}-1" in out, out
    wait_until(lambda: leaders() == [3, 1], "the preferred replicas leading", 20)
    again = tools.admin_tool(
        elect, "--election-type", "preferred", "--topic", topic, "--partition", "0"
    )
    assert f"Valid replica already elected for partitions {topic}-0" in again, again


def test_perf_tools(tools: Tools, topic: str) -> None:
    tools.classic_topic(topic, 3)
    sent = tools.run(
        "org.apache.kafka.tools.ProducerPerformance", "--topic", topic, "--num-records", "2000",
        "--record-size", "100", "--throughput", "-1", "--command-config", str(tools.config),
        "--command-property", f"bootstrap.servers={tools.boot}", "acks=all",
    )  # fmt: skip
    summary = sent.strip().splitlines()[-1]
    assert summary.startswith("2000 records sent,"), sent
    consumer = Consumer({**tools.admin_conf, "group.id": "watermarks"})
    try:
        ends = [consumer.get_watermark_offsets(TopicPartition(topic, p))[1] for p in range(3)]
    finally:
        consumer.close()
    assert sum(ends) == 2000, ends

    read = tools.admin_tool(
        "org.apache.kafka.tools.ConsumerPerformance", "--topic", topic, "--num-records", "2000",
        "--timeout", "60000",
    )  # fmt: skip
    header, row = [line for line in read.splitlines() if "," in line][-2:]
    names, values = header.split(","), row.split(",")
    assert len(names) == len(values), read
    fields = {n.strip(): v.strip() for n, v in zip(names, values, strict=True)}
    assert fields["data.consumed.in.nMsg"] == "2000", read


def json_lines(out: str) -> list[dict[str, Any]]:
    """The events the verifiable clients print, one JSON object a line."""
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_verifiable_producer_and_consumer(tools: Tools, topic: str) -> None:
    tools.classic_topic(topic, 2)
    out = tools.admin_tool(
        "org.apache.kafka.tools.VerifiableProducer", "--topic", topic, "--max-messages", "100",
        "--acks", "-1",
    )  # fmt: skip
    produced = json_lines(out)
    assert not [e for e in produced if e["name"] == "producer_send_error"], produced
    assert len([e for e in produced if e["name"] == "producer_send_success"]) == 100
    data = next(e for e in produced if e["name"] == "tool_data")
    assert (data["sent"], data["acked"]) == (100, 100), data

    group = f"verifiable-{uuid.uuid4().hex[:6]}"
    out = tools.admin_tool(
        "org.apache.kafka.tools.VerifiableConsumer", "--topic", topic, "--group-id", group,
        "--max-messages", "100", "--reset-policy", "earliest",
    )  # fmt: skip
    consumed = json_lines(out)
    assert sum(e["count"] for e in consumed if e["name"] == "records_consumed") == 100, consumed
    commits = [e for e in consumed if e["name"] == "offsets_committed"]
    assert commits and all(e["success"] for e in commits), commits

    # The group's committed offsets, read by another client: every partition consumed to
    # its end (the producer's sticky partitioner may have left one empty: nothing committed).
    reader = Consumer({**tools.admin_conf, "group.id": group})
    try:
        parts = [TopicPartition(topic, p) for p in range(2)]
        ends = [reader.get_watermark_offsets(tp)[1] for tp in parts]
        committed = [max(tp.offset, 0) for tp in reader.committed(parts, timeout=10)]
    finally:
        reader.close()
    assert committed == ends and sum(ends) == 100, (committed, ends)

    # kafka-consumer-groups on the group the verifiable consumer left: described with no
    # lag, rewound to the start, deleted.
    groups = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand"
    described = tools.admin_tool(groups, "--describe", "--group", group)
    rows = [line.split() for line in described.splitlines() if line.startswith(group)]
    # GROUP TOPIC PARTITION CURRENT-OFFSET LOG-END-OFFSET LAG ...
    lags = {int(r[2]): r[5] for r in rows}
    # A partition the producer left empty has no committed offset: shown as "-" if at all.
    assert {p: lag for p, lag in lags.items() if lag != "-"} == {
        p: "0" for p in range(2) if ends[p]
    }, described
    reset = tools.admin_tool(
        groups, "--reset-offsets", "--group", group, "--topic", topic, "--to-earliest",
        "--execute",
    )  # fmt: skip
    new_offsets = [line.split() for line in reset.splitlines() if line.startswith(group)]
    assert new_offsets and all(r[-1] == "0" for r in new_offsets), reset
    reader = Consumer({**tools.admin_conf, "group.id": group})
    try:
        rewound = reader.committed([TopicPartition(topic, p) for p in range(2)], timeout=10)
    finally:
        reader.close()
    assert [max(tp.offset, 0) for tp in rewound] == [0, 0], rewound
    deleted = tools.admin_tool(groups, "--delete", "--group", group)
    assert f"Deletion of requested consumer groups ('{group}') was successful." in deleted
    admin = tools.admin()
    listed = admin.list_consumer_groups().result(10).valid
    assert group not in {g.group_id for g in listed}


def test_metadata_quorum(tools: Tools) -> None:
    quorum = "org.apache.kafka.tools.MetadataQuorumCommand"
    status = tools.admin_tool(quorum, "describe", "--status")
    facts = dict(
        (key.strip(), value.strip())
        for key, value in (line.split(":", 1) for line in status.splitlines() if ":" in line)
    )
    controller = tools.cluster.active_controller()
    assert controller is not None
    raft = controller.status()  # the controller's own word, over its HTTPS API
    assert facts["LeaderId"] == str(raft["node_id"]), status
    assert facts["LeaderEpoch"] == str(raft["term"]), status
    # Read after the tool's answer: the quorum's commit index can only have grown since.
    assert 0 < int(facts["HighWatermark"]) <= raft["commit_index"], status
    assert facts["MaxFollowerLag"] == "0", status
    admin = tools.admin()
    assert facts["ClusterId"] == admin.describe_cluster().result(10).cluster_id, status
    assert f'"id": {raft["node_id"]}' in facts["CurrentVoters"], status

    replication = tools.admin_tool(quorum, "describe", "--replication")
    rows = [line.split() for line in replication.splitlines()[1:] if line.strip()]
    assert [(r[0], r[-1]) for r in rows] == [(str(raft["node_id"]), "Leader")], replication


def test_features_and_cluster(tools: Tools) -> None:
    admin = tools.admin()
    cluster_id = admin.describe_cluster().result(10).cluster_id
    cluster_tool = "org.apache.kafka.tools.ClusterTool"
    login = ("--bootstrap-server", tools.boot, "--command-config", str(tools.config))
    out = tools.run(cluster_tool, "cluster-id", *login)  # the subcommand first
    assert out.strip() == f"Cluster ID: {cluster_id}", out

    # Sluice advertises one feature flag, transaction.version (finalized at 2 by default:
    # KIP-890 part 2, docs/compatibility-and-limits.md). kafka-features changes it through
    # UpdateFeatures: the controllers record the level, and every broker then finalizes it.
    features = "org.apache.kafka.tools.FeatureCommand"

    def described(bootstrap: str = tools.boot) -> str:
        out = tools.run(features, "--bootstrap-server", bootstrap, *login[2:], "describe")
        listed = [line for line in out.splitlines() if line]
        assert len(listed) == 1 and "Feature: transaction.version" in listed[0], listed
        assert "SupportedMinVersion: 0" in listed[0], listed
        assert "SupportedMaxVersion: 2" in listed[0], listed
        return listed[0]

    assert "FinalizedVersionLevel: 2" in described()
    dry = tools.admin_tool(features, "downgrade", "--feature", "transaction.version=1", "--dry-run")
    assert "transaction.version can be downgraded to 1" in dry, dry
    assert "FinalizedVersionLevel: 2" in described()
    refused = tools.admin_tool(features, "upgrade", "--feature", "transaction.version=1", ok=False)
    assert "Can't downgrade the version of this feature" in refused, refused
    refused = tools.admin_tool(features, "upgrade", "--feature", "group.version=1", ok=False)
    assert "does not support this feature" in refused, refused
    out = tools.admin_tool(features, "downgrade", "--feature", "transaction.version=1")
    assert "transaction.version was downgraded to 1" in out, out
    for broker in tools.cluster.bootstrap.split(","):  # each broker's own ApiVersions
        wait_until(
            lambda b=broker: "FinalizedVersionLevel: 1" in described(b),
            f"{broker} finalizes transaction.version 1",
            30,
        )
    out = tools.admin_tool(features, "upgrade", "--feature", "transaction.version=2")
    assert "transaction.version was upgraded to 2" in out, out
    assert "FinalizedVersionLevel: 2" in described()

    # kafka-cluster unregister reaches the controllers (UnregisterBroker, forwarded as a
    # Kafka broker forwards it): an id never registered is Kafka's error; a broker taken
    # out of service is removed for good, and Metadata no longer lists it.
    refused = tools.run(cluster_tool, "unregister", *login, "--id", "99", ok=False)
    assert "BrokerIdNotRegisteredException" in refused, refused
    tools.cluster.broker(3).stop()
    out = tools.run(cluster_tool, "unregister", *login, "--id", "3")
    assert "Broker 3 is no longer registered." in out, out
    wait_until(
        lambda: sorted(n.id for n in admin.describe_cluster().result(10).nodes) == [1, 2],
        "broker 3 gone from the cluster",
        30,
    )
