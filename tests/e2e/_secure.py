"""Shared setup of the security and classic-cluster e2e tests: the authorizer settings, client
settings for the SASL and TLS listeners (confluent-kafka's, and kafka-python's / aiokafka's),
the three-broker classic cluster, and the produce-then-consume round trip the security tests
check a listener with."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.cluster import LocalCluster
from tests.fixtures.cluster import fast_cluster

from ._kafka import unique_topic, wait_until

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
AUTHORIZER = {"authorizer.class.name": STANDARD_AUTHORIZER}
RACKS = ("az-a", "az-b", "az-c")


def with_authorizer(super_users: str) -> dict[str, str]:
    """Broker settings: Kafka's StandardAuthorizer, ``super_users`` exempt from ACLs."""
    return {**AUTHORIZER, "super.users": super_users}


# ---------------------------------------------------------------- client settings


def sasl_conf(
    bootstrap: str,
    mechanism: str,
    user: str,
    password: str,
    ca: object | None = None,
) -> dict[str, Any]:
    """confluent-kafka's settings for a SASL login: over TLS (SASL_SSL) when ``ca`` (the CA
    file to check the broker against) is given, else over SASL_PLAINTEXT."""
    conf = {
        "bootstrap.servers": bootstrap,
        "security.protocol": "SASL_SSL" if ca is not None else "SASL_PLAINTEXT",
        "sasl.mechanisms": mechanism,
        "sasl.username": user,
        "sasl.password": password,
    }
    if ca is not None:
        conf["ssl.ca.location"] = str(ca)
    return conf


def python_sasl_conf(
    bootstrap: str, mechanism: str, user: str, password: str, **tls: Any
) -> dict[str, Any]:
    """kafka-python's and aiokafka's settings for a SASL login (they take the same keys);
    ``ssl_context=...`` makes it SASL_SSL."""
    return {
        "bootstrap_servers": bootstrap,
        "security_protocol": "SASL_SSL" if tls else "SASL_PLAINTEXT",
        "sasl_mechanism": mechanism,
        "sasl_plain_username": user,
        "sasl_plain_password": password,
        **tls,
    }


def kcat_args(conf: dict[str, Any]) -> list[str]:
    """kcat's command-line form of confluent-kafka settings (both are librdkafka's)."""
    args = ["-b", conf["bootstrap.servers"]]
    for key, value in conf.items():
        if key != "bootstrap.servers":
            args += ["-X", f"{key}={value}"]
    return args


def cluster_admin_conf(c: LocalCluster, bootstrap: str | None = None) -> dict[str, Any]:
    """The super user of a ``sluice cluster up --secure`` cluster (SCRAM-SHA-512 over
    SASL_SSL, the cluster's CA)."""
    return sasl_conf(
        bootstrap or c.bootstrap, "SCRAM-SHA-512", "admin", c.tls.admin_password(), c.tls.ca
    )


# ---------------------------------------------------------------- the classic cluster


@contextlib.contextmanager
def classic_cluster(
    tmp_path_factory: pytest.TempPathFactory,
    name: str,
    broker_options: dict[str, str] | None = None,
    secure: bool = False,
) -> Iterator[LocalCluster]:
    """Three brokers, one a rack, and one controller, quick to notice a dead broker and to
    retry a follower's fetch: a classic RF=3 topic has a replica in every rack."""
    with fast_cluster(
        tmp_path_factory,
        name,
        brokers=3,
        racks=RACKS,
        broker_options={
            "replica.fetch.backoff.ms": "200",
            **(broker_options or {}),
        },
        controllers=1,
        secure=secure,
    ) as c:
        yield c


def create_classic_rf3(
    admin: AdminClient, prefix: str, config: dict[str, str]
) -> tuple[str, int, list[int]]:
    """A new one-partition classic topic (with ``config`` besides) on brokers 1-3, once its
    ISR is full: (name, leader, replicas)."""
    topic = unique_topic(prefix)
    config = {"diskless.enable": "false", **config}
    admin.create_topics([NewTopic(topic, 1, 3, config=config)])[topic].result(20)

    def partition() -> tuple[int, list[int], list[int]]:
        p = admin.list_topics(topic, timeout=10).topics[topic].partitions[0]
        return p.leader, list(p.replicas), sorted(p.isrs)

    wait_until(lambda: partition()[2] == [1, 2, 3], "a full ISR", 20)
    leader, replicas, _ = partition()
    return topic, leader, replicas


# ---------------------------------------------------------------- round trips


def expected(n: int = 20) -> list[bytes]:
    return [f"v{i}".encode() for i in range(n)]


def confluent_roundtrip(conf: dict[str, Any], topic: str, n: int = 20) -> list[bytes]:
    """Produce n values and consume them back with the same client settings."""
    producer = Producer({**conf, "message.timeout.ms": 20000})
    for i in range(n):
        producer.produce(topic, f"v{i}".encode())
    assert producer.flush(30) == 0, "undelivered messages"
    consumer = Consumer({**conf, "group.id": unique_topic("g"), "auto.offset.reset": "earliest"})
    consumer.subscribe([topic])
    got: list[bytes] = []
    deadline = time.monotonic() + 30
    try:
        while len(got) < n and time.monotonic() < deadline:
            m = consumer.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise KafkaException(m.error())
            got.append(m.value())
    finally:
        consumer.close()
    return got


def connect_errors(
    conf: dict[str, Any], want: Callable[[KafkaError], bool], timeout: float = 10.0
) -> tuple[float, list[KafkaError]]:
    """Seconds until librdkafka reported an error ``want`` accepts, and the errors seen."""
    errors: list[KafkaError] = []
    admin = AdminClient({**conf, "error_cb": errors.append})
    started = time.monotonic()
    while time.monotonic() - started < timeout and not any(want(e) for e in errors):
        admin.poll(0.1)
    return time.monotonic() - started, errors


def is_auth_error(e: KafkaError) -> bool:
    return e.code() == KafkaError._AUTHENTICATION
