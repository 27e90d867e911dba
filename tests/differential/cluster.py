"""The three-broker pair: a KRaft Kafka of three nodes (each broker and controller, racks
az-a/b/c) beside a Sluice cluster of three brokers (the same racks) behind one controller, on
PostgreSQL and SeaweedFS. Both number their brokers 1, 2, 3, so the cluster sessions compare
node ids as they are (replicas, ISR, leaders, offline replicas) where the single-broker
sessions only compare that there is one. The sessions reach both clusters through a recording
proxy (proxy.py), one port per broker.

One Sluice cluster serves both kinds: its classic side creates its topics with
``diskless.enable=false`` and its diskless side without, each under a name of its own (a
suffix) that :class:`ClusterSide` maps back to the session's name in what it records, so the
answers compare under the same keys.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from sluice.cluster import LocalCluster
from sluice.launch.kafka import ORACLE_JVM, KafkaCluster, answers_api_versions
from tests.fixtures.cluster import FAST_LIVENESS

from .compare import code
from .proxy import RecordingProxy
from .record import NO_EARLY_RETENTION
from .side import SETTLE_TIMEOUT_S, Side
from .wire import API_KEYS, Connection

RACKS = ("az-a", "az-b", "az-c")
# Both: no auto-creation; liveness fast enough that a stopped broker leaves the ISR within
# seconds (Kafka: its controlled shutdown does it at once; a broker that dies unannounced is
# fenced after the session timeout).
KAFKA3_OVERRIDES = {
    "auto.create.topics.enable": "false",
    "broker.heartbeat.interval.ms": "500",
    "broker.session.timeout.ms": "3000",
    "replica.lag.time.max.ms": "5000",
    # Combined nodes with -Xmx512m and C1 on a busy 2-core machine: one replica fetcher
    # thread, small socket buffers are plenty for a few kilobytes.
    "num.replica.fetchers": "1",
    "num.network.threads": "2",
    "num.io.threads": "2",
    **NO_EARLY_RETENTION,
}
SLUICE3_OPTIONS = {
    **FAST_LIVENESS,
    "auto.create.topics.enable": "false",
    "num.partitions": "1",
    "replica.lag.time.max.ms": "5000",
    "replica.fetch.backoff.ms": "200",
}
CLUSTER_KINDS: dict[str, dict[str, str]] = {"diskless": {}, "classic": {"diskless.enable": "false"}}
SUFFIX = {"kafka": "", "diskless": "-dl", "classic": "-cl"}


class Nodes(Protocol):
    """Start and stop the brokers of one cluster by node id; ``proxy`` records what they
    answer the sessions."""

    proxy: RecordingProxy

    def address(self, node: int) -> tuple[str, int]: ...

    def stop(self, node: int) -> None: ...

    def start(self, node: int) -> None: ...

    def alive(self, node: int) -> bool: ...


class KafkaNodes:
    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster = cluster
        self.by_id = {b.node_id: b for b in cluster.nodes}
        self.proxy = RecordingProxy({n: self.address(n) for n in self.by_id})

    def address(self, node: int) -> tuple[str, int]:
        b = self.by_id[node]
        return b.host, b.port

    def stop(self, node: int) -> None:
        self.by_id[node].stop()  # SIGTERM: Kafka's controlled shutdown

    def start(self, node: int) -> None:
        """Again on its formatted log dir (no new format): the node rejoins its quorum."""
        import subprocess

        from sluice.launch.kafka import ensure_jars, java

        b = self.by_id[node]
        libs = ensure_jars()
        with open(b.log_path, "ab") as log:
            b.proc = subprocess.Popen(
                [
                    java(),
                    *b.jvm,
                    "-cp",
                    f"{libs}/*",
                    "kafka.Kafka",
                    str(b.workdir / "server.properties"),
                ],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        b._wait_ready()

    def alive(self, node: int) -> bool:
        b = self.by_id[node]
        return (
            b.proc is not None
            and b.proc.poll() is None
            and answers_api_versions(*self.address(node))
        )


class SluiceNodes:
    def __init__(self, cluster: LocalCluster) -> None:
        self.cluster = cluster
        self.proxy = RecordingProxy({b.node_id: self.address(b.node_id) for b in cluster.brokers})

    def address(self, node: int) -> tuple[str, int]:
        b = self.cluster.broker(node)
        return b.host, b.port

    def stop(self, node: int) -> None:
        self.cluster.broker(node).stop()  # SIGTERM: Sluice's controlled shutdown

    def start(self, node: int) -> None:
        b = self.cluster.broker(node)
        b.start()
        b.wait_serving()

    def alive(self, node: int) -> bool:
        return self.cluster.broker(node).alive()


@contextlib.contextmanager
def clusters(workdir: Path) -> Iterator[dict[str, Nodes]]:
    """Kafka's three nodes and Sluice's cluster, started together and always stopped."""
    kafka = KafkaCluster(workdir / "kafka3", 3, RACKS, KAFKA3_OVERRIDES, jvm=ORACLE_JVM)
    sluice = LocalCluster(
        workdir / "sluice3",
        brokers=3,
        racks=RACKS,
        broker_options=SLUICE3_OPTIONS,
        controllers=1,
        controller_options={
            "broker.session.timeout.ms": FAST_LIVENESS["broker.session.timeout.ms"]
        },
    )
    from sluice.launch.kafka import new_cluster_id

    try:
        cluster_id = new_cluster_id()
        for b in kafka.nodes:
            b.launch(cluster_id)
        sluice.up()  # meanwhile Kafka's JVMs start
        for b in kafka.nodes:
            b._wait_ready()
        nodes: dict[str, Nodes] = {"kafka": KafkaNodes(kafka), "sluice": SluiceNodes(sluice)}
        try:
            yield nodes
        finally:
            for n in nodes.values():
                n.proxy.close()
    finally:
        with contextlib.suppress(Exception):
            sluice.down()
        kafka.down()


class ClusterSide(Side):
    """A :class:`Side` on one node of a three-broker cluster that can talk to any of them
    (:meth:`via`), stop and start them, and that records the session's topic names."""

    def __init__(
        self,
        name: str,
        nodes: Nodes,
        versions: Mapping[str, int],
        kind_configs: Mapping[str, str],
        suffix: str,
    ) -> None:
        self.nodes = nodes
        self.kind_configs = dict(kind_configs)
        self.suffix = suffix
        self.aliases: dict[str, str] = {}
        self._conns: dict[int, Connection] = {}
        self.ensure_up()
        host, port = self._any_live()
        super().__init__(name, host, port, versions, proxy=nodes.proxy)

    def _any_live(self) -> tuple[str, int]:
        """The proxy's address of a running broker (1 is the one the sessions stop)."""
        for node in (3, 2, 1):
            if self.nodes.alive(node):
                return self.nodes.proxy.address(node)
        raise RuntimeError(f"{self.name}: no broker alive")

    def ensure_up(self) -> None:
        """Every broker running and in the cluster (a session before may have stopped one)."""
        for node in (1, 2, 3):
            if not self.nodes.alive(node):
                self.nodes.start(node)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                conn = Connection(*self.nodes.address(3))
                try:
                    resp = conn.send(_metadata_request())
                finally:
                    conn.close()
                if len(resp.brokers) == 3:
                    return
            except OSError:
                pass
            time.sleep(0.2)
        raise RuntimeError("three brokers not back in the cluster")

    def close(self) -> None:
        super().close()
        for conn in self._conns.values():
            conn.close()
        self._conns.clear()

    # --- names ---

    def topic(self, logical: str) -> str:
        real = logical + self.suffix
        self.aliases[real] = logical
        return real

    def call(self, label: str, api: str, body: Mapping[str, Any], **kw: Any) -> Any:
        response = super().call(label, api, body, **kw)
        if self.suffix and label in self.steps:
            self.steps[label] = self._unalias(self.steps[label])
        return response

    def _unalias(self, tree: Any) -> Any:
        if isinstance(tree, dict):
            return {k: self._unalias(v) for k, v in tree.items()}
        if isinstance(tree, list):
            return [self._unalias(v) for v in tree]
        if isinstance(tree, str):
            return self.aliases.get(tree, tree)
        return tree

    # --- nodes ---

    @contextlib.contextmanager
    def via(self, node: int) -> Iterator[None]:
        """Send through a connection to broker ``node`` meanwhile (a partition's leader, the
        broker whose log dirs are described)."""
        conn = self._conns.get(node)
        if conn is None:
            conn = self._conns[node] = Connection(*self.nodes.proxy.address(node))
        saved, self.conn = self.conn, conn
        try:
            yield
        finally:
            self._conns[node] = self.conn  # call() may have reconnected
            self.conn = saved

    def stop_node(self, node: int) -> None:
        conn = self._conns.pop(node, None)
        if conn is not None:
            conn.close()
        self.nodes.stop(node)

    # --- a stock client's calls, recorded by the proxy ---

    def stock(self, label: str, apis: set[str], action: Callable[[str], Any], names: str) -> Any:
        """Run ``action(bootstrap)`` (a stock client's call, its bootstrap servers the
        proxy's) and record, for each API of ``apis``, the last answer the proxy forwarded
        to it during the call that names ``names`` (a client also sends other requests of its
        own: metadata refreshes, ApiVersions). The action's result (or error) is recorded
        too, as the application saw it."""
        assert label not in self.steps, f"step label {label!r} used twice"
        bootstrap = ",".join(
            "{}:{}".format(*self.proxy.address(n)) for n in (1, 2, 3) if self.nodes.alive(n)
        )
        before = self.proxy.keys()
        try:
            outcome: Any = action(bootstrap)
        except Exception as exc:
            outcome = f"(raised {type(exc).__name__}: {exc})"
        by_name = {key: name for name, key in API_KEYS.items()}
        answers: dict[str, Any] = {}
        for _key, rec in self.proxy.since(before):
            api = by_name.get(rec.api_key, str(rec.api_key))
            if api in apis and names in repr(rec.response):
                answers[api] = {"version": rec.version, "response": rec.response}
        self.steps[label] = self._unalias({"answers": answers, "outcome": outcome})
        return outcome

    # --- setup helpers (not recorded) ---

    def create(
        self,
        name: str,
        partitions: int = 1,
        rf: int = 3,
        assignment: list[list[int]] | None = None,
        **configs: str,
    ) -> str:
        """Create ``name`` (the real name returned) and wait until every partition has a
        leader and a full ISR. A diskless topic has no manual placement (INVALID_REQUEST):
        its assignment is dropped, its replication factor is the broker's."""
        real = self.topic(name)
        diskless = self.name == "diskless"
        n = len(assignment) if assignment else partitions
        spec = {
            "name": real,
            "num_partitions": -1 if assignment and not diskless else n,
            "replication_factor": -1 if assignment and not diskless else rf,
            "assignments": [
                {"partition_index": i, "broker_ids": ids} for i, ids in enumerate(assignment or [])
            ]
            if not diskless
            else [],
            "configs": [
                {"name": k, "value": v} for k, v in {**configs, **self.kind_configs}.items()
            ],
        }
        resp = self.request(
            "create_topics", {"topics": [spec], "timeout": 30_000, "validate_only": False}
        )
        (topic,) = resp["topics"]
        assert code(topic["error_code"]) == 0, f"{self.name}: create {real}: {topic}"
        self.wait_leaders(real, n)
        self.wait_isr(real, lambda p: len(p["isr_nodes"]) == len(p["replica_nodes"]))
        return real

    def _partitions_serve(self, name: str, partitions: int) -> bool:
        """Each partition answers ListOffsets at its leader (the base class asks the one
        broker it talks to, which leads only some of them)."""
        for index, p in self.partitions(name).items():
            with self.via(int(p["leader_id"])):
                resp = self.request(
                    "list_offsets",
                    {
                        "replica_id": -1,
                        "isolation_level": 0,
                        "topics": [
                            {
                                "name": name,
                                "partitions": [{"partition_index": index, "timestamp": -1}],
                            }
                        ],
                    },
                )
            if code(resp["topics"][0]["partitions"][0]["error_code"]) != 0:
                return False
        return True

    def partitions(self, real: str) -> dict[int, Any]:
        (topic,) = self.metadata([real])["topics"]
        return {p["partition_index"]: p for p in topic["partitions"]}

    def wait_isr(self, real: str, ok: Any, timeout: float = SETTLE_TIMEOUT_S) -> None:
        """Until every partition of ``real`` satisfies ``ok`` (its Metadata entry). A diskless
        topic has no ISR of its own and refuses placement: its side waits a moment and goes on,
        and the recorded answers show what it did instead."""
        if self.name == "diskless":
            timeout = 3.0
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = self.partitions(real)
                if last and all(ok(p) for p in last.values()):
                    return
            except (OSError, ValueError):
                pass
            time.sleep(0.2)
        if self.name != "diskless":
            raise AssertionError(f"{self.name}: {real} not settled: {last}")

    def wait_high_watermark(self, real: str, offset: int) -> None:
        """Until partition 0's high watermark (ListOffsets latest at its leader) is at least
        ``offset`` (bounded: the recorded answers then show where it stayed)."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with self.via(self.leader(real)):
                resp = self.request(
                    "list_offsets",
                    {
                        "replica_id": -1,
                        "isolation_level": 0,
                        "topics": [
                            {"name": real, "partitions": [{"partition_index": 0, "timestamp": -1}]}
                        ],
                    },
                )
            if resp["topics"][0]["partitions"][0]["offset"] >= offset:
                return
            time.sleep(0.1)

    def leader(self, real: str, partition: int = 0) -> int:
        return int(self.partitions(real)[partition]["leader_id"])


def _metadata_request() -> Any:
    from .wire import request_for

    return request_for(
        "metadata",
        12,
        {
            "topics": [],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": False,
        },
    )
