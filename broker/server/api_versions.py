"""ApiVersions: the version ranges of every API this broker speaks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from broker.metadata import features
from common.features import SUPPORTED
from protocol.build import build

if TYPE_CHECKING:
    from broker.security.request_context import RequestContext

# key, name, min, max
VERSIONS: list[tuple[int, str, int, int]] = [
    # v12 is KIP-890 part 2 (the broker adds the partition to the transaction itself). As
    # Kafka 4.x, the request's version decides, whatever transaction.version is finalized
    # at: clients choose transaction version 2's versions by the finalized feature.
    (0, "Produce", 3, 12),
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
    (18, "ApiVersions", 0, 4),
    (19, "CreateTopics", 2, 7),
    (20, "DeleteTopics", 1, 6),
    (21, "DeleteRecords", 0, 2),
    (22, "InitProducerId", 0, 5),
    (23, "OffsetForLeaderEpoch", 2, 4),
    (24, "AddPartitionsToTxn", 0, 5),
    (25, "AddOffsetsToTxn", 0, 4),
    # v5 is KIP-890 part 2 (an epoch bump per transaction); served as Produce v12 is.
    (26, "EndTxn", 0, 5),
    # Sent by transaction coordinators to the leaders of classic partitions.
    (27, "WriteTxnMarkers", 1, 1),
    # v5: the group joins the transaction with its first offsets (TV2 clients send no
    # AddOffsetsToTxn).
    (28, "TxnOffsetCommit", 0, 5),
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
    # Forwarded to the controller quorum, which records the levels (broker/admin/features.py).
    (57, "UpdateFeatures", 0, 2),
    # Answered from the controllers' Raft status (broker/metadata/describe_quorum.py).
    (55, "DescribeQuorum", 0, 2),
    (60, "DescribeCluster", 0, 1),
    (61, "DescribeProducers", 0, 0),
    # Forwarded to the controller quorum (broker/admin/unregister_broker.py).
    (64, "UnregisterBroker", 0, 0),
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


def _api_keys() -> list[dict[str, int]]:
    return [{"api_key": k, "min_version": lo, "max_version": hi} for k, _, lo, hi in VERSIONS]


def _features(broker: Any, version: int) -> dict[str, Any]:
    """ApiVersions v3's features (tagged fields): transaction.version is what Kafka 4.x
    producers read to choose KIP-890 part 2 (TransactionManager). As Kafka's, a feature
    finalized at level 0 (disabled) is left out of the finalized list, and below v4 so is a
    supported feature whose range starts at 0 (KIP-1022: older clients cannot take a level
    0), which transaction.version's does: a v3 answer lists it as finalized only."""
    levels = features.finalized(broker.config, broker.controller)
    return {
        "supported_features": [
            {"name": name, "min_version": low, "max_version": high}
            for name, (low, high) in sorted(SUPPORTED.items())
            if version >= 4 or low > 0
        ],
        "finalized_features_epoch": features.epoch(broker.controller),
        "finalized_features": [
            {"name": name, "max_version_level": level, "min_version_level": level}
            for name, level in sorted(levels.items())
            if level > 0
        ],
    }


async def handle(broker: Any, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version
    body: dict[str, Any] = {"error_code": 0, "api_keys": _api_keys(), "throttle_time": 0}
    if version >= 3:
        body.update(_features(broker, version))
    return ctx.respond(body)


def unsupported_version_response() -> Any:
    """Kafka answers a too-new ApiVersions request at v0 with the supported ranges."""
    return build(
        load_response_schema(18, 0),
        {"error_code": int(ErrorCode.unsupported_version), "api_keys": _api_keys()},
    )
