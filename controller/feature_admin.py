"""UpdateFeatures on the active controller (KIP-584, ``kafka-features upgrade|downgrade|
disable``): Kafka 4.x's rules (its FeatureControlManager), checked for every update before
any is recorded, the request all or nothing:

- an unknown upgrade type, a level below 0, a feature this Sluice does not support or a
  level outside its supported range (common/features.py): INVALID_UPDATE_VERSION;
- a lower level than the finalized one needs a downgrade type (SAFE or UNSAFE), a higher
  one the UPGRADE type: INVALID_UPDATE_VERSION otherwise; the same level is accepted;
- ``validate_only``: checked, nothing recorded.

A feature named twice takes its last update (Kafka collects the updates in a map). The
finalized level of a feature the log has no FeatureLevel for is the brokers' configured one,
which the forwarding broker sends along (``defaults``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kio.schema.errors import ErrorCode

from common.features import SUPPORTED, UpgradeType

from .image import MetadataImage
from .records import FeatureLevel, Record
from .requests import ErrorResult, Outcome


@dataclass(frozen=True)
class FeatureUpdate:
    name: str
    level: int
    upgrade_type: int = int(UpgradeType.UPGRADE)


def update_features(
    image: MetadataImage,
    updates: Sequence[FeatureUpdate],
    validate_only: bool,
    defaults: Mapping[str, int],
) -> Outcome[ErrorResult]:
    last = {u.name: u for u in updates}
    records: list[Record] = []
    for update in last.values():
        current = image.features.get(update.name, int(defaults.get(update.name, 0)))
        problem = _problem(update, current)
        if problem is not None:
            message = f"Invalid update version {update.level} for feature {update.name}. {problem}"
            return Outcome([], ErrorResult(ErrorCode.invalid_update_version, message))
        records.append(FeatureLevel(update.name, update.level))
    return Outcome([] if validate_only else records, ErrorResult(ErrorCode.none))


def _problem(update: FeatureUpdate, current: int) -> str | None:
    if update.upgrade_type not in set(UpgradeType):
        return "The controller does not support the given upgrade type."
    if update.level < 0:
        return "A feature version cannot be less than 0."
    supported = SUPPORTED.get(update.name)
    if supported is None:
        return "This controller does not support this feature."
    low, high = supported
    if not low <= update.level <= high:
        return f"This controller only supports versions {low}-{high}."
    if update.level < current and update.upgrade_type == UpgradeType.UPGRADE:
        return (
            "Can't downgrade the version of this feature without setting the upgrade type "
            "to either safe or unsafe downgrade."
        )
    if update.level > current and update.upgrade_type != UpgradeType.UPGRADE:
        return "Can't downgrade to a newer version."
    return None
