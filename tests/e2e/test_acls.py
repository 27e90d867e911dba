"""ACLs end to end with stock clients on `sluice dev` with Kafka's StandardAuthorizer setting.

On a PLAINTEXT listener every client is ``User:ANONYMOUS``, so each test runs in two phases
on one data directory: first as an administrator (``super.users=User:ANONYMOUS``) creating
topics, data and ACLs, then restarted without super users, where ANONYMOUS gets exactly
what the ACLs grant it (directly or through the ``User:*`` wildcard principal). The restart
also shows the ACLs are kept in the metadata log.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import (
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicCollection,
    TopicPartition,
)
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    NewPartitions,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from ._kafka import Msg, confluent_consume, confluent_produce
from ._secure import AUTHORIZER
from .conftest import SluiceBroker

pytestmark = pytest.mark.e2e

ANONYMOUS = "User:ANONYMOUS"
EVERYONE = "User:*"
TOPIC_DENIED = KafkaError.TOPIC_AUTHORIZATION_FAILED  # 29
GROUP_DENIED = KafkaError.GROUP_AUTHORIZATION_FAILED  # 30
CLUSTER_DENIED = KafkaError.CLUSTER_AUTHORIZATION_FAILED  # 31
TXN_DENIED = KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED  # 53
ALL_ACLS = AclBindingFilter(
    ResourceType.ANY,
    None,
    ResourcePatternType.ANY,
    None,
    None,
    AclOperation.ANY,
    AclPermissionType.ANY,
)


class Secured:
    """One `sluice dev` data directory, run first as admin, then as an ordinary principal."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.broker: SluiceBroker | None = None

    def start(self, **options: str) -> SluiceBroker:
        port = None
        if self.broker is not None:
            port = self.broker.port
            self.broker.stop()
        self.broker = SluiceBroker(self.root, options={**AUTHORIZER, **options}, port=port)
        self.broker.start()
        return self.broker

    def as_admin(self, **options: str) -> AdminClient:
        broker = self.start(**{"super.users": ANONYMOUS, **options})
        return AdminClient({"bootstrap.servers": broker.bootstrap})

    def as_user(self, **options: str) -> AdminClient:
        broker = self.start(**options)
        return AdminClient({"bootstrap.servers": broker.bootstrap})

    @property
    def bootstrap(self) -> str:
        assert self.broker is not None
        return self.broker.bootstrap


@pytest.fixture
def secured(tmp_path: Path) -> Iterator[Secured]:
    s = Secured(tmp_path / "secured")
    try:
        yield s
    finally:
        if s.broker is not None:
            with contextlib.suppress(Exception):
                s.broker.stop()


def allow(
    name: str,
    operation: AclOperation,
    principal: str = ANONYMOUS,
    rtype: ResourceType = ResourceType.TOPIC,
    pattern: ResourcePatternType = ResourcePatternType.LITERAL,
    permission: AclPermissionType = AclPermissionType.ALLOW,
) -> AclBinding:
    return AclBinding(rtype, name, pattern, principal, "*", operation, permission)


def create_acls(admin: AdminClient, acls: list[AclBinding]) -> None:
    for future in admin.create_acls(acls, request_timeout=15).values():
        future.result(20)


def create_topics(admin: AdminClient, *names: str) -> None:
    import time

    # A broker listens a moment before its first heartbeat unfences it; until then the
    # controller cannot place replicas (INVALID_REPLICATION_FACTOR): ask again.
    deadline = time.monotonic() + 10
    pending = list(names)
    while pending:
        futures = admin.create_topics([NewTopic(n, 1) for n in pending], operation_timeout=15)
        for name, future in futures.items():
            try:
                future.result(20)
            except KafkaException as exc:
                unplaced = exc.args[0].code() == KafkaError.INVALID_REPLICATION_FACTOR
                if not unplaced or time.monotonic() > deadline:
                    raise
                continue
            pending.remove(name)
        if pending:
            time.sleep(0.2)


