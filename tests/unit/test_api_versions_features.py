"""ApiVersions' finalized transaction.version (KIP-890 part 2): Kafka 4.x producers use
transaction version 2 (Produce v12's implicit add, EndTxn v5's epoch bump per transaction)
only when the cluster finalizes it at 2; at 1 they stay on AddPartitionsToTxn, as before.
As Kafka 4.x, the version ranges do not depend on the level: the request's version decides.
The level is the controllers' metadata log's (UpdateFeatures) once written there, the
broker's transaction.version setting until then."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from broker.config import BrokerConfig
from broker.server import api_versions
from controller.image import MetadataImage
from controller.records import FeatureLevel
from tests.unit._handlers import decode_answer, request_and_context, settled


class Broker:
    def __init__(self, transaction_version: int, logged: int | None = None) -> None:
        self.config = BrokerConfig(transaction_version=transaction_version)
        self.controller: Any = None
        if logged is not None:
            image = MetadataImage()
            image.apply(FeatureLevel("transaction.version", logged))
            self.controller = SimpleNamespace(image=image, follower=SimpleNamespace(applied=42))


async def ask(broker: Broker, version: int = 4) -> Any:
    data = {"client_software_name": "t", "client_software_version": "1"} if version >= 3 else {}
    request, ctx = request_and_context(18, version, data)
    response = await settled(await api_versions.handle(broker, ctx, request))
    return decode_answer(response, 18, version)


def ranges(answer: Any) -> dict[int, tuple[int, int]]:
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


def finalized(answer: Any) -> dict[str, int]:
    return {f.name: f.max_version_level for f in answer.finalized_features}


async def test_transaction_version_2_is_finalized_by_default() -> None:
    got = await ask(Broker(2))
    assert finalized(got) == {"transaction.version": 2}
    assert got.finalized_features_epoch >= 0  # the client ignores an unknown epoch (-1)
    assert [(f.name, f.min_version, f.max_version) for f in got.supported_features] == [
        ("transaction.version", 0, 2)
    ]
    assert ranges(got)[0] == (3, 12) and ranges(got)[26] == (0, 5) and ranges(got)[28] == (0, 5)
    # Older ApiVersions answers carry no features, only the ranges.
    assert ranges(await ask(Broker(2), version=2))[26] == (0, 5)


async def test_transaction_version_1_is_finalized_and_the_ranges_stay() -> None:
    got = await ask(Broker(1))
    assert finalized(got) == {"transaction.version": 1}
    # Kafka 4.x serves Produce v12 and EndTxn v5 at any level (the client chooses by it).
    assert ranges(got)[0] == (3, 12) and ranges(got)[26] == (0, 5) and ranges(got)[28] == (0, 5)


async def test_the_metadata_logs_level_overrides_the_configured_one() -> None:
    got = await ask(Broker(2, logged=1))
    assert finalized(got) == {"transaction.version": 1}
    assert got.finalized_features_epoch == 42  # the metadata index applied, as Kafka's
    # Disabled (level 0): not finalized at all, as Kafka lists it.
    assert finalized(await ask(Broker(2, logged=0))) == {}


async def test_v3_leaves_out_supported_features_whose_range_starts_at_0() -> None:
    # KIP-1022: a v3 client cannot take a supported level 0, so Kafka leaves the feature
    # out of supported_features (it stays finalized).
    got = await ask(Broker(2), version=3)
    assert list(got.supported_features) == []
    assert finalized(got) == {"transaction.version": 2}
