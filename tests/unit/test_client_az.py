"""Client AZ extraction: where the marker may sit in client.id, and typos that must not match."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.metadata.client_az import ClientBytes, az_from_client_id, client_az
from broker.server.metrics import METRICS


@pytest.mark.parametrize(
    ("client_id", "az"),
    [
        ("diskless_az=us-east-1a", "us-east-1a"),  # at start
        ("my-app,diskless_az=us-east-1a", "us-east-1a"),  # after comma
        ("my-app diskless_az=us-east-1a", "us-east-1a"),  # after space
        ("payment-producer,diskless_az=us-east-1a", "us-east-1a"),
        ("analytics-consumer,diskless_az=us-west-2b", "us-west-2b"),
        ("app,diskless_az=az-a,team=x", "az-a"),  # anywhere, ends at the next comma
        ("app,diskless_az=az-b other", "az-b"),  # ends at a space
    ],
)
def test_valid_patterns(client_id: str, az: str) -> None:
    assert az_from_client_id(client_id) == az


@pytest.mark.parametrize(
    "client_id",
    [
        "my-app,diskles_az=us-east-1a",  # typo in 'diskless'
        "my-app:diskless_az=us-east-1a",  # wrong separator
        "my-appdiskless_az=us-east-1a",  # no separator at all
        "my-app,diskless_az=",  # empty AZ
        "my-app",
        "",
        None,
    ],
)
def test_unaware(client_id: str | None) -> None:
    assert az_from_client_id(client_id) is None


def test_protocol_rack_takes_precedence() -> None:
    # The KIP-1163 seam: a Metadata request carrying a rack wins over client.id.
    request = SimpleNamespace(rack_id="az-c")
    assert client_az("app,diskless_az=az-a", request) == "az-c"
    assert client_az("app,diskless_az=az-a", SimpleNamespace(rack_id="")) == "az-a"
    assert client_az("app,diskless_az=az-a", object()) == "az-a"
    assert client_az("app", None) is None


def _client_bytes(direction: str, az: str, rack: str) -> float:
    labels = {"direction": direction, "client_az": az, "broker_rack": rack}
    return METRICS.registry.get_sample_value("sluice_client_bytes_total", labels) or 0.0


def test_client_bytes_label_an_az_by_the_live_brokers_racks_until_they_change() -> None:
    """An AZ naming no live broker's rack is "other" (client ids are free text); the labels
    are made again when the membership says the live brokers changed."""
    live = [SimpleNamespace(rack="unit-az-a")]
    asked: list[int] = []

    def brokers() -> list[SimpleNamespace]:
        asked.append(1)
        return live

    meter = ClientBytes(brokers, "unit-az-a")
    labels = [(d, az) for d in ("produce", "fetch") for az in ("unit-az-a", "other", "none")]
    before = {(d, az): _client_bytes(d, az, "unit-az-a") for d, az in labels}

    def added(direction: str, az: str) -> float:
        return _client_bytes(direction, az, "unit-az-a") - before[direction, az]

    meter.count("produce", "unit-az-a", 10)
    meter.count("produce", "unit-az-b", 5)
    meter.count("produce", None, 3)
    meter.count("produce", "unit-az-a", 0)  # nothing counted, nothing made
    meter.count_fetch("unit-az-a", [b"abcd", None, b"ef"])
    assert added("produce", "unit-az-a") == 10
    assert added("produce", "other") == 5
    assert added("produce", "none") == 3
    assert added("fetch", "unit-az-a") == 6
    assert len(asked) == 4  # once per (direction, AZ), not per request
    meter.count("produce", "unit-az-b", 5)
    assert len(asked) == 4
    live.append(SimpleNamespace(rack="unit-az-b"))
    meter.live_changed()
    meter.count("produce", "unit-az-b", 7)
    assert len(asked) == 5
    assert _client_bytes("produce", "unit-az-b", "unit-az-a") == 7