def code_of(call: Callable[[], Any]) -> int:
    """The Kafka error code a client call failed with."""
    with pytest.raises(KafkaException) as failure:
        call()
    return int(failure.value.args[0].code())


def produce_error(bootstrap: str, topic: str, **conf: Any) -> int | None:
    """Produce one record; the delivery error code, or None when it was written."""
    producer = Producer({"bootstrap.servers": bootstrap, "message.timeout.ms": 10000, **conf})
    outcome: list[KafkaError | None] = []
    producer.produce(topic, b"v", on_delivery=lambda err, _msg: outcome.append(err))
    producer.flush(15)
    assert outcome, "no delivery report"
    return None if outcome[0] is None else int(outcome[0].code())


def consume_error(consumer: Consumer, expected: int, timeout: float = 15) -> int:
    """Poll until the consumer reports ``expected`` (returned), failing with what it did
    report otherwise. (A consumer with a group.id also reports its group's errors.)"""
    import time

    seen = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is not None:
            code = int(msg.error().code())
            if code == expected:
                return code
            seen.append(code)
    raise AssertionError(f"the consumer reported {seen}, not {expected}")


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


# ---------------------------------------------------------------- the ACL APIs themselves


def test_acl_apis_with_confluent_and_kafka_python(secured: Secured) -> None:
    from kafka.admin import (
        ACL,
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePattern,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType

    admin = secured.as_admin()
    literal = allow("orders", AclOperation.READ, "User:alice")
    prefixed = allow("fam-", AclOperation.WRITE, EVERYONE, pattern=ResourcePatternType.PREFIXED)
    group = allow("g1", AclOperation.READ, "User:bob", rtype=ResourceType.GROUP)
    create_acls(admin, [literal, prefixed, group])
    create_acls(admin, [literal])  # an existing ACL again: a no-op
    assert sorted(map(str, admin.describe_acls(ALL_ACLS).result(10))) == sorted(
        map(str, [literal, prefixed, group])
    )
    # MATCH: every ACL that applies to the topic fam-x (the prefixed one).
    match = AclBindingFilter(
        ResourceType.TOPIC,
        "fam-x",
        ResourcePatternType.MATCH,
        None,
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert admin.describe_acls(match).result(10) == [prefixed]
    by_alice = AclBindingFilter(
        ResourceType.ANY,
        None,
        ResourcePatternType.ANY,
        "User:alice",
        None,
        AclOperation.ANY,
        AclPermissionType.ANY,
    )
    assert admin.describe_acls(by_alice).result(10) == [literal]
    # An ACL that cannot be stored is refused with INVALID_REQUEST (42), the others kept.
    bad = AclBinding(
        ResourceType.TOPIC,
        "x",
        ResourcePatternType.LITERAL,
        "alice",  # not Type:name
        "*",
        AclOperation.READ,
        AclPermissionType.ALLOW,
    )
    assert code_of(lambda: create_acls(admin, [bad])) == 42

    # kafka-python's admin client speaks the same APIs.
    kadmin = KafkaAdminClient(bootstrap_servers=secured.bootstrap)
    try:
        acl = ACL(
            "User:carol",
            "*",
            ACLOperation.DESCRIBE,
            ACLPermissionType.DENY,
            ResourcePattern(KResourceType.TRANSACTIONAL_ID, "tx-", ACLResourcePatternType.PREFIXED),
        )
        created = kadmin.create_acls([acl])
        assert created["failed"] == [] and len(created["succeeded"]) == 1
        carol = ACLFilter(
            principal="User:carol",
            host=None,
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(
                KResourceType.ANY, None, ACLResourcePatternType.ANY
            ),
        )
        found, error = kadmin.describe_acls(carol)
        assert error.errno == 0 and [str(a) for a in found] == [str(acl)]
        deleted = kadmin.delete_acls([carol])
        assert len(deleted) == 1 and len(deleted[0][1]) == 1
    finally:
        kadmin.close()

    # DeleteAcls answers with what it removed; the rest stays, across a restart too.
    removed = admin.delete_acls([by_alice])[by_alice].result(10)
    assert removed == [literal]
    admin = secured.as_admin()
    assert sorted(map(str, admin.describe_acls(ALL_ACLS).result(10))) == sorted(
        map(str, [prefixed, group])
    )


def test_acl_apis_without_an_authorizer_say_security_disabled(broker: SluiceBroker) -> None:
    from kafka.errors import SecurityDisabledError

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    acl = allow("t", AclOperation.READ)
    assert code_of(lambda: create_acls(admin, [acl])) == 54
    # (librdkafka turns DescribeAcls' top-level error into an empty list: kafka-python.)
    with pytest.raises(SecurityDisabledError):
        kafka_python_describe_acls(broker.bootstrap)


def kafka_python_describe_acls(bootstrap: str) -> list[Any]:
    from kafka.admin import (
        ACLFilter,
        ACLOperation,
        ACLPermissionType,
        ACLResourcePatternType,
        KafkaAdminClient,
        ResourcePatternFilter,
    )
    from kafka.admin import ResourceType as KResourceType

    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        every = ACLFilter(
            principal=None,
            host=None,
            operation=ACLOperation.ANY,
            permission_type=ACLPermissionType.ANY,
            resource_pattern=ResourcePatternFilter(
                KResourceType.ANY, None, ACLResourcePatternType.ANY
            ),
        )
        found, _error = kadmin.describe_acls(every)
        return list(found)
    finally:
        kadmin.close()


# ---------------------------------------------------------------- no ACLs: nothing allowed


def test_a_principal_without_acls_may_do_nothing(secured: Secured) -> None:
    topic, group, other = unique("t"), unique("g"), unique("t")
    admin = secured.as_admin()
    create_topics(admin, topic)
    confluent_produce(secured.bootstrap, topic, [Msg(b"k", b"v", ())])
    consumer = Consumer(
        {"bootstrap.servers": secured.bootstrap, "group.id": group, "enable.auto.commit": False}
    )
    consumer.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    consumer.close()

    admin = secured.as_user()
    bootstrap = secured.bootstrap
    # Metadata: the topic is hidden from a listing, and refused by name.
    assert topic not in admin.list_topics(timeout=10).topics
    assert admin.list_topics(topic, timeout=10).topics[topic].error.code() == TOPIC_DENIED
    # Produce (Fetch: see the DENY case below, where Metadata is allowed).
    assert produce_error(bootstrap, topic) == TOPIC_DENIED
    # Topic administration.
    assert code_of(lambda: create_topics(admin, other)) == TOPIC_DENIED
    assert code_of(lambda: admin.delete_topics([topic])[topic].result(10)) == TOPIC_DENIED
    more = admin.create_partitions([NewPartitions(topic, 3)])
    assert code_of(lambda: more[topic].result(10)) == TOPIC_DENIED
    resource = ConfigResource("topic", topic)
    assert code_of(lambda: admin.describe_configs([resource])[resource].result(10)) == TOPIC_DENIED
    # Groups: membership, offsets, listing, describing, deleting.
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    member.subscribe([topic])
    assert consume_error(member, GROUP_DENIED) == GROUP_DENIED
    member.close()
    listed = admin.list_consumer_groups().result(10)
    assert group not in {g.group_id for g in listed.valid}
    described = admin.describe_consumer_groups([group])[group]
    assert code_of(lambda: described.result(10)) == GROUP_DENIED
    assert code_of(lambda: admin.delete_consumer_groups([group])[group].result(10)) == GROUP_DENIED
    # Cluster-level APIs: ACLs, the cluster's authorized operations.
    from kafka.errors import ClusterAuthorizationFailedError

    with pytest.raises(ClusterAuthorizationFailedError):
        kafka_python_describe_acls(bootstrap)
    acl = allow(topic, AclOperation.ALL)
    assert code_of(lambda: create_acls(admin, [acl])) == CLUSTER_DENIED
    # No cluster operation is allowed (librdkafka describes the cluster with Metadata).
    cluster = admin.describe_cluster(include_authorized_operations=True).result(10)
    assert not cluster.authorized_operations
    # Transactions and idempotence.
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx")})
    assert code_of(lambda: txn.init_transactions(10)) == TXN_DENIED
    # An idempotent producer's InitProducerId needs IDEMPOTENT_WRITE (or a topic WRITE).
    idempotent = Producer({"bootstrap.servers": bootstrap, "enable.idempotence": True})

    def acquire_pid() -> None:
        # It asks for its producer id at start; librdkafka raises the fatal refusal here.
        for _ in range(20):
            idempotent.poll(0.5)

    assert code_of(acquire_pid) == CLUSTER_DENIED


def test_kafka_python_sees_the_same_refusals(secured: Secured) -> None:
    from kafka.admin import KafkaAdminClient
    from kafka.errors import (
        ClusterAuthorizationFailedError,
        GroupAuthorizationFailedError,
        TransactionalIdAuthorizationFailedError,
    )

    topic, group = unique("t"), unique("g")
    create_topics(secured.as_admin(), topic)
    secured.as_user()
    kadmin = KafkaAdminClient(bootstrap_servers=secured.bootstrap)
    try:
        assert topic not in kadmin.list_topics()
        with pytest.raises(GroupAuthorizationFailedError):  # FindCoordinator / OffsetFetch
            kadmin.list_group_offsets(group)
        # DescribeCluster answers everyone, as Kafka (only authorized operations withheld).
        assert kadmin.describe_cluster()["cluster_id"]
        with pytest.raises(ClusterAuthorizationFailedError):
            kadmin.list_partition_reassignments()
        with pytest.raises(TransactionalIdAuthorizationFailedError):
            kadmin.describe_transactions([unique("tx")])
    finally:
        kadmin.close()


# ---------------------------------------------------------------- grants


def test_prefixed_literal_wildcard_and_deny(secured: Secured) -> None:
    fam = unique("fam")
    mine, denied, shared, hidden = f"{fam}-a", f"{fam}-b", unique("shared"), unique("hidden")
    group = f"{fam}-group"
    admin = secured.as_admin()
    create_topics(admin, mine, denied, shared, hidden)
    prefixed = ResourcePatternType.PREFIXED
    create_acls(
        admin,
        [
            allow(f"{fam}-", AclOperation.WRITE, pattern=prefixed),
            allow(f"{fam}-", AclOperation.READ, pattern=prefixed),
            allow(f"{fam}-", AclOperation.READ, rtype=ResourceType.GROUP, pattern=prefixed),
            allow(f"{fam}-auto-", AclOperation.CREATE, pattern=prefixed),
            allow(
                f"{fam}-", AclOperation.WRITE, rtype=ResourceType.TRANSACTIONAL_ID, pattern=prefixed
            ),
            # Everyone may describe the shared topic; nobody may read the denied one.
            allow(shared, AclOperation.DESCRIBE, EVERYONE),
            allow(denied, AclOperation.READ, EVERYONE, permission=AclPermissionType.DENY),
        ],
    )
    admin = secured.as_user()
    bootstrap = secured.bootstrap

    # Listing shows what may be described: the family (WRITE implies DESCRIBE) and shared.
    listed = set(admin.list_topics(timeout=10).topics)
    assert {mine, denied, shared} <= listed and hidden not in listed
    # The family: produce and consume through a group, with committed offsets.
    confluent_produce(bootstrap, mine, [Msg(b"k", b"v", ())] * 3)
    got = confluent_consume(bootstrap, mine, expected=3, **{"group.id": group})
    assert len(got) == 3
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "enable.auto.commit": False,
        }
    )
    consumer.subscribe([mine])
    seen = 0
    import time

    deadline = time.monotonic() + 30
    while seen < 3 and time.monotonic() < deadline:
        msg = consumer.poll(0.5)
        if msg is not None and msg.error() is None:
            seen += 1
    assert seen == 3
    consumer.commit(asynchronous=False)
    assert consumer.committed([TopicPartition(mine, 0)], timeout=10)[0].offset == 3
    consumer.close()
    # Group operations allowed by READ on the group: READ and DESCRIBE (KIP-430).
    group_info = admin.describe_consumer_groups([group], include_authorized_operations=True)[
        group
    ].result(10)
    assert set(group_info.authorized_operations) == {AclOperation.READ, AclOperation.DESCRIBE}
    # A transaction: WRITE on the transactional id and the topic, READ on the group.
    txn = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"{fam}-tx"})
    txn.init_transactions(15)
    txn.begin_transaction()
    txn.produce(mine, b"in-txn", partition=0)
    member = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    txn.send_offsets_to_transaction(
        [TopicPartition(mine, 0, 3)], member.consumer_group_metadata(), 15
    )
    txn.commit_transaction(15)
    member.close()
    # DENY wins over the prefixed ALLOW: writing is fine, reading is not.
    assert produce_error(bootstrap, denied) is None
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    reader.assign([TopicPartition(denied, 0, 0)])
    assert consume_error(reader, TOPIC_DENIED) == TOPIC_DENIED
    reader.close()
    # DESCRIBE alone does not allow writing, reading or deleting records.
    assert produce_error(bootstrap, shared) == TOPIC_DENIED
    reader = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    reader.assign([TopicPartition(shared, 0, 0)])
    assert consume_error(reader, TOPIC_DENIED) == TOPIC_DENIED
    reader.close()
    records = admin.delete_records([TopicPartition(shared, 0, 0)])
    assert code_of(lambda: records[TopicPartition(shared, 0, 0)].result(10)) == TOPIC_DENIED
    from kafka import TopicPartition as KTopicPartition
    from kafka.admin import KafkaAdminClient
    from kafka.errors import TopicAuthorizationFailedError

    kadmin = KafkaAdminClient(bootstrap_servers=bootstrap)
    try:
        with pytest.raises(TopicAuthorizationFailedError):  # DescribeProducers needs READ
            kadmin.describe_producers([KTopicPartition(shared, 0)])
    finally:
        kadmin.close()
    # WRITE on some topic lets a producer be idempotent (KIP-679).
    assert produce_error(bootstrap, mine, **{"enable.idempotence": True}) is None
    # Auto-creation needs CREATE: granted for the fam-auto- family only.
    assert produce_error(bootstrap, f"{fam}-auto-x") is None
    assert produce_error(bootstrap, f"{fam}-other-x") == TOPIC_DENIED

    # KIP-430 authorized operations, filled from the ACLs.
    described = admin.describe_topics(TopicCollection([mine]), include_authorized_operations=True)[
        mine
    ].result(10)
    assert set(described.authorized_operations) == {
        AclOperation.READ,
        AclOperation.WRITE,
        AclOperation.DESCRIBE,
    }


def test_super_user_and_allow_everyone(secured: Secured) -> None:
    topic, open_topic = unique("t"), unique("open")
    admin = secured.as_admin()
    create_topics(admin, topic, open_topic)
    # A DENY for the super user itself does not stop it.
    create_acls(admin, [allow("*", AclOperation.ALL, permission=AclPermissionType.DENY)])
    assert produce_error(secured.bootstrap, topic) is None
    admin.delete_acls([ALL_ACLS])[ALL_ACLS].result(10)
    create_acls(admin, [allow(topic, AclOperation.READ, "User:alice")])

    # allow.everyone.if.no.acl.found: resources without any ACL are open, the others not.
    secured.as_user(**{"allow.everyone.if.no.acl.found": "true"})
    assert produce_error(secured.bootstrap, open_topic) is None
    assert produce_error(secured.bootstrap, topic) == TOPIC_DENIED
