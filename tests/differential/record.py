"""Run every session against Apache Kafka and against Sluice (a diskless and a classic
broker), once, and keep what each answered."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from sluice.launch.kafka import KafkaBroker
from sluice.launch.process import SluiceProcess, free_port

from .catalog import KIND_FREE, SECURE, SESSIONS
from .proxy import RecordingProxy
from .sessions_auth import USERS
from .side import Side, common_versions
from .wire import Connection, api_versions

# Both brokers: no auto-creation (a probe of an unknown topic must not create it), and
# Sluice's short commit interval from the e2e suite (produce latency is bounded by it).
# Both: the timeout sweep every 500 ms (the transaction sessions let one time out), and a
# new group's first rebalance without the initial delay (Kafka's oracle has it at 0 in its
# server.properties, kafka.py).
SWEEPS = {"transaction.abort.timed.out.transaction.cleanup.interval.ms": "500"}
# Kafka's first retention check runs 30 s after its start (log.initial.task.delay.ms) and
# deletes the sessions' records: their fixed timestamps (2023, sessions.T0) are older than
# the 7 days of log.retention.ms, so a log start offset moved in the answers of a run slow
# enough to reach that point (seen on a loaded machine). Not a topic config synonym, so no
# DescribeConfigs answer shows it.
NO_EARLY_RETENTION = {"log.initial.task.delay.ms": "3600000"}
KAFKA_OVERRIDES = {"auto.create.topics.enable": "false", **SWEEPS, **NO_EARLY_RETENTION}
# num.partitions=1: Kafka's oracle names it in its server.properties (kafka.py), which
# DescribeConfigs then reports as a static broker config; Sluice's gets the same.
SLUICE_OPTIONS = {
    "auto.create.topics.enable": "false",
    "produce.commit.interval.ms": "20",
    "num.partitions": "1",
    "group.initial.rebalance.delay.ms": "0",
    **SWEEPS,
}
KINDS = {"diskless": {}, "classic": {"log.diskless.enable": "false"}}

# The secured pair (the SECURE sessions): SASL/PLAIN on the one listener, Kafka's
# StandardAuthorizer on both, ``admin`` a super user and ``alice`` whatever the ACLs give.
AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


def _plain_users() -> str:
    return " ".join(f'user_{user}="{password}"' for user, password in USERS.items())


def kafka_secure(workdir: Path) -> KafkaBroker:
    kafka = KafkaBroker(workdir / "kafka-secure", KAFKA_OVERRIDES)
    listener = f"SASL_PLAINTEXT://{kafka.host}:{kafka.port}"
    kafka.overrides = {
        **KAFKA_OVERRIDES,
        "listeners": f"{listener},CONTROLLER://{kafka.host}:{kafka.controller_port}",
        "advertised.listeners": listener,
        "listener.security.protocol.map": "CONTROLLER:PLAINTEXT,SASL_PLAINTEXT:SASL_PLAINTEXT",
        "inter.broker.listener.name": "SASL_PLAINTEXT",
        "sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.inter.broker.protocol": "PLAIN",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": (
            "org.apache.kafka.common.security.plain.PlainLoginModule required "
            f'username="admin" password="{USERS["admin"]}" {_plain_users()};'
        ),
        "authorizer.class.name": AUTHORIZER,
        # ANONYMOUS: the node's own broker-to-controller channel (PLAINTEXT).
        "super.users": "User:admin;User:ANONYMOUS",
    }
    return kafka


def sluice_secure(workdir: Path) -> SluiceProcess:
    jaas = workdir / "sluice-secure" / "plain.jaas"
    jaas.parent.mkdir(parents=True, exist_ok=True)
    jaas.write_text(
        f"org.apache.kafka.common.security.plain.PlainLoginModule required {_plain_users()};"
    )
    port = free_port()
    return sluice(
        workdir / "sluice-secure",
        {
            "listeners": f"SASL_PLAINTEXT://127.0.0.1:{port}",
            "sasl.enabled.mechanisms": "PLAIN",
            "sasl.jaas.config": f"${{file:{jaas}}}",
            "authorizer.class.name": AUTHORIZER,
            "super.users": "User:admin",
        },
        port,
    )


KINDS_AND_KAFKA = ("kafka", *KINDS)
# recordings[session][target] = {label: recorded step}; targets: "kafka", and the kinds.
Recordings = dict[str, dict[str, dict[str, Any]]]


def sluice(workdir: Path, options: dict[str, str], port: int | None = None) -> SluiceProcess:
    data = workdir / "data"
    data.mkdir(parents=True, exist_ok=True)
    port = free_port() if port is None else port
    args = ["dev", "--host", "127.0.0.1", "--port", str(port), "--data-dir", str(data)]
    for k, v in {**SLUICE_OPTIONS, **options}.items():
        args += ["-o", f"{k}={v}"]
    return SluiceProcess(args, workdir / "broker.log", port)


@contextlib.contextmanager
def brokers(workdir: Path, secure: bool = False) -> Iterator[dict[str, tuple[str, int]]]:
    """Kafka and one Sluice per kind, started together and always stopped; with ``secure``,
    the secured pair too (targets "secure-kafka" and "secure-diskless")."""
    kafkas = {"kafka": KafkaBroker(workdir / "kafka", KAFKA_OVERRIDES)}
    sluices = {kind: sluice(workdir / f"sluice-{kind}", opts) for kind, opts in KINDS.items()}
    if secure:
        kafkas["secure-kafka"] = kafka_secure(workdir)
        sluices["secure-diskless"] = sluice_secure(workdir)
    try:
        for s in sluices.values():
            s.start(wait=False)
        for kafka in kafkas.values():
            kafka.start()
        for s in sluices.values():
            s.wait_ready()
        yield {
            **{name: (k.host, k.port) for name, k in kafkas.items()},
            **{kind: (s.host, s.port) for kind, s in sluices.items()},
        }
    finally:
        for s in sluices.values():
            with contextlib.suppress(Exception):
                s.stop()
        for kafka in kafkas.values():
            kafka.stop()


def record_all(workdir: Path, only: set[str] | None = None) -> tuple[Recordings, dict[str, int]]:
    selected = [name for name in SESSIONS if not only or name in only]
    if not selected:
        return {}, {}
    with brokers(workdir, secure=any(name in SECURE for name in selected)) as addrs:
        tables = {}
        for target, (host, port) in addrs.items():
            conn = Connection(host, port)
            tables[target] = api_versions(conn)
            conn.close()
        versions = common_versions(*tables.values())
        # Every session through a recording proxy of its broker (proxy.py).
        proxies = {target: RecordingProxy({0: address}) for target, address in addrs.items()}
        try:
            return _record(selected, addrs, proxies, versions), versions
        finally:
            for proxy in proxies.values():
                proxy.close()


def _record(
    selected: list[str],
    addrs: dict[str, tuple[str, int]],
    proxies: dict[str, RecordingProxy],
    versions: dict[str, int],
) -> Recordings:
    out: Recordings = {}
    for name in selected:
        run = SESSIONS[name]
        secure = name in SECURE
        targets = ["kafka", "diskless"] if name in KIND_FREE else list(KINDS_AND_KAFKA)
        out[name] = {}
        for target in targets:
            proxy = proxies[f"secure-{target}" if secure else target]
            login = ("admin", USERS["admin"]) if secure else None
            try:
                side = Side(target, *proxy.address(0), versions, login, proxy)
            except Exception as exc:
                out[name][target] = {"(session error)": f"login: {exc}"}
                continue
            try:
                run(side)
            except Exception as exc:  # recorded, so the comparison names the session
                side.steps["(session error)"] = f"{type(exc).__name__}: {exc}"
            finally:
                side.close()
            out[name][target] = side.steps
    return out


def record_cluster(workdir: Path, only: set[str] | None = None) -> Recordings:
    """The three-broker sessions (sessions_cluster.py) against Kafka's three nodes, then
    Sluice's cluster with classic topics, then with diskless ones."""
    from .cluster import CLUSTER_KINDS, SUFFIX, ClusterSide, clusters
    from .sessions_cluster import CLUSTER_SESSIONS

    selected = [name for name in CLUSTER_SESSIONS if only is None or name in only]
    if not selected:
        return {}
    out: Recordings = {name: {} for name in selected}
    with clusters(workdir) as nodes:
        tables = {}
        for side in ("kafka", "sluice"):
            conn = Connection(*nodes[side].address(3))
            tables[side] = api_versions(conn)
            conn.close()
        versions = common_versions(*tables.values())
        for target in ("kafka", *CLUSTER_KINDS):
            cluster = nodes["kafka" if target == "kafka" else "sluice"]
            for name in selected:
                try:
                    side = ClusterSide(
                        target, cluster, versions, CLUSTER_KINDS.get(target, {}), SUFFIX[target]
                    )
                except Exception as exc:
                    out[name][target] = {"(session error)": f"connect: {exc}"}
                    continue
                try:
                    CLUSTER_SESSIONS[name](side)
                except Exception as exc:
                    side.steps["(session error)"] = f"{type(exc).__name__}: {exc}"
                finally:
                    side.close()
                out[name][target] = side.steps
    return out
