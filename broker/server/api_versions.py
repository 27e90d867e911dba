"""ApiVersions: the version ranges of every API this broker speaks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from protocol.build import build

if TYPE_CHECKING:
    from broker.security.request_context import RequestContext

# key, name, min, max
VERSIONS: list[tuple[int, str, int, int]] = [
    # v12 is KIP-890 part 2 (the broker adds the partition to the transaction itself):
    # served with transaction.version 2 only (versions()).
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
    # v5 is KIP-890 part 2 (an epoch bump per transaction), with transaction.version 2 only.
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
    # Answered from the controllers' Raft status (broker/metadata/describe_quorum.py).
    (55, "DescribeQuorum", 0, 2),
    (60, "DescribeCluster", 0, 1),
    (61, "DescribeProducers", 0, 0),
    (65, "DescribeTransactions", 0, 0),
    (66, "ListTransactions", 0, 2),
    # KIP-848's consumer group protocol (broker/groups/consumer_group_handler.py); v1
    # has the client generate its member id.
    (68, "ConsumerGroupHeartbeat", 0, 1),
    (69, "ConsumerGroupDescribe", 0, 1),
    (75, "DescribeTopicPartitions", 0, 0),
    # Share groups (KIP-932), as Kafka 4.2 serves them: broker/groups/share/.
    (76, "ShareGroupHeartbeat", 1, 1),
    (77, "ShareGroupDescribe", 1, 1),
    (78, "ShareFetch", 1, 2),
    (79, "ShareAcknowledge", 1, 2),
    (90, "DescribeShareGroupOffsets", 0, 1),
    (91, "AlterShareGroupOffsets", 0, 0),
    (92, "DeleteShareGroupOffsets", 0, 0),
]


# KIP-890 part 2's versions, served (and advertised) with transaction.version 2.
# TxnOffsetCommit v5: the group joins the transaction with its first offsets (TV2 clients
# send no AddOffsetsToTxn).
TV2_MAX_VERSIONS = {0: 12, 26: 5, 28: 5}
TRANSACTION_VERSION_FEATURE = "transaction.version"
# Finalized features change only with a broker's configuration: one epoch (Kafka's is the
# metadata offset; clients only compare epochs, and -1 would mean "unknown").
FINALIZED_FEATURES_EPOCH = 1


def versions(transaction_version: int = 1) -> list[tuple[int, str, int, int]]:
    """VERSIONS as served at this finalized transaction.version."""
    if transaction_version < 2:
        return list(VERSIONS)
    return [(k, name, lo, TV2_MAX_VERSIONS.get(k, hi)) for k, name, lo, hi in VERSIONS]


def _api_keys(transaction_version: int = 1) -> list[dict[str, int]]:
    return [
        {"api_key": k, "min_version": lo, "max_version": hi}
        for k, _, lo, hi in versions(transaction_version)
    ]


def _features(transaction_version: int) -> dict[str, Any]:
    """ApiVersions v3's features (tagged fields): transaction.version is what Kafka 4.x
    producers read to choose KIP-890 part 2 (TransactionManager)."""
    return {
        "supported_features": [
            {"name": TRANSACTION_VERSION_FEATURE, "min_version": 0, "max_version": 2}
        ],
        "finalized_features_epoch": FINALIZED_FEATURES_EPOCH,
        "finalized_features": [
            {
                "name": TRANSACTION_VERSION_FEATURE,
                "max_version_level": transaction_version,
                "min_version_level": transaction_version,
            }
        ],
    }


async def handle(broker: Any, ctx: RequestContext, request: Any) -> Any:
    tv = broker.config.transaction_version
    body: dict[str, Any] = {"error_code": 0, "api_keys": _api_keys(tv), "throttle_time": 0}
    if ctx.header.api_version >= 3:
        body.update(_features(tv))
    return ctx.respond(body)


def unsupported_version_response() -> Any:
    """Kafka answers a too-new ApiVersions request at v0 with the supported ranges."""
    return build(
        load_response_schema(18, 0),
        {"error_code": int(ErrorCode.unsupported_version), "api_keys": _api_keys()},
    )
