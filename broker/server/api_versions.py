"""ApiVersions: the version ranges of every API this broker speaks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.index import load_response_schema
from kio.schema.errors import ErrorCode

from broker.server.api_table import VERSIONS
from protocol.build import build

if TYPE_CHECKING:
    from broker.node import Broker
    from broker.server.connection import RequestContext


def _api_keys() -> list[dict[str, int]]:
    return [{"api_key": k, "min_version": lo, "max_version": hi} for k, _, lo, hi in VERSIONS]


async def handle(broker: Broker, ctx: RequestContext, request: Any) -> Any:
    return ctx.respond({"error_code": 0, "api_keys": _api_keys(), "throttle_time": 0})


def unsupported_version_response() -> Any:
    """Kafka answers a too-new ApiVersions request at v0 with the supported ranges."""
    return build(
        load_response_schema(18, 0),
        {"error_code": int(ErrorCode.unsupported_version), "api_keys": _api_keys()},
    )
