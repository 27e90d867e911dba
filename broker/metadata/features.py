"""The finalized feature levels this broker advertises (ApiVersions v3+, ``kafka-features
describe``): the controllers' metadata log's (FeatureLevel records, UpdateFeatures) where it
has one, else the broker's configured level (``transaction.version``, the cluster's
bootstrap level). Without a controller quorum the configuration is all there is."""

from __future__ import annotations

from typing import TYPE_CHECKING

from common.features import SUPPORTED, TRANSACTION_VERSION

if TYPE_CHECKING:
    from broker.config import BrokerConfig
    from broker.metadata.controller_catalog import ControllerCatalog

# Without a controller the levels change only with the configuration: one epoch. (Kafka's
# epoch is the metadata offset; clients keep the answer with the highest, and -1 means
# "unknown".)
STATIC_EPOCH = 1


def configured(config: BrokerConfig) -> dict[str, int]:
    """The levels this broker's configuration finalizes (the log's override them)."""
    return {TRANSACTION_VERSION: config.transaction_version}


def finalized(config: BrokerConfig, controller: ControllerCatalog | None) -> dict[str, int]:
    """Every supported feature's finalized level (0: disabled)."""
    levels = configured(config)
    if controller is not None:
        logged = controller.image.features
        levels.update({name: logged[name] for name in SUPPORTED if name in logged})
    return levels


def epoch(controller: ControllerCatalog | None) -> int:
    """The finalized levels' epoch: the metadata log index this broker has applied."""
    if controller is None:
        return STATIC_EPOCH
    return max(STATIC_EPOCH, controller.follower.applied)
