"""One module per Kafka API; this table says which versions each one speaks.

Version ranges are what the handlers implement and kio can encode; they cover
what the stock clients send.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.node import Broker
    from broker.server.connection import RequestContext

Handler = Callable[["RequestContext", Any], Awaitable[Any]]


@dataclass(frozen=True)
class Api:
    key: int
    name: str
    min_version: int
    max_version: int
    handler: Handler
    unsupported_version_response: Callable[[], Any] = lambda: None


ApiTable = dict[int, Api]

# key, name, min, max
VERSIONS: list[tuple[int, str, int, int]] = [
    (0, "Produce", 3, 11),
    (1, "Fetch", 4, 16),
    (2, "ListOffsets", 1, 8),
    (3, "Metadata", 0, 13),
    (8, "OffsetCommit", 2, 10),
    (9, "OffsetFetch", 1, 10),
    (10, "FindCoordinator", 0, 6),
    (11, "JoinGroup", 0, 9),
    (12, "Heartbeat", 0, 4),
    (13, "LeaveGroup", 0, 5),
    (14, "SyncGroup", 0, 5),
    (15, "DescribeGroups", 0, 6),
    (16, "ListGroups", 0, 5),
    (17, "SaslHandshake", 0, 1),
    (18, "ApiVersions", 0, 3),
    (19, "CreateTopics", 2, 7),
    (20, "DeleteTopics", 1, 6),
    (21, "DeleteRecords", 0, 2),
    (22, "InitProducerId", 0, 5),
    (23, "OffsetForLeaderEpoch", 2, 4),
    (24, "AddPartitionsToTxn", 0, 5),
    (25, "AddOffsetsToTxn", 0, 4),
    # v5 is KIP-890 part 2 (an epoch bump per transaction), which needs transaction.version 2.
    (26, "EndTxn", 0, 4),
    # Sent by transaction coordinators to the leaders of classic partitions.
    (27, "WriteTxnMarkers", 1, 1),
    (28, "TxnOffsetCommit", 0, 4),
    # The ACL APIs' v0 is gone from Kafka 4 (and kio); v1 added pattern types (KIP-290).
    (29, "DescribeAcls", 1, 3),
    (30, "CreateAcls", 1, 3),
    (31, "DeleteAcls", 1, 3),
    (32, "DescribeConfigs", 1, 4),
    (33, "AlterConfigs", 0, 2),
    (35, "DescribeLogDirs", 1, 4),
    (36, "SaslAuthenticate", 0, 2),
    (37, "CreatePartitions", 0, 3),
    (42, "DeleteGroups", 0, 2),
    (43, "ElectLeaders", 0, 2),
    (44, "IncrementalAlterConfigs", 0, 1),
    (45, "AlterPartitionReassignments", 0, 1),
    (46, "ListPartitionReassignments", 0, 0),
    (47, "OffsetDelete", 0, 0),
    (48, "DescribeClientQuotas", 0, 1),
    (49, "AlterClientQuotas", 0, 1),
    (50, "DescribeUserScramCredentials", 0, 0),
    (51, "AlterUserScramCredentials", 0, 0),
    (60, "DescribeCluster", 0, 1),
    (61, "DescribeProducers", 0, 0),
    (65, "DescribeTransactions", 0, 0),
    (66, "ListTransactions", 0, 2),
    (75, "DescribeTopicPartitions", 0, 0),
]


async def _answered_by_connection(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    # SaslHandshake and SaslAuthenticate change the connection's state: broker/server/connection.py
    # answers them itself and never calls this.
    raise AssertionError("SASL requests are answered by the connection")


def build_api_table(broker: Broker) -> ApiTable:
    from broker.admin import (
        acls,
        client_quotas_handler,
        configs,
        elect_leaders,
        log_dirs,
        reassignments,
        records_admin,
        scram_credentials,
        topics_admin,
    )
    from broker.fetch import fetch_handler, leader_epoch, list_offsets
    from broker.groups import (
        find_coordinator,
        group_admin_handler,
        group_membership,
        group_offsets_handler,
    )
    from broker.metadata import describe_cluster, describe_topic_partitions, metadata_handler
    from broker.produce import produce_handler
    from broker.server import api_versions
    from broker.transactions import init_producer_id, transactions_handler, write_txn_markers

    handlers: dict[int, Callable[..., Awaitable[Any]]] = {
        0: produce_handler.handle,
        1: fetch_handler.handle,
        2: list_offsets.handle,
        3: metadata_handler.handle,
        8: group_offsets_handler.offset_commit,
        9: group_offsets_handler.offset_fetch,
        10: find_coordinator.handle,
        11: group_membership.join_group,
        12: group_membership.heartbeat,
        13: group_membership.leave_group,
        14: group_membership.sync_group,
        15: group_admin_handler.describe_groups,
        16: group_admin_handler.list_groups,
        17: _answered_by_connection,
        18: api_versions.handle,
        19: topics_admin.create_topics,
        20: topics_admin.delete_topics,
        21: records_admin.delete_records,
        22: init_producer_id.handle,
        23: leader_epoch.handle,
        24: transactions_handler.add_partitions_to_txn,
        25: transactions_handler.add_offsets_to_txn,
        26: transactions_handler.end_txn,
        27: write_txn_markers.handle,
        28: transactions_handler.txn_offset_commit,
        29: acls.describe_acls,
        30: acls.create_acls,
        31: acls.delete_acls,
        32: configs.describe_configs,
        33: configs.alter_configs,
        35: log_dirs.describe_log_dirs,
        36: _answered_by_connection,
        37: topics_admin.create_partitions,
        42: group_admin_handler.delete_groups,
        43: elect_leaders.elect_leaders,
        44: configs.incremental_alter_configs,
        45: reassignments.alter_partition_reassignments,
        46: reassignments.list_partition_reassignments,
        47: group_offsets_handler.offset_delete,
        48: client_quotas_handler.describe_client_quotas,
        49: client_quotas_handler.alter_client_quotas,
        50: scram_credentials.describe,
        51: scram_credentials.alter,
        60: describe_cluster.handle,
        61: transactions_handler.describe_producers,
        65: transactions_handler.describe_transactions,
        66: transactions_handler.list_transactions,
        75: describe_topic_partitions.handle,
    }
    table: ApiTable = {}
    for key, name, low, high in VERSIONS:
        table[key] = Api(key, name, low, high, functools.partial(handlers[key], broker))
    table[18] = Api(
        18, "ApiVersions", 0, 3, table[18].handler, api_versions.unsupported_version_response
    )
    return table
