"""Scale-out on one host: two broker processes on one machine, one PostgreSQL, one bucket.

The layouts docs/operations.md's "Several brokers on one host" describes, each with two
brokers in the host's rack:

- ``cluster-up``: started by `sluice.cluster.LocalCluster` exactly as
  ``sluice cluster up --brokers 2 --racks az-a`` starts them, without a controller (brokers
  register in the database) and with one;
- ``shared-config``: the production recipe, two ``sluice broker --config broker.properties``
  processes sharing ONE config file, told apart only by ``-o node.id=… -o port=…
  -o http.port=… -o data.dir=…``, on the suite's PostgreSQL and S3 fixtures.

A stock client bootstraps with both brokers; the partitions' leaders are spread over them, so
each broker takes its share of the produce traffic, and everything comes back exactly once.
No timing is asserted: the machine running this may be a busy 2-core box, and the point is
that both processes carry load, not how fast.
"""

from __future__ import annotations

import asyncio
import contextlib
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.launch.process import SluiceProcess, free_port
from tests.fixtures.cluster import FAST_LIVENESS, running_cluster
from tests.fixtures.postgres import PostgresServer
from tests.fixtures.s3 import S3Server

from ._kafka import assert_exactly_once, confluent_consume, stream_through, wait_until

pytestmark = pytest.mark.e2e

PARTITIONS = 4
RECORDS = 3000


@dataclass
class Broker:
    node_id: int
    bootstrap: str
    metrics: Callable[[], dict[str, float]]


def _scrape(http_port: int) -> dict[str, float]:
    """Unlabelled samples and the Produce request counter of a broker's /metrics."""
    from prometheus_client.parser import text_string_to_metric_families

    url = f"http://127.0.0.1:{http_port}/metrics"
    with urllib.request.urlopen(url, timeout=5) as response:
        text = response.read().decode()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if not s.labels:
                out[s.name] = s.value
            elif s.name == "sluice_requests_total" and s.labels == {"api": "Produce"}:
                out["produce_requests"] = s.value
    return out


@contextlib.contextmanager
def _cluster_up(
    tmp_path_factory: pytest.TempPathFactory, controllers: int
) -> Iterator[list[Broker]]:
    with running_cluster(
        tmp_path_factory,
        "scale-out",
        2,
        racks=("az-a",),
        broker_options=FAST_LIVENESS,
        controllers=controllers,
    ) as cluster:
        yield [
            Broker(b.node_id, b.bootstrap, lambda b=b: _scrape(b.http_port))
            for b in cluster.brokers
        ]


@contextlib.contextmanager
def _shared_config(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: PostgresServer,
    s3_server: S3Server,
) -> Iterator[list[Broker]]:
    root = tmp_path_factory.mktemp("scale-out-shared")
    dsn = asyncio.run(postgres_server.new_database())
    bucket = s3_server.new_bucket()
    shared = {
        "object.store": "s3",
        "s3.endpoint": s3_server.endpoint_url,
        "s3.region": s3_server.region,
        "s3.bucket": bucket,
        "s3.access.key": s3_server.access_key,
        "s3.secret.key": s3_server.secret_key,
        "coordinator": "postgresql",
        "coordinator.dsn": dsn,
        "broker.rack": "az-a",
        **FAST_LIVENESS,
    }
    config = root / "broker.properties"
    config.write_text("".join(f"{k}={v}\n" for k, v in shared.items()))
    config.chmod(0o600)
    processes: list[tuple[SluiceProcess, int]] = []
    try:
        for node_id in (1, 2):
            port, http_port = free_port(), free_port()
            # What differs between the processes of one host, and nothing else.
            per_process = {
                "node.id": node_id,
                "port": port,
                "http.port": http_port,
                "data.dir": root / f"broker-{node_id}",
            }
            args = ["broker", "--config", str(config)]
            for key, value in per_process.items():
                args += ["-o", f"{key}={value}"]
            p = SluiceProcess(args, Path(root / f"broker-{node_id}.log"), port)
            p.start(wait=False)
            processes.append((p, http_port))
        for p, _ in processes:
            p.wait_ready(60)
        yield [
            Broker(i, p.bootstrap, lambda h=h: _scrape(h))
            for i, (p, h) in enumerate(processes, start=1)
        ]
    finally:
        for p, _ in processes:
            with contextlib.suppress(Exception):
                p.stop()
        with contextlib.suppress(Exception):
            asyncio.run(postgres_server.drop_database(dsn))


@pytest.fixture(params=["cluster-up", "cluster-up-controller", "shared-config"], scope="module")
def two_brokers(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[Broker]]:
    if request.param == "shared-config":
        pg = request.getfixturevalue("postgres_server")
        s3 = request.getfixturevalue("s3_server")
        with _shared_config(tmp_path_factory, pg, s3) as brokers:
            yield brokers
    else:
        controllers = 1 if request.param == "cluster-up-controller" else 0
        with _cluster_up(tmp_path_factory, controllers) as brokers:
            yield brokers


def _brokers_seen(bootstrap: str) -> set[int]:
    md = AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=10)
    return set(md.brokers)


def test_two_brokers_on_one_host_share_produce_and_lose_nothing(
    two_brokers: list[Broker], topic: str
) -> None:
    ids = {b.node_id for b in two_brokers}
    bootstrap = ",".join(b.bootstrap for b in two_brokers)
    # Each broker learns of the other through the database (or the controller); until then
    # it would name itself leader of everything. Generous: the machine may be busy.
    for b in two_brokers:
        wait_until(lambda b=b: _brokers_seen(b.bootstrap) == ids, f"broker {b.node_id} sees both")

    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, replication_factor=1)])[topic].result(30)

    def leaders() -> set[int]:
        md = admin.list_topics(topic, timeout=10).topics[topic]
        return {p.leader for p in md.partitions.values()}

    # Both brokers lead some partitions.
    wait_until(lambda: leaders() == ids, "leaders spread over both brokers")

    before = {b.node_id: b.metrics() for b in two_brokers}
    # An idempotent acks=all stream through the bootstrap list naming both brokers; nothing
    # is disrupted: this is the steady state of a scaled-out host.
    stream = stream_through(bootstrap, topic, RECORDS, lambda: None)
    after = {b.node_id: b.metrics() for b in two_brokers}

    # Every record exactly once, read through the second broker alone (it names the first
    # in Metadata, and the consumer fetches each partition from its leader).
    got = confluent_consume(
        two_brokers[1].bootstrap, topic, partitions=range(PARTITIONS), expected=RECORDS
    )
    assert_exactly_once(stream, got, PARTITIONS)

    # And each broker really served produce traffic: its own requests and its own commits.
    for node_id in sorted(ids):
        for counter in ("produce_requests", "sluice_produced_bytes_total"):
            grew = after[node_id].get(counter, 0.0) - before[node_id].get(counter, 0.0)
            assert grew > 0, f"broker {node_id}: {counter} did not grow"
