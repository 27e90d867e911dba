"""A broker killed and restarted is back at once, not after its old session expires."""

from __future__ import annotations

import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.fixtures.cluster import FAST_LIVENESS, running_cluster

from ._kafka import confluent_consume, confluent_produce, standard_messages, wait_until

pytestmark = pytest.mark.e2e

# Long enough that "waited out the old session" and "replaced it at once" cannot be confused
# on a loaded machine: the restarted broker must be back well within it.
SESSION_MS = 60_000


def test_killed_broker_restarted_replaces_its_old_incarnation_at_once(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    with running_cluster(
        tmp_path_factory,
        "restart",
        brokers=2,
        racks=("az-a", "az-b"),
        broker_options={**FAST_LIVENESS, "broker.session.timeout.ms": str(SESSION_MS)},
        controllers=1,
        controller_options={"broker.session.timeout.ms": str(SESSION_MS)},
    ) as cluster:
        admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
        admin.create_topics([NewTopic("restart", num_partitions=2)])["restart"].result(30)
        victim = cluster.brokers[1]

        def leaders() -> dict[int, int]:
            md = admin.list_topics("restart", timeout=10).topics["restart"]
            return {p.id: p.leader for p in md.partitions.values()}

        wait_until(lambda: sorted(leaders().values()) == [1, 2], "one leader per broker", 30)
        led = [p for p, leader in leaders().items() if leader == victim.node_id]
        victim.kill()
        mark = victim.log_size()
        started = time.monotonic()
        victim.start()
        # The new incarnation registers (new broker epoch) and is unfenced without waiting
        # out the old one's session.
        wait_until(
            lambda: f"broker {victim.node_id} unfenced" in victim.log_tail(since=mark),
            "the restarted broker registered and unfenced",
            SESSION_MS / 1000 / 2,
        )
        assert time.monotonic() - started < SESSION_MS / 1000 / 2
        assert "waiting for that session to expire" not in victim.log_tail(since=mark)
        wait_until(
            lambda: all(leaders().get(p) == victim.node_id for p in led),
            "the restarted broker leading its partitions again",
            30,
        )
        # And it serves: records produced through it are read back through the other.
        confluent_produce(victim.bootstrap, "restart", standard_messages(10), partition=led[0])
        got = confluent_consume(cluster.brokers[0].bootstrap, "restart", partitions=led)
        assert len(got) == 17
