"""Broker configuration and topic config defaults.

Keys use Kafka's names so operators can carry their habits over. Values come from
defaults, then a config file, then ``SLUICE_<KEY>`` environment variables (dots as
underscores, upper case), then ``-o key=value`` on the command line.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

from common.secret_reference import resolve_secret_reference
from common.topic_config_keys import KEYS as TOPIC_KEYS
from common.topic_config_validation import InvalidConfig, validate

MiB = 1024 * 1024

# produce.objects.per.second.max=auto on S3: PUTs per second per broker below saturation
# (≈ $65 a month at S3's list price, $0.005 per 1,000 PUTs), about the 4 a second of
# WarpStream and Inkless, and frequent enough that a batch waits 200 ms at most for its turn.
AUTO_S3_OBJECTS_PER_SECOND = 5

# What authorizer.class.name accepts (broker/security/authorizer.py): Kafka's names for its
# authorizer, and the short one Sluice also accepts.
# group.consumer.migration.policy's values (broker.groups.consumer_migration).
MIGRATION_POLICIES = ("bidirectional", "upgrade", "downgrade", "disabled")
AUTHORIZER_NAMES = frozenset(
    {
        "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "kafka.security.authorizer.AclAuthorizer",
        "StandardAuthorizer",
        "acl",
    }
)


def parse_overrides(text: str) -> dict[str, int]:
    """``max.connections.per.ip.overrides``: ``host:count`` pairs, comma separated."""
    out: dict[str, int] = {}
    for entry in filter(None, (e.strip() for e in text.split(","))):
        host, sep, count = entry.rpartition(":")
        if not sep or not host or not count.strip().lstrip("-").isdigit():
            raise ValueError(
                f"max.connections.per.ip.overrides entry {entry!r}: expected host:count"
            )
        out[host.strip()] = int(count)
    return out


@dataclass(frozen=True)
class BrokerConfig:
    node_id: int = 1
    host: str = "127.0.0.1"
    port: int = 9092
    advertised_host: str = ""  # empty: same as host
    rack: str | None = None
    data_dir: str = "./.sluice"
    socket_request_max_bytes: int = 100 * MiB
    # Requests read from one connection but not answered yet, in bytes: past this the broker
    # stops reading that socket (backpressure) until answers go out.
    connection_pending_max_bytes: int = 64 * MiB
    # Kafka's connection limits (broker/server/connection_limits.py), Kafka's names and defaults;
    # max.connections is also capped below the process's open-file limit.
    max_connections_per_ip: int = 2**31 - 1
    max_connections_per_ip_overrides: str = ""  # host:count,...
    max_connections: int = 2**31 - 1
    max_connection_creation_rate: int = 2**31 - 1
    connections_max_idle_ms: int = 600_000
    # A connection on a SASL listener must have authenticated within this long.
    connections_max_unauthenticated_ms: int = 10_000
    # Bytes of requests still being received, all connections together (-1: no limit in
    # Kafka; bounded here so half-sent large requests cannot exhaust memory).
    queued_max_request_bytes: int = 512 * MiB
    # Group commit (broker/logs/diskless/diskless_append.py). adaptive: an idle broker
    # flushes a produce at once (after produce.commit.min.ms); while an upload is in flight
    # (or two objects wait for their commits) new data gathers for the next flush, which
    # starts when the pipeline frees. fixed: every flush waits the interval.
    # Either way no batch waits longer than produce.commit.interval.ms, and flushes keep to
    # the PUT budget (produce.objects.per.second.max) but for full buffers.
    produce_commit_mode: str = "adaptive"
    produce_commit_min_ms: int = 0
    produce_commit_interval_ms: int = 250
    # A full buffer is written at once, whatever the PUT budget says. 4 MiB, not more: at
    # half of saturation on S3 (36 MiB/s) 8 MiB objects held the p50 at 206-213 ms behind
    # the 5-a-second budget, 4 MiB ones answer in 127-136 ms for 9 PUTs a second, $0.0013
    # per GiB (bench.commit_latency; docs/configuration.md).
    produce_buffer_max_bytes: int = 4 * MiB
    # The PUT budget of this broker's flushes, objects per second (a full buffer is written
    # whatever it says): "auto" (produce_objects_per_second), a number, or 0 for none.
    produce_objects_per_second_max: str = "auto"
    fetch_cache_max_bytes: int = 64 * MiB  # with the rest, keeps RSS under 250 MiB (bench)
    fetch_cache_block_bytes: int = 8 * MiB  # one GET per 8 MiB flush object (bench: fetch CPU)
    fetch_max_bytes: int = 55 * MiB  # broker-side cap on one fetch answer
    auto_create_topics_enable: bool = True
    num_partitions: int = 1
    # The kind of a topic created without diskless.enable (the controller's default too in
    # `sluice dev`), and the RF of a classic topic created with -1 (Kafka's names).
    log_diskless_enable: bool = True
    default_replication_factor: int = 1
    # Classic topics (broker/logs/classic): a follower out of the ISR after this long without
    # catching up; followers' Fetch to their leader (Kafka's names and defaults).
    replica_lag_time_max_ms: int = 30_000
    replica_fetch_max_bytes: int = 1_048_576
    replica_fetch_response_max_bytes: int = 10 * MiB
    replica_fetch_wait_max_ms: int = 500
    replica_fetch_backoff_ms: int = 1000
    # Retention of classic logs is checked this often (log.retention.check.interval.ms).
    log_retention_check_interval_ms: int = 300_000
    # Tiered storage of classic topics (KIP-405; Kafka's names): whether topics may set
    # remote.storage.enable=true at all (the remote store is the broker's object store), and
    # how often a leader's task copies rolled segments and enforces remote retention
    # (Kafka's remote.log.manager.task.interval.ms).
    remote_log_storage_system_enable: bool = True
    remote_log_manager_task_interval_ms: int = 30_000
    message_max_bytes: int = 1048588  # Kafka's default max.message.bytes
    # Storage backends. Embedded default: a directory and SQLite under data.dir.
    object_store: str = "local"  # local | s3
    coordinator: str = "sqlite"  # sqlite | postgresql
    coordinator_dsn: str = ""  # postgresql://user:pass@host:port/db
    s3_endpoint: str = ""
    s3_region: str = "us-east-1"
    s3_bucket: str = "sluice"
    s3_access_key: str = ""
    s3_secret_key: str = ""
    s3_path_style: bool = True
    s3_key_prefix: str = ""
    # Static broker list "id@host:port[:rack],..." until the controller exists. Empty:
    # brokers register themselves in the coordinator database and heartbeat there.
    cluster_brokers: str = ""
    # With several brokers, long polls learn of the others' commits from the coordinator's
    # notifications (PostgreSQL LISTEN) or, without them, by asking again this often.
    # Topics are re-read from the catalog every metadata.refresh.interval.ms.
    remote_poll_interval_ms: int = 100
    # Liveness when brokers register in the coordinator database (no cluster.brokers):
    # Kafka's names and defaults for broker heartbeats.
    broker_heartbeat_interval_ms: int = 2000
    broker_session_timeout_ms: int = 9000
    metadata_refresh_interval_ms: int = 1000
    # Metadata transformer: an AZ-aware client whose AZ has alive brokers but no alive
    # replica of a diskless partition is sent to one of those brokers (hashed) instead of
    # across AZs. false: always all alive replicas (cross-AZ), as Inkless' transformer does.
    diskless_transformer_az_local_fallback: bool = True
    # Peers probed this often (ApiVersions over the inter-broker listener) so that diskless
    # clients are routed around one that stops answering for diskless.peer.suspect.ms,
    # long before its session times out (broker/metadata/peer_probe.py); 0: off.
    # KIP-227: incremental fetch sessions kept (Kafka's name, meaning and default: sessions,
    # whatever their sizes); 0: every fetch is a full one.
    max_incremental_fetch_session_cache_slots: int = 1000
    diskless_peer_probe_interval_ms: int = 250
    diskless_peer_suspect_ms: int = 1000
    # How the transformer turns murmur2("<topicId>-<partition>") into one of n brokers:
    # "abs", seed 001's abs(h) % n (Java's Math.abs), or "to_positive", Kafka's
    # Utils.toPositive(h) % n as Inkless' transformer code has it. One value per cluster.
    diskless_transformer_hash: str = "abs"
    # Controller mode: host:port of the controllers' HTTP APIs, comma separated. Set, the
    # broker registers with the Raft controller quorum, heartbeats there and follows its
    # metadata log (liveness, topics, leaders); empty, the modes above.
    controller_quorum_bootstrap_servers: str = ""
    controller_secret: str = ""  # sent as X-Sluice-Secret to the controllers; required
    # Development only: talk to controllers without a secret (controller/access.py).
    controller_insecure_allow_unauthenticated: bool = False
    retention_check_interval_ms: int = 300_000
    file_delete_delay_ms: int = 60_000
    # HTTP for /metrics, /healthz and /readyz: -1 off, 0 any free port.
    http_port: int = -1
    # How often the consumer-group lag metrics are recomputed (broker/groups/lag.py: one
    # read of every committed offset per round); 0: not exported.
    consumer_lag_metrics_interval_ms: int = 30_000
    # Objects in the store that no committed file names (an upload whose commit failed with
    # an unknown outcome, or a crash between upload and commit) are deleted once older than
    # the grace period, which must exceed any upload-to-commit time.
    orphan_check_interval_ms: int = 3_600_000
    orphan_grace_ms: int = 600_000
    # Consumer groups (Kafka's names and defaults).
    group_initial_rebalance_delay_ms: int = 3000
    group_min_session_timeout_ms: int = 6000
    group_max_session_timeout_ms: int = 1_800_000
    # KIP-848 consumer groups (group.protocol=consumer): the session timeout and heartbeat
    # interval the coordinator imposes, and the server-side assignors offered (the first
    # is the default; "uniform", "range" or Kafka's class names).
    group_consumer_session_timeout_ms: int = 45_000
    group_consumer_heartbeat_interval_ms: int = 5000
    # The bounds of a group's own consumer.session.timeout.ms / consumer.heartbeat.interval.ms
    # group configs (KIP-848; Kafka's names and defaults). Unlike Kafka, the broker defaults
    # above are not held to them: tests run with short sessions.
    group_consumer_min_session_timeout_ms: int = 45_000
    group_consumer_max_session_timeout_ms: int = 60_000
    group_consumer_min_heartbeat_interval_ms: int = 5000
    group_consumer_max_heartbeat_interval_ms: int = 15_000
    group_consumer_assignors: str = "uniform,range"
    # The server-side assignors prefer members in a partition's replica racks (members with
    # client.rack, classic topics); false assigns as Kafka 4 does, without racks.
    group_consumer_rack_aware_assignment: bool = True
    # Online conversion between classic and consumer groups (Kafka's values and default):
    # bidirectional, upgrade, downgrade or disabled.
    group_consumer_migration_policy: str = "bidirectional"
    offsets_retention_minutes: int = 10080  # 7 days
    offsets_retention_check_interval_ms: int = 600_000
    offset_metadata_max_bytes: int = 4096
    # Share groups (KIP-932; Kafka's names and defaults): how long a delivered record stays
    # locked to its consumer, how often a record is delivered before it is archived, the
    # members' session timeout and heartbeat interval, and the most records in flight per
    # share-partition.
    group_share_record_lock_duration_ms: int = 30_000
    group_share_delivery_count_limit: int = 5
    group_share_session_timeout_ms: int = 45_000
    group_share_heartbeat_interval_ms: int = 5_000
    group_share_partition_max_record_locks: int = 2000
    # The least time between two computations of a share group's target assignment
    # (KIP-1263, Kafka 4.3+), and the bounds of the group config share.assignment.interval.ms.
    group_share_assignment_interval_ms: int = 1000
    group_share_min_assignment_interval_ms: int = 0
    group_share_max_assignment_interval_ms: int = 15_000
    # The same for consumer groups (KIP-848 members; group config consumer.assignment.interval.ms).
    group_consumer_assignment_interval_ms: int = 1000
    group_consumer_min_assignment_interval_ms: int = 0
    group_consumer_max_assignment_interval_ms: int = 15_000
    # Transactions (Kafka's names and defaults): the longest transaction.timeout.ms a
    # producer may ask for, and how often the coordinator aborts timed-out transactions.
    transaction_max_timeout_ms: int = 900_000
    transaction_abort_timed_out_transaction_cleanup_interval_ms: int = 10_000
    # A transactional id without an ongoing transaction for this long is forgotten.
    transactional_id_expiration_ms: int = 604_800_000
    # A diskless transaction end's markers are made by their readers from the key of the
    # file they are committed in (storage/objects/marker_objects.py): no PUT. true: they are
    # uploaded as one object per end, as before; for a rolling upgrade from a version
    # that cannot read such markers (set until every broker and job runs this one).
    diskless_txn_marker_objects: bool = False
    # The finalized level of Kafka's transaction.version feature that ApiVersions
    # advertises: 2 is KIP-890 part 2 (Produce v12 adds partitions to the transaction
    # itself, EndTxn v5 bumps the producer epoch at every end), which Kafka 4.x clients
    # then use; 0 or 1 keep them on AddPartitionsToTxn and one epoch per producer session.
    # Every broker of a cluster must say the same: during a rolling upgrade from a version
    # without it, 1 until all brokers run this one (as Kafka's kafka-features upgrade).
    transaction_version: int = 2
    # The classic topics' log cleaner (cleanup.policy=compact; Kafka's names): how long it
    # rests between rounds over the compacted partitions, and whether it runs at all.
    log_cleaner_backoff_ms: int = 15_000
    log_cleaner_enable: bool = True
    # --- Security (broker/security/; Kafka's names). Empty listeners: one PLAINTEXT
    # listener on host:port, exactly the single-port broker this was before listeners.
    listeners: str = ""  # e.g. PLAINTEXT://:9092,SASL_SSL://:9093
    advertised_listeners: str = ""  # empty: as listeners (an empty host: advertised.host)
    listener_security_protocol_map: str = ""  # NAME:PROTOCOL,...; empty: Kafka's default map
    inter_broker_listener_name: str = ""  # the address registered as the broker's own
    ssl_certificate_location: str = ""  # PEM certificate (chain) of this broker
    ssl_key_location: str = ""  # PEM private key
    ssl_key_password: str = ""
    ssl_ca_location: str = ""  # PEM CA bundle that client certificates are checked against
    ssl_client_auth: str = "none"  # required | requested | none
    # Another broker's certificate must name the host it is reached at (Kafka's default);
    # empty: only the chain is checked (replica fetcher and marker writer, as TLS clients).
    ssl_endpoint_identification_algorithm: str = "https"
    sasl_enabled_mechanisms: str = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"
    # JAAS-style config for PLAIN's users: ... PlainLoginModule required user_alice="pw";
    sasl_jaas_config: str = ""
    # The mechanism this broker logs in with on another broker's SASL inter-broker listener
    # (PLAIN or SCRAM-SHA-*; username=/password= from that listener's JAAS config). Kafka's
    # default is GSSAPI, which is not supported: empty means "not configured".
    sasl_mechanism_inter_broker_protocol: str = ""
    sasl_oauthbearer_jwks_endpoint_url: str = ""  # file:///path/jwks.json
    sasl_oauthbearer_expected_audience: str = ""  # comma separated; empty: not checked
    sasl_oauthbearer_expected_issuer: str = ""  # empty: not checked
    sasl_oauthbearer_sub_claim_name: str = "sub"
    sasl_oauthbearer_clock_skew_seconds: int = 30
    # KIP-368: an authenticated SASL session lasts this long unless the client
    # re-authenticates; 0: no limit (Kafka's default).
    connections_max_reauth_ms: int = 0
    # TLS to the controllers' HTTP API (https:// in controller.quorum.bootstrap.servers):
    # the CA their certificates are checked against, and this broker's own certificate
    # and key when the controllers ask for one (mTLS).
    controller_ssl_ca_location: str = ""
    controller_ssl_certificate_location: str = ""
    controller_ssl_key_location: str = ""
    # listener.name.<listener>.<key>=value overrides (Kafka's per-listener prefix), e.g.
    # listener.name.sasl_ssl.ssl.client.auth or listener.name.sasl_ssl.plain.sasl.jaas.config.
    listener_name_configs: tuple[tuple[str, str], ...] = ()
    # Kafka's broker-level defaults of topic configs as set (log.retention.hours=72,
    # log.segment.bytes, compression.type, min.insync.replicas, ...: TOPIC_DEFAULT_KEYS):
    # a topic without its own value takes them (broker.metadata.topic_config).
    topic_defaults: tuple[tuple[str, str], ...] = ()
    # The keys the configuration named (load_config), set to their default or not: what
    # DescribeConfigs reports as STATIC_BROKER_CONFIG, as Kafka does for server.properties.
    named_keys: frozenset[str] = frozenset()
    # Authorization (Kafka's names; broker/security/authorizer.py). Empty: no authorizer,
    # every request is allowed. Kafka's StandardAuthorizer class name (or "acl") turns ACLs
    # on; they live in the controller's metadata log, so it needs controller mode.
    authorizer_class_name: str = ""
    super_users: str = ""  # "User:admin;User:ops"
    allow_everyone_if_no_acl_found: bool = False
    # Client quotas: rates are measured over quota.window.num samples of
    # quota.window.size.seconds each (Kafka's names and defaults).
    quota_window_num: int = 11
    quota_window_size_seconds: int = 1

    def __post_init__(self) -> None:
        if self.produce_commit_mode not in ("adaptive", "fixed"):
            raise ValueError(
                f"produce.commit.mode must be adaptive or fixed, not {self.produce_commit_mode!r}"
            )
        if self.produce_commit_interval_ms < 1:
            raise ValueError("produce.commit.interval.ms must be >= 1")
        self.produce_objects_per_second  # noqa: B018 - a bad value is a config error at start
        if self.diskless_transformer_hash not in ("abs", "to_positive"):
            raise ValueError(
                "diskless.transformer.hash must be abs or to_positive, not "
                f"{self.diskless_transformer_hash!r}"
            )
        if self.ssl_client_auth not in ("required", "requested", "none"):
            raise ValueError(
                f"ssl.client.auth must be required, requested or none, not {self.ssl_client_auth!r}"
            )
        if self.authorizer_class_name and self.authorizer_class_name not in AUTHORIZER_NAMES:
            raise ValueError(
                f"authorizer.class.name {self.authorizer_class_name!r} is not supported: use "
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer (or acl)"
            )
        if self.transaction_version not in (0, 1, 2):
            raise ValueError(
                f"transaction.version must be 0, 1 or 2, not {self.transaction_version}"
            )
        if self.group_consumer_migration_policy.strip().lower() not in MIGRATION_POLICIES:
            raise ValueError(
                f"group.consumer.migration.policy must be one of {', '.join(MIGRATION_POLICIES)}, "
                f"not {self.group_consumer_migration_policy!r}"
            )
        if self.group_consumer_session_timeout_ms <= 0 or (
            self.group_consumer_heartbeat_interval_ms <= 0
            or self.group_consumer_heartbeat_interval_ms >= self.group_consumer_session_timeout_ms
        ):
            raise ValueError(
                "group.consumer.heartbeat.interval.ms must be > 0 and below "
                "group.consumer.session.timeout.ms"
            )
        for low, high, name in (
            (
                self.group_consumer_min_session_timeout_ms,
                self.group_consumer_max_session_timeout_ms,
                "session.timeout.ms",
            ),
            (
                self.group_consumer_min_heartbeat_interval_ms,
                self.group_consumer_max_heartbeat_interval_ms,
                "heartbeat.interval.ms",
            ),
        ):
            if not 0 < low <= high:
                raise ValueError(
                    f"group.consumer.min.{name} must be > 0 and <= group.consumer.max.{name}"
                )
        for kind in ("share", "consumer"):
            low, value, high = (
                getattr(self, f"group_{kind}_{which}assignment_interval_ms")
                for which in ("min_", "", "max_")
            )
            if not 0 <= low <= value <= high:
                raise ValueError(
                    f"group.{kind}.assignment.interval.ms must be within "
                    f"group.{kind}.min.assignment.interval.ms and "
                    f"group.{kind}.max.assignment.interval.ms"
                )
        parse_overrides(self.max_connections_per_ip_overrides)  # a bad entry is a config error
        if self.quota_window_num < 2 or self.quota_window_size_seconds < 1:
            raise ValueError("quota.window.num must be >= 2 and quota.window.size.seconds >= 1")
        if self.consumer_lag_metrics_interval_ms < 0:
            raise ValueError("consumer.lag.metrics.interval.ms must be >= 0 (0: off)")
        if self.diskless_peer_probe_interval_ms < 0 or (
            self.diskless_peer_probe_interval_ms > 0
            and self.diskless_peer_suspect_ms < self.diskless_peer_probe_interval_ms
        ):
            raise ValueError(
                "diskless.peer.probe.interval.ms must be >= 0 (0: off) and "
                "diskless.peer.suspect.ms at least that"
            )

    def __repr__(self) -> str:
        # A config may end up in a traceback or a debug line: never with its secrets.
        shown = []
        for f in fields(self):
            key = f.name.replace("_", ".")
            value = getattr(self, f.name)
            if is_sensitive(key) and value:
                value = "[hidden]"
            elif f.name == "listener_name_configs":
                value = tuple((k, "[hidden]" if is_sensitive(k) else v) for k, v in value)
            shown.append(f"{f.name}={value!r}")
        return f"BrokerConfig({', '.join(shown)})"

    def listener_config(self, listener: str, key: str) -> str:
        """``key`` for one listener: ``listener.name.<listener>.<key>`` if set, else the
        broker-wide value (as Kafka resolves its per-listener prefix)."""
        prefixed = f"listener.name.{listener.lower()}.{key}"
        for name, value in self.listener_name_configs:
            if name == prefixed:
                return value
        attr = _KEYS.get(key)
        return str(getattr(self, attr)) if attr is not None else ""

    @property
    def produce_objects_per_second(self) -> int:
        """``produce.objects.per.second.max`` resolved: PUTs per second, 0 for no budget.

        auto: none on the embedded store (its writes cost nothing, so each goes at once);
        on S3, where every PUT is billed, AUTO_S3_OBJECTS_PER_SECOND, or one per
        produce.commit.interval.ms if that is shorter, so that the interval an operator
        set stays the longest a batch waits."""
        raw = str(self.produce_objects_per_second_max).strip()
        if raw == "auto":
            if self.object_store != "s3":
                return 0
            per_interval = -(-1000 // self.produce_commit_interval_ms)  # ceil
            return max(AUTO_S3_OBJECTS_PER_SECOND, per_interval)
        if not raw.isdigit():
            raise ValueError(
                "produce.objects.per.second.max must be auto or an integer >= 0 (0: no "
                f"budget), not {self.produce_objects_per_second_max!r}"
            )
        return int(raw)

    @property
    def advertised(self) -> str:
        return self.advertised_host or self.host

    def controller_servers(self) -> list[str]:
        """``controller.quorum.bootstrap.servers`` as a list of ``host:port``."""
        out = []
        entries = self.controller_quorum_bootstrap_servers.split(",")
        for entry in filter(None, (e.strip() for e in entries)):
            host, sep, port = entry.rpartition(":")
            if not sep or not host or not port.isdigit():
                raise ValueError(
                    f"controller.quorum.bootstrap.servers entry {entry!r}: expected host:port"
                )
            out.append(entry)
        return out

    @property
    def controller_mode(self) -> bool:
        return bool(self.controller_quorum_bootstrap_servers.strip())

    def static_brokers(self) -> list[tuple[int, str, int, str | None]]:
        """Parse ``cluster.brokers``: ``id@host:port[:rack]`` entries, comma separated."""
        out = []
        for entry in filter(None, (e.strip() for e in self.cluster_brokers.split(","))):
            try:
                node, address = entry.split("@", 1)
                host, port, *rack = address.split(":")
                out.append((int(node), host, int(port), rack[0] if rack else None))
            except ValueError:
                raise ValueError(
                    f"cluster.brokers entry {entry!r}: expected id@host:port[:rack]"
                ) from None
        return out


# Kafka config name -> BrokerConfig attribute.
_KEYS = {f.name.replace("_", "."): f.name for f in fields(BrokerConfig)}
_KEYS["broker.id"] = "node_id"
_KEYS["node.id"] = "node_id"
_KEYS["broker.rack"] = "rack"
_KEYS["message.max.bytes"] = "message_max_bytes"
del _KEYS["listener.name.configs"]  # set through listener.name.<listener>.<key> keys
del _KEYS["topic.defaults"]  # set through the keys of TOPIC_DEFAULT_KEYS
del _KEYS["named.keys"]  # what load_config was given


def _topic_default_keys() -> dict[str, tuple[str, int]]:
    """Broker config name -> (the topic config it defaults, factor from its unit)."""
    out: dict[str, tuple[str, int]] = {}
    for key in TOPIC_KEYS.values():
        for name, factor in key.synonyms:
            if name not in _KEYS:  # message.max.bytes is a BrokerConfig field of its own
                out[name] = (key.name, factor)
    # Leaders are elected by the controllers, which read the topic's own setting: a broker
    # default would be shown and never used.
    out.pop("unclean.leader.election.enable", None)
    return out


TOPIC_DEFAULT_KEYS = _topic_default_keys()


def _topic_default(key: str, raw: str) -> str:
    """Check a broker-level topic default as its topic config would be checked."""
    topic_key, factor = TOPIC_DEFAULT_KEYS[key]
    value = raw.strip()
    if factor != 1:
        try:
            value = str(int(value) * factor)
        except ValueError:
            raise ValueError(f"config {key}: expected an integer, got {raw!r}") from None
    try:
        validate({topic_key: value})
    except InvalidConfig as exc:
        raise ValueError(f"config {key}: {exc}") from None
    return raw.strip()


LISTENER_PREFIX = "listener.name."

# Values DescribeConfigs shows as null and logs never show. Kafka marks passwords and JAAS
# configs sensitive; so is anything that embeds a password (coordinator.dsn).
SENSITIVE_KEYS = frozenset(
    {
        "s3.secret.key",
        "coordinator.dsn",
        "controller.secret",
        "ssl.key.password",
        "sasl.jaas.config",
    }
)


def is_sensitive(key: str) -> bool:
    """True for secret configs, also under a ``listener.name.<l>.`` prefix."""
    return key in SENSITIVE_KEYS or key.endswith(("sasl.jaas.config", ".password"))


def _coerce(name: str, raw: str) -> Any:
    target = BrokerConfig.__dataclass_fields__[name].type
    if target in ("int", int):
        return int(raw)
    if target in ("bool", bool):
        if raw.lower() not in ("true", "false"):
            raise ValueError(f"expected true or false, got {raw!r}")
        return raw.lower() == "true"
    return raw


def load_config(*layers: Mapping[str, str], env: Mapping[str, str] | None = None) -> BrokerConfig:
    """Merge key=value layers (later wins), then SLUICE_* environment variables."""
    merged: dict[str, str] = {}
    for layer in layers:
        merged.update(layer)
    if env:
        for key in _KEYS:
            var = "SLUICE_" + key.replace(".", "_").upper()
            if var in env:
                merged[key] = env[var]
    values: dict[str, Any] = {}
    per_listener: list[tuple[str, str]] = []
    topic_defaults: dict[str, str] = {}
    for key, raw in merged.items():
        raw = resolve_secret_reference(key, raw, env)
        if key.startswith(LISTENER_PREFIX):
            listener, _, rest = key[len(LISTENER_PREFIX) :].partition(".")
            if not listener or not rest:
                raise ValueError(f"config {key}: expected listener.name.<listener>.<config>")
            per_listener.append((f"{LISTENER_PREFIX}{listener.lower()}.{rest}", raw))
            continue
        if key in TOPIC_DEFAULT_KEYS:
            topic_defaults[key] = _topic_default(key, raw)
            continue
        if key == "unclean.leader.election.enable":
            raise ValueError(
                "unclean.leader.election.enable is the controllers' to apply: set it on a "
                "topic (kafka-configs --entity-type topics), not on a broker"
            )
        name = _KEYS.get(key)
        if name is None:
            raise ValueError(f"unknown config {key!r}")
        try:
            values[name] = _coerce(name, raw)
        except ValueError as exc:
            raise ValueError(f"config {key}: {exc}") from None
    if per_listener:
        values["listener_name_configs"] = tuple(sorted(per_listener))
    if topic_defaults:
        values["topic_defaults"] = tuple(sorted(topic_defaults.items()))
    values["named_keys"] = frozenset(merged)
    config = BrokerConfig(**values)
    if config.controller_mode:
        # A broker holding a guessable secret lets anyone act as a broker to the controllers.
        from controller.access import secret_problem

        problem = secret_problem(
            config.controller_secret, config.controller_insecure_allow_unauthenticated
        )
        if problem is not None:
            raise ValueError(problem)
    return config


def parse_config_file(text: str) -> dict[str, str]:
    """Java-properties style: ``key=value`` lines, ``#`` comments."""
    out: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        if "=" not in line:
            raise ValueError(f"line {number}: expected key=value")
        key, value = line.split("=", 1)
        out[key.strip()] = value.strip()
    return out
