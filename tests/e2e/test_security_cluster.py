"""`sluice cluster up --secure`: SASL_SSL brokers, HTTPS to a three-voter controller quorum,
and SCRAM credentials that live in the metadata log: made through one broker, they survive
the active controller's death and work on a broker that starts only afterwards."""

from __future__ import annotations

import signal
import ssl
import time
from collections.abc import Iterator

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AdminClient,
    ScramCredentialInfo,
    ScramMechanism,
    UserScramCredentialUpsertion,
)
from kafka.admin import (
    ACL,
    ACLOperation,
    ACLPermissionType,
    ACLResourcePatternType,
    KafkaAdminClient,
    ResourcePattern,
    ResourceType,
)
from kafka.admin import ScramMechanism as KpScramMechanism
from kafka.admin import UserScramCredentialUpsertion as KpUpsertion

from sluice.cluster import LocalCluster
from tests.fixtures.cluster import fast_cluster

from ._kafka import unique_topic, wait_until
from ._secure import (
    cluster_admin_conf,
    confluent_roundtrip,
    connect_errors,
    expected,
    python_sasl_conf,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with fast_cluster(
        tmp_path_factory,
        "secure",
        brokers=2,
        racks=("az-a",),
        controllers=3,
        secure=True,
    ) as c:
        yield c


def test_secure_cluster_serves_only_authenticated_tls_clients(cluster: LocalCluster) -> None:
    bootstrap = cluster.brokers[0].bootstrap
    topic = unique_topic("secure")
    assert confluent_roundtrip(cluster_admin_conf(cluster, bootstrap), topic, 5) == expected(5)
    # Plaintext is not served at all, and a wrong password is refused.
    down = (KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN)
    _, errors = connect_errors({"bootstrap.servers": bootstrap}, lambda e: e.code() in down)
    assert any(e.code() in down for e in errors), errors
    wrong = {**cluster_admin_conf(cluster, bootstrap), "sasl.password": "nope"}
    _, errors = connect_errors(wrong, lambda e: e.code() == KafkaError._AUTHENTICATION)
    assert any(e.code() == KafkaError._AUTHENTICATION for e in errors), errors
    # The generated password is nowhere in the processes' logs.
    for process in [*cluster.brokers, *cluster.controllers]:
        assert cluster.tls.admin_password() not in process.log_path.read_text(errors="replace")


def test_credentials_survive_controller_failover_and_reach_a_later_broker(
    cluster: LocalCluster,
) -> None:
    first, later = cluster.brokers
    later.stop()
    context = ssl.create_default_context(cafile=str(cluster.tls.ca))
    admin = KafkaAdminClient(
        **python_sasl_conf(
            first.bootstrap,
            "SCRAM-SHA-512",
            "admin",
            cluster.tls.admin_password(),
            ssl_context=context,
        )
    )
    try:
        admin.alter_user_scram_credentials(
            [KpUpsertion("erin", KpScramMechanism.SCRAM_SHA_512, "erin-pw", iterations=4096)]
        )
        # --secure runs the StandardAuthorizer: erin may use what admin grants her (ACLs
        # live in the metadata log too, so the later broker learns them as well).
        grants = [
            ACL(
                "User:erin",
                "*",
                ACLOperation.ALL,
                ACLPermissionType.ALLOW,
                ResourcePattern(kind, prefix, ACLResourcePatternType.PREFIXED),
            )
            for kind, prefix in ((ResourceType.TOPIC, "erin-"), (ResourceType.GROUP, "g-"))
        ]
        assert not admin.create_acls(grants)["failed"]
    finally:
        admin.close()

    active = cluster.active_controller()
    assert active is not None
    active.proc.send_signal(signal.SIGKILL)  # type: ignore[union-attr]
    active.proc.wait(10)  # type: ignore[union-attr]
    wait_until(
        lambda: (c := cluster.active_controller()) is not None and c is not active,
        "a new active controller",
        20,
    )
    later.start()
    erin = {
        **cluster_admin_conf(cluster, later.bootstrap),
        "sasl.username": "erin",
        "sasl.password": "erin-pw",
    }
    started = time.monotonic()
    assert confluent_roundtrip(erin, unique_topic("erin"), 5) == expected(5)
    assert time.monotonic() - started < 60
    # ... but erin cannot take admin over: a credential change needs ALTER on the cluster.
    takeover = UserScramCredentialUpsertion(
        "admin", ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096), b"taken-over"
    )
    erin_admin = AdminClient(erin)  # kept referenced: a collected client fails its futures
    future = erin_admin.alter_user_scram_credentials([takeover])["admin"]
    with pytest.raises(KafkaException) as refused:
        future.result(timeout=30)
    assert refused.value.args[0].code() == KafkaError.CLUSTER_AUTHORIZATION_FAILED
    admin_conf = cluster_admin_conf(cluster, later.bootstrap)
    assert confluent_roundtrip(admin_conf, unique_topic("admin"), 1) == expected(1)
    active.start()  # back to three voters for whatever runs next
