"""Configuration of a controller process (``sluice controller --config FILE``).

Same rules as the broker's (broker/config.py): Kafka-style keys, a properties file, then
``SLUICE_<KEY>`` environment variables, then ``-o key=value``. Unknown keys are errors.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from common.secret_reference import resolve_secret_reference

from .access import INSECURE_KEY, secret_problem
from .service import ControllerSettings

DEFAULTS: dict[str, str] = {
    "node.id": "1",
    # id@host:port of every voter's Raft listener, this controller's own included.
    "controller.quorum.voters": "1@127.0.0.1:9093",
    "host": "127.0.0.1",  # where the HTTP API (brokers, metrics, health) listens
    "http.port": "9094",
    "data.dir": "./.sluice-controller",
    "controller.secret": "",  # shared with brokers and the other voters; required
    # Development only: start without a secret (controller/access.py).
    INSECURE_KEY: "false",
    "broker.session.timeout.ms": "9000",
    "num.partitions": "1",
    "cluster.id": "",
    "controller.election.ticks": "10",  # x 50 ms: election timeout 0.5-1 s
    "controller.fsync": "true",
    # Expand legacy RF=1 diskless topics to RF = rack count in the background (off by default).
    "controller.legacy.rf.expansion.enable": "false",
    # The kind of a topic created without diskless.enable, and the RF of a classic topic
    # created with -1 (Kafka's default.replication.factor).
    "log.diskless.enable": "true",
    "default.replication.factor": "1",
    # Kafka's automatic preferred-leader rebalance, with its names and defaults.
    "auto.leader.rebalance.enable": "true",
    "leader.imbalance.check.interval.seconds": "300",
    "leader.imbalance.per.broker.percentage": "10",
    # TLS for the HTTP API (PEM files); empty: plain HTTP.
    "ssl.certificate.location": "",
    "ssl.key.location": "",
    "ssl.key.password": "",
    "ssl.ca.location": "",
    "ssl.client.auth": "none",  # required: brokers present a certificate (mTLS)
}


def parse_voters(text: str) -> dict[int, tuple[str, int]]:
    voters = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        try:
            node, address = entry.split("@", 1)
            host, port = address.rsplit(":", 1)
            voters[int(node)] = (host, int(port))
        except ValueError:
            raise ValueError(
                f"controller.quorum.voters entry {entry!r}: expected id@host:port"
            ) from None
    if len(voters) not in (1, 3, 5):
        raise ValueError("controller.quorum.voters must list 1, 3 or 5 voters")
    return voters


def load_settings(
    *layers: Mapping[str, str], env: Mapping[str, str] | None = None
) -> ControllerSettings:
    merged = dict(DEFAULTS)
    for layer in layers:
        for key, value in layer.items():
            if key not in DEFAULTS:
                raise ValueError(f"unknown config {key!r}")
            merged[key] = value
    for key in DEFAULTS:
        var = "SLUICE_" + key.replace(".", "_").upper()
        if env and var in env:
            merged[key] = env[var]
    try:
        # ${file:/path} and ${env:NAME} for secrets, as in the broker's config.
        merged = {k: resolve_secret_reference(k, v, env) for k, v in merged.items()}
        if merged["ssl.client.auth"] not in ("required", "requested", "none"):
            raise ValueError("ssl.client.auth must be required, requested or none")
        node_id = int(merged["node.id"])
        voters = parse_voters(merged["controller.quorum.voters"])
        if node_id not in voters:
            raise ValueError(f"controller.quorum.voters does not list node.id {node_id}")
        fsync = merged["controller.fsync"].lower()
        expand = merged["controller.legacy.rf.expansion.enable"].lower()
        diskless = merged["log.diskless.enable"].lower()
        rebalance = merged["auto.leader.rebalance.enable"].lower()
        insecure = merged[INSECURE_KEY].lower()
        if any(v not in ("true", "false") for v in (fsync, expand, diskless, rebalance, insecure)):
            raise ValueError(
                "controller.fsync, controller.legacy.rf.expansion.enable, "
                "log.diskless.enable, auto.leader.rebalance.enable and "
                f"{INSECURE_KEY} are true or false"
            )
        if (problem := secret_problem(merged["controller.secret"], insecure == "true")) is not None:
            raise ValueError(problem)
        return ControllerSettings(
            node_id=node_id,
            voters=voters,
            host=merged["host"],
            http_port=int(merged["http.port"]),
            data_dir=Path(merged["data.dir"]),
            secret=merged["controller.secret"],
            allow_unauthenticated=insecure == "true",
            session_timeout_ms=int(merged["broker.session.timeout.ms"]),
            default_partitions=int(merged["num.partitions"]),
            cluster_id=merged["cluster.id"] or None,
            expand_legacy_topics=expand == "true",
            default_diskless=diskless == "true",
            default_replication_factor=int(merged["default.replication.factor"]),
            auto_leader_rebalance=rebalance == "true",
            leader_imbalance_check_interval_ms=1000
            * int(merged["leader.imbalance.check.interval.seconds"]),
            leader_imbalance_per_broker_percentage=int(
                merged["leader.imbalance.per.broker.percentage"]
            ),
            ssl_certificate_location=merged["ssl.certificate.location"],
            ssl_key_location=merged["ssl.key.location"],
            ssl_key_password=merged["ssl.key.password"],
            ssl_ca_location=merged["ssl.ca.location"],
            ssl_client_auth=merged["ssl.client.auth"],
            raft_options={
                "election_ticks": int(merged["controller.election.ticks"]),
                "fsync": fsync == "true",
            },
        )
    except ValueError as exc:
        raise ValueError(f"controller config: {exc}") from None
