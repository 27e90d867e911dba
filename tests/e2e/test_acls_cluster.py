"""ACLs live in the controllers' metadata log: they survive the loss of the active controller
and reach a broker started afterwards, which enforces them (three controllers, PostgreSQL,
SeaweedFS; stock clients only)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclOperation,
    AclPermissionType,
    AdminClient,
    NewTopic,
    ResourcePatternType,
    ResourceType,
)

from sluice.cluster import BrokerProcess, LocalCluster
from sluice.launch.process import free_port
from tests.fixtures.cluster import FAST_LIVENESS, running_cluster

from ._kafka import wait_until
from ._secure import with_authorizer
from .test_acls import ALL_ACLS, TOPIC_DENIED, kafka_python_describe_acls, produce_error

pytestmark = pytest.mark.e2e

ANONYMOUS = "User:ANONYMOUS"
ADMIN_OPTIONS = {**FAST_LIVENESS, **with_authorizer(ANONYMOUS)}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(
        tmp_path_factory, "acls", brokers=1, broker_options=ADMIN_OPTIONS, controllers=3
    ) as c:
        yield c


def grant(
    name: str, operation: AclOperation, rtype: ResourceType = ResourceType.TOPIC
) -> AclBinding:
    return AclBinding(
        rtype, name, ResourcePatternType.LITERAL, ANONYMOUS, "*", operation, AclPermissionType.ALLOW
    )


def wait_for_new_leader(cluster: LocalCluster, old: int, timeout: float = 15) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        active = cluster.active_controller()
        if active is not None and active.node_id != old:
            return active.node_id
        time.sleep(0.05)
    raise AssertionError("no new active controller")


def test_acls_survive_failover_and_reach_a_later_broker(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    visible, hidden = f"vis-{uuid.uuid4().hex[:8]}", f"hid-{uuid.uuid4().hex[:8]}"
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap})

    def created() -> bool:
        # The broker is fenced until its first heartbeat reaches the controller.
        try:
            for future in admin.create_topics([NewTopic(visible, 1), NewTopic(hidden, 1)]).values():
                future.result(20)
        except KafkaException as exc:
            return exc.args[0].code() == KafkaError.TOPIC_ALREADY_EXISTS
        return True

    wait_until(created, "topics created", 20)
    before = [grant(visible, AclOperation.READ), grant(visible, AclOperation.DESCRIBE)]
    for future in admin.create_acls(before, request_timeout=20).values():
        future.result(25)

    leader = cluster.active_controller()
    assert leader is not None
    leader.kill()
    wait_for_new_leader(cluster, leader.node_id)
    # A write after the failover: the broker finds the new active controller.
    # (confluent-kafka calls the CLUSTER resource type, 4, BROKER.)
    after = [grant("kafka-cluster", AclOperation.DESCRIBE, ResourceType.BROKER)]
    for future in admin.create_acls(after, request_timeout=20).values():
        future.result(25)
    expected = sorted(map(str, before + after))
    assert sorted(map(str, admin.describe_acls(ALL_ACLS).result(10))) == expected
    leader.start()

    # A broker started now, without super users, alone (the first one, where ANONYMOUS is
    # a super user, stopped): it learns the ACLs from the log and enforces them.
    first = cluster.brokers[0]
    first.stop()
    late = BrokerProcess(tmp_path_factory.mktemp("late-broker"), 7, free_port(), None)
    settings = cluster.broker_settings(late)
    del settings["super.users"]
    late.write_config(settings)
    late.start()
    try:
        # It caught up with the active controller before serving (the cluster DESCRIBE
        # granted after the failover lets it answer DescribeAcls).
        assert len(kafka_python_describe_acls(late.bootstrap)) == 3
        late_admin = AdminClient({"bootstrap.servers": late.bootstrap})
        listed = set(late_admin.list_topics(timeout=10).topics)
        assert visible in listed and hidden not in listed
        assert produce_error(late.bootstrap, visible) == TOPIC_DENIED  # READ is not WRITE
    finally:
        late.stop()
        first.start()
