"""Kafka's feature flags as Sluice serves them (KIP-584): the features a Sluice broker and
controller support, by name, with the range of levels each can be finalized at.

Only ``transaction.version`` (KIP-890: 2 is "transaction version 2", Produce v12's implicit
add and EndTxn v5's epoch bump per transaction) is supported. Kafka's other features
(metadata.version, kraft.version, group.version, share.version, ...) describe Kafka's own
metadata log and coordinators, which Sluice does not have in that form: they are unknown
here, as a feature a Kafka controller does not know.

The finalized level lives in the controllers' metadata log (``FeatureLevel`` records,
UpdateFeatures); until one is written, the brokers' ``transaction.version`` setting is the
level (the cluster's bootstrap level, as Kafka's is set when its storage is formatted).
"""

from __future__ import annotations

from enum import IntEnum

TRANSACTION_VERSION = "transaction.version"

# name -> (lowest, highest) level this version of Sluice supports.
SUPPORTED: dict[str, tuple[int, int]] = {TRANSACTION_VERSION: (0, 2)}


class UpgradeType(IntEnum):
    """UpdateFeatures' upgrade_type (v1+; v0's allow_downgrade means SAFE_DOWNGRADE)."""

    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3
