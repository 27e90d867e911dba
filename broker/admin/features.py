"""UpdateFeatures (key 57, ``kafka-features upgrade|downgrade|disable``): a Kafka broker
forwards it to its active controller, which checks ALTER on the cluster and the updates
(controller/feature_admin.py) and records the new levels in the metadata log, so every
broker's ApiVersions finalizes them. The answer: v0/v1 list every feature with NONE when
the update succeeded, and nothing but the top-level error when it failed; v2 has the
top-level error only (Kafka 4.x's QuorumController.updateFeatures).

Without a controller quorum the levels are the brokers' configuration: UNSUPPORTED_VERSION,
as the other controller-only APIs answer then.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kio.schema.errors import ErrorCode

from broker.metadata import features
from broker.metadata.controller_client import ControllerRefused
from broker.security import access
from common.acl import AclOperation
from common.features import UpgradeType
from controller.feature_admin import FeatureUpdate

if TYPE_CHECKING:
    from broker.metadata.view import HandlerView
    from broker.security.request_context import RequestContext

CATCH_UP_S = 10.0
NO_CONTROLLER = (
    "Feature levels are kept in the controllers' metadata log: this broker runs without a "
    "controller quorum (set transaction.version in the brokers' configuration)"
)
FAILED_FOR_ALL = "The update failed for all features since the following feature had an error: "


def _update(item: Any, version: int) -> FeatureUpdate:
    if version == 0:  # v0: allow_downgrade instead of an upgrade type
        kind = UpgradeType.SAFE_DOWNGRADE if item.allow_downgrade else UpgradeType.UPGRADE
        return FeatureUpdate(item.feature, int(item.max_version_level), int(kind))
    return FeatureUpdate(item.feature, int(item.max_version_level), int(item.upgrade_type))


async def update_features(broker: HandlerView, ctx: RequestContext, request: Any) -> Any:
    version = ctx.header.api_version

    def answer(code: ErrorCode | int, message: str | None) -> Any:
        body: dict[str, Any] = {
            "throttle_time": 0,
            "error_code": int(code),
            "error_message": message,
            "results": [],
        }
        if int(code) == 0 and version <= 1:
            body["results"] = [
                {"feature": item.feature, "error_code": 0, "error_message": None}
                for item in request.feature_updates
            ]
        return ctx.respond(body)

    if not access.cluster(broker, ctx, AclOperation.ALTER):  # Kafka: ALTER on the cluster
        return answer(ErrorCode.cluster_authorization_failed, None)
    if broker.controller is None:
        return answer(ErrorCode.unsupported_version, NO_CONTROLLER)
    updates = [_update(item, version) for item in request.feature_updates]
    validate_only = bool(getattr(request, "validate_only", False))
    try:
        result, applied = await broker.controller.client.update_features(
            updates, validate_only, features.configured(broker.config)
        )
    except ControllerRefused as exc:
        return answer(exc.code, exc.message)
    if result.error_code != ErrorCode.none:
        return answer(result.error_code, FAILED_FOR_ALL + (result.error_message or ""))
    # The answer says the level is finalized: so does this broker's next ApiVersions.
    await broker.controller.follower.wait_for(applied, CATCH_UP_S)
    return answer(ErrorCode.none, None)
