"""scripts/request-path: the files one Produce and one Fetch pass through (bench/request_path).

The figures are the tool's to report, not this test's to fix: it checks that the trace covers
the pipeline from the frame's decode to the answer's encode, for both requests on both kinds
of topic, and that the summary it prints agrees with the path it recorded.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import request_path

CONNECTION = "broker/server/connection.py"


@pytest.fixture(scope="module")
def paths(tmp_path_factory: pytest.TempPathFactory) -> list[request_path.RequestPath]:
    return request_path.run(tmp_path_factory.mktemp("request-path"))


def test_one_produce_and_one_fetch_per_topic_kind(paths: list[request_path.RequestPath]) -> None:
    assert [(p.request, p.topic_kind) for p in paths] == [
        ("Produce", "diskless"),
        ("Fetch", "diskless"),
        ("Produce", "classic"),
        ("Fetch", "classic"),
    ]


def test_a_path_runs_from_the_decode_through_the_handler_to_the_encode(
    paths: list[request_path.RequestPath],
) -> None:
    handler = {"Produce": "broker/produce/", "Fetch": "broker/fetch/"}
    for p in paths:
        assert p.files[0] == CONNECTION and p.files[-1] == CONNECTION, p.files
        assert "protocol/codec.py" in p.files  # the request's decode and the answer's encode
        assert any(f.startswith(handler[p.request]) for f in p.files), p.files
        engine = f"broker/logs/{p.topic_kind}/"
        assert any(f.startswith(engine) for f in p.files), p.files
        # Only product files, relative to the repo, consecutive entries collapsed.
        assert all(f.split("/")[0] in request_path.PRODUCT_PACKAGES for f in p.files)
        assert all(a != b for a, b in zip(p.files, p.files[1:], strict=False))
        assert p.calls >= len(p.files)


def test_the_summary_agrees_with_the_path(paths: list[request_path.RequestPath]) -> None:
    for p in paths:
        figures = p.as_dict()
        assert figures["distinct"] == len(set(p.files))
        assert figures["entries"] == len(p.files)
        assert set(figures["reentered"]) == {f for f in p.files if p.files.count(f) > 1}
        assert CONNECTION in figures["reentered"]  # decoded, then admitted, then answered
        rendered = p.render()
        assert rendered.startswith(f"{p.request} on a {p.topic_kind} topic: ")
        assert f"{figures['distinct']} distinct files" in rendered
        json.dumps(figures)


def test_the_package_figure_is_the_path_by_package(
    paths: list[request_path.RequestPath],
) -> None:
    """The second figure is derived from the files and changes nothing in the first."""
    assert request_path.stage_of("broker/server/connection.py") == "broker/server"
    assert request_path.stage_of("broker/logs/classic/partition.py") == "broker/logs"
    assert request_path.stage_of("broker/node.py") == "broker"
    assert request_path.stage_of("storage/classic/log.py") == "storage"
    for p in paths:
        figures = p.as_dict()
        by_package = [request_path.stage_of(f) for f in p.files]
        collapsed = [s for i, s in enumerate(by_package) if i == 0 or by_package[i - 1] != s]
        assert figures["stages"] == collapsed
        assert figures["stage_entries"] == len(collapsed) <= figures["entries"]
        assert figures["stage_distinct"] == len(set(collapsed))
        assert set(figures["stages_reentered"]) == {s for s in collapsed if collapsed.count(s) > 1}
        assert f"by package: {figures['stage_distinct']} distinct" in p.render()


def test_the_script_is_executable() -> None:
    script = Path(request_path.ROOT) / "scripts" / "request-path"
    assert script.stat().st_mode & 0o111
    assert "bench.request_path" in script.read_text()
