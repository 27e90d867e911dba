"""A diskless broker keeps acknowledging while its commits outlast the producers' request
timeout (issue 29's overload: long run #6 saw minutes without an acknowledgement).

One broker on PostgreSQL, reached through the nemesis's TCP fault proxy, and SeaweedFS. An
idempotent acks=all producer with librdkafka's request.timeout.ms at 1.5 s sends 500
records a second; for 20 s every chunk to and from PostgreSQL is delayed 0.4 s, so a commit
takes longer than the request timeout and the producer sends its batches again and again.
Before a retry waited for the first attempt's answer (broker/logs/diskless/diskless_append.py,
Appender.submit), each retry was written again into a later object, whose commit outlasted
the retry's own timeout in turn: no acknowledgement at all for the whole slow phase (27-30
s in /work/notes/overload runs, 2-3 s after)."""

from __future__ import annotations

import os
import tempfile
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic

from sluice.cluster import BUCKET, ExternalS3, LocalCluster
from sluice.launch.postgres import LocalPostgres
from sluice.launch.seaweedfs import LocalSeaweedFS

from .proxy import ProxyThread

pytestmark = [pytest.mark.e2e, pytest.mark.nemesis]

RATE = 500  # records a second
SLOW_FROM, SLOW_TO, SECONDS = 8.0, 28.0, 36.0


def test_acknowledgements_go_on_while_commits_outlast_the_request_timeout() -> None:
    root = Path(tempfile.mkdtemp(prefix="sluice-slow-coordinator-"))
    os.chmod(root, 0o755)  # PostgreSQL runs as the postgres user when we are root
    pg, seaweed, proxies = LocalPostgres(root / "pg"), LocalSeaweedFS(root / "sw"), ProxyThread()
    cluster: LocalCluster | None = None
    try:
        pg.start()
        seaweed.start()
        seaweed.create_bucket(BUCKET)
        proxies.start()
        assert pg.port is not None
        proxy = proxies.add("postgres", "127.0.0.1", pg.port)
        dsn = pg.dsn.replace(f"127.0.0.1:{pg.port}", f"127.0.0.1:{proxy.port}")
        s3 = ExternalS3(
            seaweed.endpoint_url, seaweed.access_key, seaweed.secret_key, seaweed.region
        )
        cluster = LocalCluster(root / "c", 1, ("az-a",), {}, postgres_dsn=dsn, s3=s3, controllers=1)
        cluster.up()
        topic = "slow-" + uuid.uuid4().hex[:6]
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic(topic, 6, 1)])[topic].result(timeout=30)
        producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap,
                "enable.idempotence": True,
                "acks": "all",
                "request.timeout.ms": 1500,
                "message.timeout.ms": 120_000,
                "linger.ms": 5,
            }
        )
        acked: list[float] = []
        errors: list[str] = []

        def delivered(err, _msg) -> None:  # type: ignore[no-untyped-def]
            if err is not None:
                errors.append(str(err))
            else:
                acked.append(time.monotonic())

        payload = os.urandom(1024)
        start = time.monotonic()
        sent, slow = 0, False
        while (now := time.monotonic() - start) < SECONDS:
            if not slow and SLOW_FROM <= now < SLOW_TO:
                proxy.set(latency=0.4)
                slow = True
            elif slow and now >= SLOW_TO:
                proxy.clear()
                slow = False
            while sent < RATE * now:
                producer.produce(topic, payload, str(sent).encode(), on_delivery=delivered)
                sent += 1
            producer.poll(0.01)
        proxy.clear()
        assert producer.flush(120) == 0
        assert not errors and len(acked) == sent
        during = sorted(t - start for t in acked if SLOW_FROM <= t - start <= SLOW_TO)
        gaps = [b - a for a, b in zip([SLOW_FROM, *during], [*during, SLOW_TO], strict=True)]
        # Commits take one to three seconds while PostgreSQL is slow; the slow phase is 20 s.
        assert max(gaps) < 8.0, f"no acknowledgement for {max(gaps):.1f} s while commits were slow"
    finally:
        if cluster is not None:
            cluster.down()
        proxies.stop()
        seaweed.stop()
        pg.stop()
