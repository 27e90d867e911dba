"""Every difference between Apache Kafka's answers and Sluice's that the differential tests
accept, each with its reason: INTENDED (a design decision or a documented limit) and BUGS
(Sluice is wrong, Kafka is the reference: each is an xfail(strict=True) test that flips when
fixed). Reviewed by hand: a new entry needs its reason, an entry that no longer matches fails
the suite so the list stays true.

Patterns: ``*`` matches anything, everything else literally (paths contain brackets).
``targets`` are the Sluice kinds the entry applies to.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

BOTH = ("diskless", "classic")


@dataclass(frozen=True)
class Known:
    session: str
    step: str
    path: str
    reason: str
    targets: tuple[str, ...] = BOTH
    # Matches in some runs only (it depends on timing the sessions do not control): left out
    # of the check for stale entries.
    sometimes: bool = False

    @property
    def id(self) -> str:
        return f"{self.session}:{self.step}:{self.path}:{'+'.join(self.targets)}"

    def matches(self, session: str, target: str, step: str, path: str) -> bool:
        return (
            target in self.targets
            and _glob(self.session).fullmatch(session) is not None
            and _glob(self.step).fullmatch(step) is not None
            and _glob(self.path).fullmatch(path) is not None
        )


@cache
def _glob(pattern: str) -> re.Pattern[str]:
    return re.compile(".*".join(re.escape(part) for part in pattern.split("*")), re.DOTALL)


def _versions(reason: str, *apis: str) -> list[Known]:
    return [Known("api_versions", "*", f"api_keys.{api}*", reason) for api in apis]


DOCUMENTED_RANGES = (
    "newer versions are not served yet (docs/compatibility-and-limits.md lists the ranges); "
    "clients negotiate down to Sluice's maximum"
)

# KIP-848: both compute the target at most once per assignment interval (KIP-1263) and answer
# every heartbeat of the session alike; only the order of a describe's members differs.
_KIP848_ASYNC_ASSIGNMENT = (
    "ConsumerGroupDescribe lists the members in Kafka's hash-map order, Sluice's in join "
    "order; the members and their assignments are the same"
)

INTENDED: list[Known] = [
    Known(
        "*",
        "*",
        "*error_message",
        "free text: Kafka leaves it null for most errors, Sluice often explains; clients show "
        "it and never branch on it (null vs set is the only thing compared, and only here)",
    ),
    Known(
        "produce",
        "null records",
        "",
        "Kafka 4.4 fails on a null records field (NullPointerException in its request "
        "handler, logged) and never answers; Sluice answers INVALID_RECORD, which is better",
    ),
    Known(
        "describe_configs",
        "this broker, named keys",
        "*].read_only",
        "Sluice's broker configs are static (set in the broker's configuration, applied at "
        "start) but for the replication throttles; Kafka can change its message.max.bytes "
        "and log.* defaults at run time (read_only false). docs/configuration.md says so",
    ),
    *(
        Known("consumer_group_heartbeat", step, field, _KIP848_ASYNC_ASSIGNMENT)
        for step, field in (("describe the group", "response.groups[kip848-group].members[*"),)
    ),
    Known(
        "authorization",
        "describe every user's SCRAM credentials",
        "",
        "Kafka 4.4 fails on a refused DescribeUserScramCredentials with a null user list "
        "(NullPointerException building its error answer, logged) and never answers; Sluice "
        "answers CLUSTER_AUTHORIZATION_FAILED, which is better",
    ),
    # --- ApiVersions ---
    Known(
        "api_versions",
        "*",
        "api_keys.produce[0]",
        "Produce v0-2 (message formats v0/v1) are not served: Sluice stores magic-2 batches "
        "only (documented: Produce 3-11)",
    ),
    *_versions(
        "transaction version 2 (KIP-890 part 2) is served with Produce v12, EndTxn v5 and "
        "TxnOffsetCommit v5 (at every finalized transaction.version, as Kafka); Produce v13 "
        "(topic ids), TxnOffsetCommit v6 and WriteTxnMarkers v2 are not (documented)",
        "produce[1]",
        "txn_offset_commit",
        "write_txn_markers",
    ),
    *_versions(
        DOCUMENTED_RANGES,
        "fetch",
        "list_offsets",
        "api_versions",
        "describe_log_dirs",
        "delete_groups",
        "describe_cluster",
    ),
    *_versions(
        "no delegation tokens (documented under Authentication)",
        "create_delegation_token",
        "renew_delegation_token",
        "expire_delegation_token",
        "describe_delegation_token",
    ),
    *_versions(
        "the share coordinator's inter-broker APIs: share groups keep their state in the "
        "coordinator database, which every broker reads and writes (docs/share-groups.md)",
        "initialize_share_group_state",
        "read_share_group_state*",
        "write_share_group_state",
        "delete_share_group_state",
    ),
    *_versions(
        "no Kafka Streams groups (KIP-1071): the streams protocol is not served, Streams "
        "applications use classic groups",
        "streams_group_heartbeat",
        "streams_group_describe",
    ),
    *_versions(
        "KRaft quorum membership: Sluice's controller quorum is its own Raft (static "
        "membership, documented), not Kafka's, so these are not served (DescribeQuorum, "
        "UnregisterBroker and UpdateFeatures are: the broker answers them with the "
        "controllers' help)",
        "add_raft_voter",
        "remove_raft_voter",
    ),
    *_versions("no JBOD: one log dir per broker (documented)", "alter_replica_log_dirs"),
    *_versions(
        "KIP-1142 ListConfigResources (and the two keys kio does not know, 93 and 94) are "
        "newer than Sluice's protocol support",
        "list_config_resources",
        "93",
        "94",
    ),
    Known(
        "api_versions",
        "*",
        "supported_features*",
        "Sluice advertises one feature, transaction.version (finalized in the controllers' "
        "metadata log by UpdateFeatures, the brokers' transaction.version setting until then; "
        "documented), not Kafka's metadata.version, group.version, kraft.version and others",
    ),
    Known("api_versions", "*", "finalized_features*", "as supported_features"),
    # --- topic kinds and configs ---
    Known(
        "*",
        "*",
        "*configs[diskless.enable]",
        "Sluice-only topic config: the topic's kind (diskless or classic, docs/migration.md)",
    ),
    Known(
        "*",
        "*",
        "*configs[min.insync.replicas].*",
        "Kafka 4.x formats the cluster with eligible leader replicas (KIP-966), which writes "
        "min.insync.replicas as a cluster-wide dynamic default (source 3); Sluice has no ELR "
        "and reports the static default (source 5)",
    ),
    Known(
        "txn_end_states",
        "a second producer's init, its first answer",
        "*",
        "InitProducerId while the id's transaction is open: Kafka aborts it (fencing epoch + "
        "1) and answers CONCURRENT_TRANSACTIONS, and the client's retry bumps again; Sluice "
        "aborts and re-initialises in the one request (the same epoch, + 2, without the "
        "round trip and the client's retry backoff). The settled answers are compared",
    ),
    Known(
        "create_topics",
        "*assignment*",
        "*",
        "diskless topics have a managed replication factor and no manual placement: any "
        "broker serves any partition (design: controller/topic_admin.py, INVALID_REQUEST)",
        ("diskless",),
    ),
]

BUGS: list[Known] = [
    # --- Metadata ---
    # --- CreateTopics ---
    # --- topic config entries (CreateTopics v5+ and DescribeConfigs) ---
    # --- Produce ---
    # --- Fetch ---
    # --- OffsetForLeaderEpoch ---
    # --- ListOffsets ---
    # --- Transactions ---
    # --- Classic groups ---
]

# --- the three-broker sessions (sessions_cluster.py, test_cluster.py) ---
DISKLESS = ("diskless",)
_DISKLESS_PLACEMENT = (
    "a diskless partition has no replicas of its own: every broker serves it (one replica per "
    "rack, docs/architecture.md), and Metadata names the brokers and a leader in Sluice's own "
    "order for the asking client (AZ routing), not the topic's manual assignment, a "
    "reassignment's order or a preferred election's choice as Kafka does"
)
_DISKLESS_EPOCH = (
    "a stopped broker's diskless partitions are routed around (broker/metadata/transformer.py: "
    "another alive replica is named leader) without a leader change in the controller, so "
    "their leader epoch stays 0 (Kafka elects a new leader, epoch 1); no broker holds a "
    "diskless log, so there is no leadership to fence"
)
_DISKLESS_ELECTION = (
    "a diskless partition's recorded leader after a reassignment that reorders its replicas: "
    "some runs move it to the new first replica at once (the preferred election that follows "
    "is then ELECTION_NOT_NEEDED and the epoch stays 0), others keep it until the election "
    "(as Kafka); either way any broker serves the partition, so the epoch and the follower's "
    "answers differ in those runs only"
)
CLUSTER_INTENDED: list[Known] = [
    *(
        Known(
            "cluster_*",
            "*",
            f"*response.topics[*].partitions[*].{field}",
            _DISKLESS_PLACEMENT,
            DISKLESS,
        )
        for field in ("leader_id", "replica_nodes*", "isr_nodes*")
    ),
    Known(
        "cluster_stock_admin",
        "describe the topic",
        "outcome*",
        _DISKLESS_PLACEMENT + " (here: the leaders and replicas AdminClient.describe_topics "
        "returns; the same as Kafka's when the controller's rack rotation happens to start "
        "where the assignment Kafka was given does)",
        DISKLESS,
        sometimes=True,
    ),
    Known("cluster_stopped_broker", "*", "*leader_epoch", _DISKLESS_EPOCH, DISKLESS),
    Known(
        "cluster_stopped_broker",
        "a stale current_leader_epoch",
        "*",
        _DISKLESS_EPOCH + ": an epoch-0 request is current (no FENCED_LEADER_EPOCH)",
        DISKLESS,
    ),
    *(
        Known(
            "cluster_stopped_broker",
            step,
            "*.end_offset",
            _DISKLESS_EPOCH + ": epoch 0's end is the log end, epoch 1 is unknown (-1)",
            DISKLESS,
        )
        for step in ("epoch 0 from the new leader", "the new epoch")
    ),
    *(
        Known("cluster_elect_leaders", "*", path, _DISKLESS_ELECTION, DISKLESS, sometimes=True)
        for path in ("*error_code", "*leader_epoch", "*end_offset", "*.offset")
    ),
    Known(
        "cluster_elect_leaders",
        "epoch 0 from the new leader",
        "*.end_offset",
        "OffsetForLeaderEpoch of epoch 0 after the two records of epoch 1: Sluice's diskless "
        "partitions record no epoch boundaries (every batch is appended through the batch "
        "coordinator, the log has no leader-epoch checkpoint), so epoch 0 ends at the log end",
        DISKLESS,
    ),
    Known(
        "cluster_stopped_broker",
        "min ISR 3, *",
        "*",
        "min.insync.replicas has no effect on diskless topics (docs/configuration.md: no "
        "follower replication, an acknowledged batch is in object storage, which every broker "
        "reads): acks=all is accepted with a broker down, and the records after it move on by one",
        DISKLESS,
    ),
    Known(
        "cluster_stopped_broker",
        "end offsets from the new leader",
        "response.topics[isr3].partitions[0].offset",
        "min.insync.replicas has no effect on diskless topics: the acks=all record Kafka refused "
        "was written (one more record)",
        DISKLESS,
    ),
    Known(
        "cluster_*",
        "*election*",
        "*.error_code",
        "a diskless partition has no preferred replica to move the leadership to: ElectLeaders "
        "answers ELECTION_NOT_NEEDED (docs/compatibility-and-limits.md, kafka-leader-election)",
        DISKLESS,
    ),
    Known(
        "cluster_describe_log_dirs",
        "broker *: the topic",
        "response.results[0].topics",
        "a diskless partition has no local log on any broker: DescribeLogDirs describes classic "
        "replicas only (docs/compatibility-and-limits.md)",
        DISKLESS,
    ),
]

CLUSTER_BUGS: list[Known] = []
