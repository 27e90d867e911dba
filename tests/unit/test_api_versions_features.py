"""ApiVersions' finalized transaction.version (KIP-890 part 2): Kafka 4.x producers use
transaction version 2 (Produce v12's implicit add, EndTxn v5's epoch bump per transaction)
only when the broker finalizes it at 2; at 1 they stay on AddPartitionsToTxn, as before."""

from __future__ import annotations

from typing import Any

from broker.config import BrokerConfig
from broker.server import api_versions
from tests.unit._handlers import decode_answer, request_and_context, settled


class Broker:
    def __init__(self, transaction_version: int) -> None:
        self.config = BrokerConfig(transaction_version=transaction_version)


async def ask(transaction_version: int, version: int = 3) -> Any:
    data = {"client_software_name": "t", "client_software_version": "1"} if version >= 3 else {}
    request, ctx = request_and_context(18, version, data)
    response = await settled(await api_versions.handle(Broker(transaction_version), ctx, request))
    return decode_answer(response, 18, version)


def ranges(answer: Any) -> dict[int, tuple[int, int]]:
    return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys}


def finalized(answer: Any) -> dict[str, int]:
    return {f.name: f.max_version_level for f in answer.finalized_features}


async def test_transaction_version_1_keeps_clients_on_version_1() -> None:
    got = await ask(1)
    assert finalized(got) == {"transaction.version": 1}
    assert got.finalized_features_epoch >= 0  # the client ignores an unknown epoch (-1)
    assert ranges(got)[0] == (3, 11) and ranges(got)[26] == (0, 4) and ranges(got)[28] == (0, 4)


async def test_transaction_version_2_is_finalized_with_produce_v12_and_end_txn_v5() -> None:
    got = await ask(2)
    assert finalized(got) == {"transaction.version": 2}
    assert [(f.name, f.min_version, f.max_version) for f in got.supported_features] == [
        ("transaction.version", 0, 2)
    ]
    assert ranges(got)[0] == (3, 12) and ranges(got)[26] == (0, 5) and ranges(got)[28] == (0, 5)
    # Older ApiVersions answers carry no features, only the ranges.
    assert ranges(await ask(2, version=2))[26] == (0, 5)
