"""`sluice cluster up --brokers`: a count, or `cores` for one broker process per usable core."""

from __future__ import annotations

import pytest

from sluice import cli


def _brokers(*argv: str) -> int:
    args = cli._parser().parse_args(["cluster", "up", *argv])
    return int(args.brokers)


def test_default_and_explicit_counts_are_unchanged() -> None:
    assert _brokers() == 6
    assert _brokers("--brokers", "2") == 2
    assert _brokers("--brokers", "0") == 0


def test_cores_is_one_broker_per_core_this_process_may_use(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The affinity mask, not the machine's CPU count: a container or taskset may allow fewer.
    monkeypatch.setattr(cli.os, "sched_getaffinity", lambda pid: {0, 2, 5}, raising=False)
    monkeypatch.setattr(cli.os, "cpu_count", lambda: 64)
    assert _brokers("--brokers", "cores") == 3
    assert _brokers("--brokers", "CORES") == 3


def test_cores_falls_back_to_the_cpu_count_without_affinity(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delattr(cli.os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(cli.os, "cpu_count", lambda: 4)
    assert cli.usable_cores() == 4


@pytest.mark.parametrize("bad", ["two", "-1", ""])
def test_anything_else_is_a_usage_error(bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _brokers("--brokers", bad)
    assert exc.value.code == 2
    assert "--brokers" in capsys.readouterr().err
