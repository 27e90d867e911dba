"""Client AZ extraction: where the marker may sit in client.id, and typos that must not match."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from broker.metadata.client_az import az_from_client_id, client_az


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
