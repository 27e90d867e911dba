"""What the benches share around their measurements: the report line, the broker config
overrides (``-o KEY=VALUE``) and the one-broker cluster on SeaweedFS + PostgreSQL that the
s3 targets run on (``bench.run``, ``bench.commit_latency``, ``bench.txn_markers``). The
figures themselves are computed in ``bench.stats``; the scratch directory is
``bench.workdir``."""

from __future__ import annotations

import argparse
import contextlib
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sluice.cluster import LocalCluster


def say(line: str = "") -> None:
    # Flushed at once: a bench runs for minutes, its output often piped into a file.
    print(line, flush=True)


def add_broker_options(ap: argparse.ArgumentParser, applies_to: str) -> None:
    """The ``-o KEY=VALUE`` argument (``args.options``, repeatable): a broker config of
    every broker the bench starts; ``applies_to`` says which, in the help."""
    ap.add_argument(
        "-o",
        dest="options",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help=f"broker config override ({applies_to})",
    )


def broker_options(pairs: Iterable[str]) -> dict[str, str]:
    """``-o`` values as configs (a later KEY wins, as in a config file)."""
    options: dict[str, str] = {}
    for pair in pairs:
        key, value = pair.split("=", 1)
        options[key] = value
    return options


def as_arguments(options: Mapping[str, str]) -> list[str]:
    """Configs as ``-o`` arguments again, for ``sluice dev`` or another bench's ``main``."""
    return [arg for key, value in options.items() for arg in ("-o", f"{key}={value}")]


@contextlib.contextmanager
def one_broker(root: Path, options: Mapping[str, str]) -> Iterator[LocalCluster]:
    """One broker of a LocalCluster under ``root`` (SeaweedFS, PostgreSQL, no controller),
    stopped on the way out."""
    # Imported here: the benches that start no cluster need none of the launcher.
    from sluice.cluster import LocalCluster

    with LocalCluster(root, brokers=1, broker_options=dict(options)) as cluster:
        yield cluster
