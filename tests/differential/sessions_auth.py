"""Authorization sessions, against the secured pair (record.py: SASL/PLAIN, Kafka's
StandardAuthorizer on both sides, ``admin`` a super user). The administrator creates the
topics, groups, transactional ids and ACLs (recorded too); then ``alice``, who has only what
the ACLs give her, meets every kind of refusal a client can: topics, groups and
transactional ids she may not describe, read or write, cluster operations she may not do,
what Metadata, ListGroups and ListTransactions leave out for her, and the authorized
operations Metadata, DescribeCluster and DescribeGroups report.

Operations (Kafka's codes): READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7, DESCRIBE 8,
DESCRIBE_CONFIGS 10; resource types TOPIC 2, GROUP 3, CLUSTER 4, TRANSACTIONAL_ID 5.
"""

from __future__ import annotations

from typing import Any

from .compare import code
from .sessions import _fetch, _list_offsets, batch, session
from .sessions_groups import ZERO_UUID
from .side import COORDINATOR_WARMING, TXN_COORDINATOR_WARMING, Side

TOPIC, GROUP, CLUSTER, TXN_ID = 2, 3, 4, 5
LITERAL, PREFIXED = 3, 4
READ, WRITE, CREATE, DELETE, ALTER, DESCRIBE, DESCRIBE_CONFIGS = 3, 4, 5, 6, 7, 8, 10
ALLOW, DENY = 3, 2
ALICE = "User:alice"
# The PLAIN users of the secured pair (record.py configures them on both sides).
USERS = {"admin": "admin-secret", "alice": "alice-secret"}

DESCRIBED = "auth-described"  # alice: DESCRIBE
READABLE = "auth-read"  # READ (and so DESCRIBE)
WRITABLE = "auth-write"  # WRITE (and so DESCRIBE)
CONFIGURABLE = "auth-conf-x"  # DESCRIBE_CONFIGS (prefixed auth-conf-)
HIDDEN = "auth-hidden"  # nothing
DENIED = "auth-denied"  # READ allowed, DESCRIBE denied: the deny wins for DESCRIBE
UNKNOWN = "auth-unknown"  # does not exist
TOPICS = [DESCRIBED, READABLE, WRITABLE, CONFIGURABLE, HIDDEN, DENIED]
GROUP_OK, GROUP_HIDDEN = "auth-group", "auth-group-hidden"
TXN_DESCRIBED, TXN_WRITABLE, TXN_HIDDEN = "auth-txn", "auth-txn-w", "auth-txn-hidden"

ACLS = [
    (TOPIC, DESCRIBED, LITERAL, DESCRIBE, ALLOW),
    (TOPIC, READABLE, LITERAL, READ, ALLOW),
    (TOPIC, WRITABLE, LITERAL, WRITE, ALLOW),
    (TOPIC, "auth-conf-", PREFIXED, DESCRIBE_CONFIGS, ALLOW),
    (TOPIC, DENIED, LITERAL, READ, ALLOW),
    (TOPIC, DENIED, LITERAL, DESCRIBE, DENY),
    (GROUP, GROUP_OK, LITERAL, READ, ALLOW),
    (TXN_ID, TXN_DESCRIBED, LITERAL, DESCRIBE, ALLOW),
    (TXN_ID, TXN_WRITABLE, LITERAL, WRITE, ALLOW),
]


def _settled(resp: Any) -> bool:
    return not any(code(c["error_code"]) in COORDINATOR_WARMING for c in resp["coordinators"])


def _metadata(who: Side, label: str, topics: list[str] | None, **kw: Any) -> Any:
    version = kw.pop("version", None)
    return who.call(
        label,
        "metadata",
        {
            "topics": None if topics is None else [{"name": t} for t in topics],
            "allow_auto_topic_creation": False,
            "include_topic_authorized_operations": True,
            **kw,
        },
        version=version,
    )


