"""One module per Kafka API; this table says which versions each one speaks.

Version ranges are what the handlers implement and kio can encode; they cover
what the stock clients send (see DESIGN §5).
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ..node import Broker
    from ..server import RequestContext

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
    (18, "ApiVersions", 0, 3),
    (19, "CreateTopics", 2, 7),
    (20, "DeleteTopics", 1, 6),
    (21, "DeleteRecords", 0, 2),
    (22, "InitProducerId", 0, 5),
    (23, "OffsetForLeaderEpoch", 2, 4),
    (32, "DescribeConfigs", 1, 4),
    (37, "CreatePartitions", 0, 3),
    (44, "IncrementalAlterConfigs", 0, 1),
    (60, "DescribeCluster", 0, 1),
]


def build_api_table(broker: Broker) -> ApiTable:
    from . import (
        api_versions,
        cluster,
        configs,
        fetch,
        leader_epoch,
        list_offsets,
        metadata,
        produce,
        producer_ids,
        records_admin,
        topics_admin,
    )

    handlers: dict[int, Callable[..., Awaitable[Any]]] = {
        0: produce.handle,
        1: fetch.handle,
        2: list_offsets.handle,
        3: metadata.handle,
        18: api_versions.handle,
        19: topics_admin.create_topics,
        20: topics_admin.delete_topics,
        21: records_admin.delete_records,
        22: producer_ids.handle,
        23: leader_epoch.handle,
        32: configs.describe_configs,
        37: topics_admin.create_partitions,
        44: configs.incremental_alter_configs,
        60: cluster.handle,
    }
    table: ApiTable = {}
    for key, name, low, high in VERSIONS:
        table[key] = Api(key, name, low, high, functools.partial(handlers[key], broker))
    table[18] = Api(
        18, "ApiVersions", 0, 3, table[18].handler, api_versions.unsupported_version_response
    )
    return table
