"""Which cluster a job reads its topics from (jobs.source): only one it was pointed at, never
the working directory's ``./.sluice`` by default, and the source named in its log."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import pytest

from broker.config import load_config
from controller.service import ControllerService
from jobs import cli
from jobs.source import NoTopicSource, existing_topic_source, topic_source
from tests.fixtures.controller_settings import single_voter

POSTGRES = {
    "object.store": "s3",
    "s3.bucket": "b",
    "coordinator": "postgresql",
    "coordinator.dsn": "postgresql://sluice@db.example:6543/sluice",
}


def sluice_dev_metadata_log(data_dir: Path) -> None:
    """A real embedded controller's metadata log, as `sluice dev` leaves it."""

    async def go() -> None:
        service = ControllerService(
            single_voter(data_dir / "controller", secret="s", raft_options={"fsync": False})
        )
        await service.start()
        try:
            await service.wait_active()
        finally:
            await service.stop()

    asyncio.run(go())


@pytest.fixture
def dev_dir_in_cwd(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    sluice_dev_metadata_log(tmp_path / ".sluice")
    monkeypatch.chdir(tmp_path)
    return tmp_path / ".sluice"


def test_a_postgres_cluster_never_reads_the_working_directorys_sluice(
    dev_dir_in_cwd: Path,
) -> None:
    source = topic_source(load_config(POSTGRES))
    assert source.embedded_log is None
    assert source.description == (
        "the catalog in the PostgreSQL coordinator at db.example:6543/sluice"
    )


def test_a_job_that_names_no_cluster_is_refused(dev_dir_in_cwd: Path) -> None:
    with pytest.raises(NoTopicSource, match="names no cluster"):
        topic_source(load_config({}))


def test_a_named_sluice_dev_dir_is_read_from_its_metadata_log(dev_dir_in_cwd: Path) -> None:
    source = topic_source(load_config({"data.dir": str(dev_dir_in_cwd)}))
    assert source.embedded_log == str(dev_dir_in_cwd / "controller")
    assert str(dev_dir_in_cwd / "controller") in source.description


QUORUM_SECRET = "jobs-test-quorum-secret-0123"


def test_two_metadata_logs_are_refused(dev_dir_in_cwd: Path) -> None:
    config = load_config(
        {
            "data.dir": str(dev_dir_in_cwd),
            "controller.quorum.bootstrap.servers": "c1:9093",
            "controller.secret": QUORUM_SECRET,
        }
    )
    with pytest.raises(NoTopicSource, match="two metadata logs"):
        topic_source(config)
    quorum = topic_source(
        load_config(
            {"controller.quorum.bootstrap.servers": "c1:9093", "controller.secret": QUORUM_SECRET}
        )
    )
    assert quorum.description == "the controller quorum at c1:9093"


def test_a_named_data_dir_without_a_cluster_is_refused(tmp_path: Path) -> None:
    with pytest.raises(NoTopicSource, match="holds no sluice cluster"):
        existing_topic_source(load_config({"data.dir": str(tmp_path / "typo")}))


def test_the_command_refuses_before_starting_spark(
    dev_dir_in_cwd: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli.main(["analytics", "--out", "out"]) == 2
    assert "names no cluster" in capsys.readouterr().err
    # `--data-dir .sluice` names it (relative, as `sluice dev --jobs-every` passes it).
    args = argparse.Namespace(config=None, data_dir=".sluice", controller=None, overrides=[])
    config = cli.config_from(args)
    assert config.data_dir == str(dev_dir_in_cwd)
    assert topic_source(config).embedded_log == str(dev_dir_in_cwd / "controller")