def _setup(s: Side) -> dict[str, str]:
    """The administrator's part: topics, ACLs (recorded), a record to read, two simple groups
    with committed offsets, and a transactional id of each kind begun. The topic ids."""
    for t in TOPICS:
        s.create_topic(t)
    s.produce(READABLE, 0, batch(2))
    s.call(
        "admin creates the ACLs",
        "create_acls",
        {
            "creations": [
                {
                    "resource_type": rtype,
                    "resource_name": name,
                    "resource_pattern_type": pattern,
                    "principal": ALICE,
                    "host": "*",
                    "operation": op,
                    "permission_type": permission,
                }
                for rtype, name, pattern, op, permission in ACLS
            ]
        },
    )
    for group in (GROUP_OK, GROUP_HIDDEN):
        s.request("find_coordinator", {"key_type": 0, "coordinator_keys": [group]})
        s.call(
            f"admin commits offsets of {group}",
            "offset_commit",
            _commit_body(group, READABLE, s.topic_id(READABLE)),
            until=lambda r: (
                not any(
                    code(p["error_code"]) in TXN_COORDINATOR_WARMING  # NOT_COORDINATOR too
                    for t in r["topics"]
                    for p in t["partitions"]
                )
            ),
        )
    s.call(
        "admin finds the transaction coordinator",
        "find_coordinator",
        {"key_type": 1, "coordinator_keys": [TXN_HIDDEN]},
        until=_settled,
    )
    for txn in (TXN_WRITABLE, TXN_HIDDEN):
        s.call(
            f"admin initialises {txn}",
            "init_producer_id",
            {"transactional_id": txn, "transaction_timeout": 60_000},
            until=lambda r: code(r["error_code"]) not in TXN_COORDINATOR_WARMING,
        )
    # The administrator sees every topic with every operation (a super user).
    _metadata(s, "admin: metadata of a topic, with its authorized operations", [DESCRIBED])
    return {t: s.topic_id(t) for t in TOPICS}


def _commit_body(group: str, topic: str, topic_id: str, offset: int = 1) -> dict[str, Any]:
    return {
        "group_id": group,
        "generation_id_or_member_epoch": -1,
        "member_id": "",
        "group_instance_id": None,
        "retention_time": -1,
        "topics": [
            {
                "name": topic,
                "topic_id": topic_id,
                "partitions": [
                    {
                        "partition_index": 0,
                        "committed_offset": offset,
                        "committed_leader_epoch": -1,
                        "committed_metadata": "",
                    }
                ],
            }
        ],
    }


