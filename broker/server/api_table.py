"""The API table: which handler answers each Kafka API key, in the version range
``api_versions.VERSIONS`` gives (what the handlers implement and kio can encode; they
cover what the stock clients send).

Each handler takes the services it uses, as a Protocol it names (``broker.metadata.view``
and the ones beside the handlers); ``Services`` is all of them, which the Broker
(broker/node.py) provides. The table binds them to every handler once.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Protocol

from broker.admin import (
    acls,
    client_quotas_handler,
    configs,
    elect_leaders,
    features,
    log_dirs,
    reassignments,
    records_admin,
    scram_credentials,
    topics_admin,
    unregister_broker,
)
from broker.admin.log_dirs import LogDirsView
from broker.admin.topics_admin import TopicsAdminView
from broker.fetch import fetch_handler, leader_epoch, list_offsets
from broker.fetch.fetch_handler import FetchView
from broker.groups import (
    consumer_group_handler,
    find_coordinator,
    group_admin_handler,
    group_membership,
    group_offsets_handler,
)
from broker.groups.group_offsets_handler import OffsetsView
from broker.groups.share import admin as share_admin
from broker.groups.share import handlers as share_handlers
from broker.groups.share.service import ShareView
from broker.metadata import (
    describe_cluster,
    describe_quorum,
    describe_topic_partitions,
    metadata_handler,
)
from broker.metadata.metadata_handler import MetadataView
from broker.produce import produce_handler
from broker.produce.produce_handler import ProduceView
from broker.server import api_versions
from broker.server.api_versions import VERSIONS
from broker.server.connection import Api, ApiTable
from broker.transactions import init_producer_id, transactions_handler, write_txn_markers
from broker.transactions.init_producer_id import InitProducerIdView
from broker.transactions.transactions_handler import TransactionsView

if TYPE_CHECKING:
    from broker.security.request_context import RequestContext


class Services(
    ProduceView,
    FetchView,
    TransactionsView,
    OffsetsView,
    InitProducerIdView,
    TopicsAdminView,
    LogDirsView,
    MetadataView,
    ShareView,
    Protocol,
):
    """Everything the handlers use: the union of their Protocols."""


async def _answered_by_connection(broker: Services, ctx: RequestContext, request: Any) -> Any:
    # SaslHandshake and SaslAuthenticate change the connection's state: broker/server/connection.py
    # answers them itself and never calls this.
    raise AssertionError("SASL requests are answered by the connection")


def build_api_table(broker: Services) -> ApiTable:
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
        57: features.update_features,
        55: describe_quorum.handle,
        60: describe_cluster.handle,
        61: transactions_handler.describe_producers,
        64: unregister_broker.handle,
        65: transactions_handler.describe_transactions,
        66: transactions_handler.list_transactions,
        68: consumer_group_handler.consumer_group_heartbeat,
        69: consumer_group_handler.consumer_group_describe,
        75: describe_topic_partitions.handle,
        76: share_handlers.heartbeat,
        77: share_handlers.describe,
        78: share_handlers.share_fetch,
        79: share_handlers.share_acknowledge,
        90: share_admin.describe_offsets,
        91: share_admin.alter_offsets,
        92: share_admin.delete_offsets,
    }
    table: ApiTable = {}
    for key, name, low, high in VERSIONS:
        table[key] = Api(key, name, low, high, functools.partial(handlers[key], broker))
    table[18] = Api(
        18, "ApiVersions", 0, 4, table[18].handler, api_versions.unsupported_version_response
    )
    return table
