"""No open admin path: a controller, and a broker that talks to one, refuse to start without a
secret that could not be guessed, unless the operator says the network is trusted."""

from __future__ import annotations

from pathlib import Path

import pytest

from broker.config import load_config
from controller.config import load_settings
from controller.service import ControllerService, ControllerSettings
from sluice.cli import main

VOTERS = {"controller.quorum.voters": "1@127.0.0.1:19093"}
GOOD = "k3Jq9sZ0vY_random_enough"


@pytest.mark.parametrize("secret", ["", "change-me", "CHANGE-ME", "test", "short-secret"])
def test_a_controller_refuses_a_missing_or_guessable_secret(secret: str) -> None:
    with pytest.raises(ValueError, match=r"controller\.secret"):
        load_settings({**VOTERS, "controller.secret": secret})


def test_a_controller_starts_with_a_random_secret_or_when_told_the_network_is_trusted() -> None:
    assert load_settings({**VOTERS, "controller.secret": GOOD}).secret == GOOD
    settings = load_settings({**VOTERS, "controller.insecure.allow.unauthenticated": "true"})
    assert settings.secret == "" and settings.allow_unauthenticated


def test_the_secret_may_come_from_a_file(tmp_path: Path) -> None:
    path = tmp_path / "secret"
    path.write_text(GOOD + "\n")
    settings = load_settings({**VOTERS, "controller.secret": f"${{file:{path}}}"})
    assert settings.secret == GOOD


def test_the_service_itself_refuses_no_secret(tmp_path: Path) -> None:
    """The built-in Raft key is gone: without a secret nothing signs the log's messages."""
    settings = ControllerSettings(1, {1: ("127.0.0.1", 0)}, "127.0.0.1", 0, tmp_path)
    with pytest.raises(ValueError, match=r"controller\.secret is not set"):
        ControllerService(settings)


@pytest.mark.parametrize("secret", ["", "change-me", "x"])
def test_a_broker_pointed_at_controllers_refuses_a_guessable_secret(secret: str) -> None:
    with pytest.raises(ValueError, match=r"controller\.secret"):
        load_config({"controller.quorum.bootstrap.servers": "c1:9094", "controller.secret": secret})
    allowed = load_config(
        {
            "controller.quorum.bootstrap.servers": "c1:9094",
            "controller.insecure.allow.unauthenticated": "true",
        }
    )
    assert allowed.controller_mode
    # Without controllers (sluice dev's embedded one has its own random secret) no secret.
    assert not load_config({}).controller_mode


def test_sluice_controller_without_a_secret_exits_with_the_reason(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    status = main(
        [
            "controller",
            "-o",
            "controller.quorum.voters=1@127.0.0.1:19093",
            "-o",
            f"data.dir={tmp_path}",
        ]
    )
    assert status == 2
    assert "controller.secret is not set" in capsys.readouterr().err