@session(secure=True)
def s_authorization(s: Side) -> None:
    ids = _setup(s)
    a = s.as_user("alice", USERS["alice"])

    # --- what alice may see ---
    _metadata(a, "metadata of all topics: only those alice may describe", None)
    _metadata(a, "metadata by name", [DESCRIBED, HIDDEN, DENIED, UNKNOWN, WRITABLE])
    _metadata(
        a,
        "metadata v10 with the cluster's authorized operations",
        [READABLE],
        include_cluster_authorized_operations=True,
        version=10,
    )
    a.call(
        "describe cluster with authorized operations",
        "describe_cluster",
        {"include_cluster_authorized_operations": True, "endpoint_type": 1},
    )

    # --- the data path ---
    def produce(label: str, topic: str) -> None:
        a.call(
            label,
            "produce",
            {
                "transactional_id": None,
                "acks": -1,
                "timeout": 10_000,
                "topic_data": [
                    {"name": topic, "partition_data": [{"index": 0, "records": batch(1)}]}
                ],
            },
        )

    produce("produce to a writable topic", WRITABLE)
    produce("produce to a described topic (no WRITE)", DESCRIBED)
    produce("produce to a hidden topic", HIDDEN)
    produce("produce to an unknown topic", UNKNOWN)
    from_0 = [{"partition": 0, "fetch_offset": 0}]
    _fetch(a, "fetch a readable topic", ids[READABLE], from_0)
    _fetch(a, "fetch a described topic (no READ)", ids[DESCRIBED], from_0)
    _fetch(a, "fetch a hidden topic", ids[HIDDEN], from_0)
    _list_offsets(a, "list offsets of a described topic", DESCRIBED, [(0, -1)])
    _list_offsets(a, "list offsets of a hidden topic", HIDDEN, [(0, -1)])
    _list_offsets(a, "list offsets of an unknown topic", UNKNOWN, [(0, -1)])
    for label, topic in (("described", DESCRIBED), ("hidden", HIDDEN)):
        a.call(
            f"offset for leader epoch of a {label} topic",
            "offset_for_leader_epoch",
            {
                "replica_id": -1,
                "topics": [{"topic": topic, "partitions": [{"partition": 0, "leader_epoch": 0}]}],
            },
        )
        a.call(
            f"delete records of a {label} topic",
            "delete_records",
            {
                "topics": [{"name": topic, "partitions": [{"partition_index": 0, "offset": 0}]}],
                "timeout": 10_000,
            },
        )
        a.call(
            f"describe producers of a {label} topic",
            "describe_producers",
            {"topics": [{"name": topic, "partition_indexes": [0]}]},
        )

    # --- topic administration ---
    a.call(
        "create topics (no CREATE)",
        "create_topics",
        {
            "topics": [
                {"name": n, "num_partitions": 1, "replication_factor": 1}
                for n in ("auth-new", DESCRIBED)
            ],
            "timeout": 30_000,
            "validate_only": False,
        },
    )
    for timeout in (30_000, 0):
        # Timeout 0: the lookups time out before any authorization is answered (Kafka).
        a.call(
            "delete topics (no DELETE)" + (", timeout 0" if timeout == 0 else ""),
            "delete_topics",
            {
                "topics": [
                    {"name": n, "topic_id": ZERO_UUID} for n in (DESCRIBED, HIDDEN, UNKNOWN)
                ],
                "timeout": timeout,
            },
        )
    a.call(
        "create partitions (no ALTER)",
        "create_partitions",
        {
            "topics": [
                {"name": n, "count": 2, "assignments": None} for n in (DESCRIBED, HIDDEN, UNKNOWN)
            ],
            "timeout": 30_000,
            "validate_only": False,
        },
    )

    def describe_configs(label: str, rtype: int, name: str) -> None:
        a.call(
            label,
            "describe_configs",
            {
                "resources": [
                    {
                        "resource_type": rtype,
                        "resource_name": name,
                        "configuration_keys": ["cleanup.policy", "retention.ms"],
                    }
                ],
                "include_synonyms": False,
                "include_documentation": False,
            },
        )

    describe_configs("describe configs of a topic with DESCRIBE_CONFIGS", TOPIC, CONFIGURABLE)
    describe_configs("describe configs of a described topic", TOPIC, DESCRIBED)
    describe_configs("describe configs of a hidden topic", TOPIC, HIDDEN)
    describe_configs("describe configs of an unknown topic", TOPIC, UNKNOWN)
    describe_configs("describe configs of the broker", CLUSTER, str(s.node_id()))
    a.call(
        "incremental alter configs of a topic (no ALTER_CONFIGS)",
        "incremental_alter_configs",
        {
            "resources": [
                {
                    "resource_type": TOPIC,
                    "resource_name": CONFIGURABLE,
                    "configs": [{"name": "retention.ms", "config_operation": 0, "value": "1000"}],
                }
            ],
            "validate_only": False,
        },
    )
    a.call(
        "alter configs of the broker",
        "alter_configs",
        {
            "resources": [
                {
                    "resource_type": 4,
                    "resource_name": str(s.node_id()),
                    "configs": [{"name": "log.cleaner.backoff.ms", "value": "1000"}],
                }
            ],
            "validate_only": True,
        },
    )

    # --- groups ---
    a.call(
        "find the coordinator of groups",
        "find_coordinator",
        {"key_type": 0, "coordinator_keys": [GROUP_OK, GROUP_HIDDEN]},
        until=_settled,
    )
    a.call("list groups: only those alice may describe", "list_groups", {"states_filter": []})
    a.call(
        "describe groups with authorized operations",
        "describe_groups",
        {"groups": [GROUP_OK, GROUP_HIDDEN], "include_authorized_operations": True},
    )
    for group in (GROUP_OK, GROUP_HIDDEN):
        a.call(
            f"offset fetch of {group}, all topics",
            "offset_fetch",
            {"groups": [{"group_id": group, "topics": None}], "require_stable": False},
        )
    a.call(
        "commit offsets of a topic alice may not read",
        "offset_commit",
        _commit_body(GROUP_OK, DESCRIBED, ids[DESCRIBED]),
    )
    a.call(
        "commit offsets to a hidden group",
        "offset_commit",
        _commit_body(GROUP_HIDDEN, READABLE, ids[READABLE]),
    )
    a.call("delete groups (no DELETE)", "delete_groups", {"groups_names": [GROUP_OK, GROUP_HIDDEN]})

    # --- transactions ---
    a.call(
        "find the coordinator of transactional ids",
        "find_coordinator",
        {"key_type": 1, "coordinator_keys": [TXN_DESCRIBED, TXN_HIDDEN]},
        until=_settled,
    )
    for txn in (TXN_DESCRIBED, TXN_WRITABLE):
        a.call(
            f"init producer id of {txn}",
            "init_producer_id",
            {"transactional_id": txn, "transaction_timeout": 60_000},
            until=lambda r: code(r["error_code"]) not in TXN_COORDINATOR_WARMING,
        )
    a.call(
        "init an idempotent producer (WRITE on a topic is enough)",
        "init_producer_id",
        {"transactional_id": None, "transaction_timeout": -1},
    )
    a.call(
        "describe transactions",
        "describe_transactions",
        {"transactional_ids": [TXN_WRITABLE, TXN_HIDDEN]},
    )
    a.call(
        "list transactions: only those alice may describe",
        "list_transactions",
        {"state_filters": [], "producer_id_filters": []},
    )

    # --- cluster operations ---
    acl_filter = {
        "resource_type_filter": 1,
        "resource_name_filter": None,
        "pattern_type_filter": 1,
        "principal_filter": None,
        "host_filter": None,
        "operation": 1,
        "permission_type": 1,
    }
    a.call("describe ACLs (no DESCRIBE on the cluster)", "describe_acls", acl_filter)
    a.call(
        "create ACLs (no ALTER on the cluster)",
        "create_acls",
        {
            "creations": [
                {
                    "resource_type": TOPIC,
                    "resource_name": HIDDEN,
                    "resource_pattern_type": LITERAL,
                    "principal": ALICE,
                    "host": "*",
                    "operation": READ,
                    "permission_type": ALLOW,
                }
            ]
        },
    )
    a.call("delete ACLs", "delete_acls", {"filters": [acl_filter]})
    a.call("describe log dirs", "describe_log_dirs", {"topics": None})
    a.call(
        "elect leaders",
        "elect_leaders",
        {"election_type": 0, "topic_partitions": None, "timeout": 10_000},
    )
    a.call("list partition reassignments", "list_partition_reassignments", {"topics": None})
    a.call(
        "describe user SCRAM credentials",
        "describe_user_scram_credentials",
        {"users": [{"name": "admin"}]},
    )
    a.call(
        "describe every user's SCRAM credentials",
        "describe_user_scram_credentials",
        {"users": None},
    )
    a.call(
        "describe client quotas",
        "describe_client_quotas",
        {"components": [], "strict": False},
    )
    a.call("unregister a broker", "unregister_broker", {"broker_id": 9999})
    a.call(
        "update features",
        "update_features",
        {
            "timeout": 30_000,
            "feature_updates": [
                {"feature": "transaction.version", "max_version_level": 2, "upgrade_type": 1}
            ],
            "validate_only": True,
        },
    )
