"""DescribeLogDirs (``kafka-log-dirs.sh``, AdminClient.describeLogDirs): the local logs of
classic partitions this broker holds, with their sizes, and the data directory's disk space.

Diskless partitions have no local log (their data is in object storage), so no directory
lists them, as a tiered-only log would not appear either. There is one directory per broker
(``data.dir``; no JBOD)."""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Any, Protocol

from kio.schema.errors import ErrorCode

from broker.metadata.view import HandlerView
from broker.security import access
from common.acl import AclOperation

if TYPE_CHECKING:
    from broker.logs.classic.replica_manager import ReplicaManager
    from broker.security.request_context import RequestContext


class LogDirsView(HandlerView, Protocol):
    @property
    def classic(self) -> ReplicaManager | None: ...


async def describe_log_dirs(broker: LogDirsView, ctx: RequestContext, request: Any) -> Any:
    if not access.cluster(broker, ctx, AclOperation.DESCRIBE):
        # As Kafka: no directories (v3+ also says why).
        return ctx.respond(
            {
                "throttle_time": 0,
                "error_code": int(ErrorCode.cluster_authorization_failed),
                "results": [],
            }
        )
    wanted = (
        None
        if request.topics is None
        else {(t.topic, int(i)) for t in request.topics for i in t.partitions}
    )
    topics: dict[str, list[dict[str, Any]]] = {}
    held = broker.classic.partitions.values() if broker.classic is not None else ()
    for p in sorted(held, key=lambda p: (p.topic, p.index)):
        if wanted is not None and (p.topic, p.index) not in wanted:
            continue
        topics.setdefault(p.topic, []).append(
            {
                "partition_index": p.index,
                "partition_size": p.log.size,
                # Kafka's lag of a current (not future) log: how far the high watermark is
                # past this replica's end, never negative.
                "offset_lag": max(p.high_watermark - p.log.log_end_offset, 0),
                "is_future_key": False,
            }
        )
    directory = os.path.abspath(broker.config.data_dir)
    try:
        usage = shutil.disk_usage(directory)
        total, usable, error = usage.total, usage.free, ErrorCode.none
    except OSError:
        total, usable, error = -1, -1, ErrorCode.kafka_storage_error
    return ctx.respond(
        {
            "throttle_time": 0,
            "error_code": 0,
            "results": [
                {
                    "error_code": int(error),
                    "log_dir": directory,
                    "topics": [{"name": n, "partitions": parts} for n, parts in topics.items()],
                    "total_bytes": total,
                    "usable_bytes": usable,
                }
            ],
        }
    )
