"""An expected outage of a dependency (PostgreSQL here) under a running broker: each periodic
task says once, at WARNING and without a traceback, that it cannot reach it, and once, at
INFO, that it works again. Nothing at ERROR: an outage of the coordinator database is an
operating condition, not a bug, and 43 tracebacks in 10 s bury the line that matters."""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from sluice.cluster import LocalCluster
from tests.fixtures.cluster import running_cluster

from ._kafka import Msg, confluent_create_topic, confluent_produce, unique_topic, wait_until

pytestmark = pytest.mark.e2e

# Every periodic task that reads or writes the coordinator database runs several times
# during the outage (defaults: minutes to hours between rounds).
QUICK_LOOPS = {
    "produce.commit.interval.ms": "20",
    "broker.heartbeat.interval.ms": "200",
    "broker.session.timeout.ms": "2000",
    "metadata.refresh.interval.ms": "300",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms": "300",
    "retention.check.interval.ms": "300",
    "file.delete.delay.ms": "600",
    "orphan.check.interval.ms": "500",
    "offsets.retention.check.interval.ms": "300",
}
OUTAGE_S = 6.0
LINE = re.compile(r"^\S+ \S+ (?P<level>[A-Z]+) \[[^]]*\] (?P<logger>\S+): (?P<message>.*)$")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    with running_cluster(tmp_path_factory, "pg-outage", 1, broker_options=QUICK_LOOPS) as c:
        yield c


def test_a_postgres_outage_is_one_warning_and_one_info_per_task(cluster: LocalCluster) -> None:
    (broker,) = cluster.brokers
    postgres = cluster.postgres
    assert postgres is not None
    topic = unique_topic("outage")
    confluent_create_topic(cluster.bootstrap, topic)
    confluent_produce(cluster.bootstrap, topic, [Msg(b"k", b"before")])
    mark = broker.log_size()
    postgres.stop()
    time.sleep(OUTAGE_S)  # the outage itself: every periodic task runs into it several times
    postgres.start()
    # Serving again: a produce is acknowledged.
    confluent_produce(cluster.bootstrap, topic, [Msg(b"k", b"after")])

    def logged() -> list[tuple[str, str, str]]:
        text = broker.log_path.read_bytes()[mark:].decode(errors="replace")
        return [
            (m["level"], m["logger"], m["message"])
            for line in text.splitlines()
            if (m := LINE.match(line)) is not None
        ]

    def warned_and_recovered() -> bool:
        lines = logged()
        warned = {lg for lvl, lg, msg in lines if lvl == "WARNING" and "unavailable" in msg}
        recovered = {lg for lvl, lg, msg in lines if lvl == "INFO" and "works again" in msg}
        return bool(warned) and warned <= recovered

    def tracebacks_and_errors() -> str:
        text = broker.log_path.read_bytes()[mark:].decode(errors="replace")
        errors = [line for line in logged() if line[0] in ("ERROR", "CRITICAL")]
        return f"{text.count('Traceback')} tracebacks, {len(errors)} ERROR lines"

    assert tracebacks_and_errors() == "0 tracebacks, 0 ERROR lines", logged()
    wait_until(warned_and_recovered, "every task that warned said it works again", 30)
    print(
        *(f"{lvl} {lg}: {msg}" for lvl, lg, msg in logged() if lvl != "INFO" or "again" in msg),
        sep="\n",
    )
    assert tracebacks_and_errors() == "0 tracebacks, 0 ERROR lines", logged()
    # One WARNING per task (its first words, up to the colon, name it).
    warnings = Counter((lg, msg.split(":")[0]) for lvl, lg, msg in logged() if lvl == "WARNING")
    repeated = {k: n for k, n in warnings.items() if n > 1}
    assert repeated == {}, (repeated, logged())
