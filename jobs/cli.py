"""``sluice jobs analytics|merge|compact|iceberg|schedule``.

Storage comes from a broker config (``--config broker.properties``, ``-o key=value``,
``SLUICE_*`` variables: the same layers as ``sluice broker``), or ``--data-dir`` for the
embedded default (local objects + SQLite, as ``sluice dev`` keeps them). Topics come from
where the cluster keeps them: a controller quorum's metadata log (``--controller`` or
``controller.quorum.bootstrap.servers``), the embedded controller's log in a ``sluice dev``
data dir, or the catalog of a cluster without a controller. Each command
prints one JSON summary line; the exit code is 1 when a task failed.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from typing import Any

from broker.config import BrokerConfig, load_config, parse_config_file

log = logging.getLogger("sluice.jobs")


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--config", help="broker properties file naming the storage backends")
    p.add_argument(
        "--data-dir",
        help="the embedded default's data dir (local objects + SQLite, topics from the "
        "embedded controller's metadata log, as `sluice dev` keeps them)",
    )
    p.add_argument(
        "--controller",
        metavar="HOST:PORT,...",
        help="the controllers' HTTP API (controller.quorum.bootstrap.servers): topics come "
        "from the quorum's metadata log; controller.secret from the config or "
        "SLUICE_CONTROLLER_SECRET",
    )
    p.add_argument(
        "-o",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a broker config on top of the file and SLUICE_* variables",
    )
    p.add_argument("--master", help="Spark master (default local[2] or SLUICE_SPARK_MASTER)")
    p.add_argument("--topic", action="append", help="only this topic (repeatable)")
    p.add_argument("--partition", type=int, action="append", help="only this partition")
    p.add_argument("--from-offset", type=int, default=0)
    p.add_argument(
        "--to-offset", type=int, default=-1, help="exclusive; -1: the end (the last stable offset)"
    )
    p.add_argument("--from-time", type=int, help="record timestamp (ms), inclusive")
    p.add_argument("--to-time", type=int, help="record timestamp (ms), exclusive")
    p.add_argument("--log-level", default="INFO")


def _analytics_options(p: argparse.ArgumentParser, required: bool) -> None:
    p.add_argument(
        "--out",
        required=required,
        help="output directory of the Parquet tables: a path, or s3://bucket/prefix in the "
        "configured object store",
    )
    p.add_argument("--window-ms", type=int, default=60_000, help="records-per-window width")
    p.add_argument("--records", action="store_true", help="also write every record")
    p.add_argument("--hll-lg-k", type=int, default=14, help="distinct-keys sketch size (4-21)")


def _rewrite_options(p: argparse.ArgumentParser, merge: bool, compact: bool) -> None:
    p.add_argument("--target-object-bytes", type=int, default=64 * 2**20)
    if merge:
        p.add_argument("--small-object-bytes", type=int, default=16 * 2**20)
        p.add_argument("--min-age-ms", type=int, default=0)
    if compact:
        p.add_argument("--delete-retention-ms", type=int, default=86_400_000)
        p.add_argument("--min-compaction-lag-ms", type=int, default=0)


def add_parser(sub: Any) -> None:
    """Register ``jobs`` and its subcommands on the ``sluice`` parser."""
    jobs = sub.add_parser("jobs", help="PySpark jobs over committed batches")
    actions = jobs.add_subparsers(dest="job", required=True)
    a = actions.add_parser("analytics", help="Parquet tables: counts, bytes, times, keys")
    _common(a)
    _analytics_options(a, required=True)
    m = actions.add_parser("merge", help="rewrite small objects into larger ones")
    _common(m)
    _rewrite_options(m, merge=True, compact=False)
    c = actions.add_parser("compact", help="key compaction of cleanup.policy=compact topics")
    _common(c)
    _rewrite_options(c, merge=False, compact=True)
    i = actions.add_parser(
        "iceberg", help="every topic as an Iceberg table, appending what is new since last run"
    )
    _common(i)
    i.add_argument(
        "--warehouse",
        required=True,
        help="where the tables' data files go: a path, or s3://bucket/prefix in the "
        "configured object store (the catalog is in the cluster's database)",
    )
    s = actions.add_parser("schedule", help="run merge/compact/analytics periodically")
    _common(s)
    s.add_argument("--merge-every", type=float, help="seconds between merges")
    s.add_argument("--compact-every", type=float, help="seconds between compactions")
    s.add_argument("--analytics-every", type=float, help="seconds between analytics runs")
    _analytics_options(s, required=False)
    _rewrite_options(s, merge=True, compact=True)


def config_from(args: argparse.Namespace) -> BrokerConfig:
    layers: list[dict[str, str]] = []
    if args.config:
        with open(args.config) as f:
            layers.append(parse_config_file(f.read()))
    if args.data_dir:
        # Absolute: executors run elsewhere, and a named ./.sluice is not the unnamed default.
        data_dir = os.path.abspath(args.data_dir)
        layers.append({"data.dir": data_dir, "object.store": "local", "coordinator": "sqlite"})
    overrides = {}
    if getattr(args, "controller", None):
        overrides["controller.quorum.bootstrap.servers"] = args.controller
    for pair in args.overrides:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ValueError(f"-o expects key=value, got {pair!r}")
        overrides[key.strip()] = value.strip()
    layers.append(overrides)
    return load_config(*layers, env=os.environ)


def run(args: argparse.Namespace) -> int:
    from . import runtime
    from .dispatch import run_job
    from .source import existing_topic_source
    from .spark import session

    try:
        config = config_from(args)
        source = existing_topic_source(config)  # refused before Spark starts
    except (OSError, ValueError) as exc:
        print(f"sluice jobs: {exc}", file=sys.stderr)
        return 2
    log.info("sluice jobs %s: topics from %s", args.job, source.description)
    spark = session(args.master, app_name=f"sluice-{args.job}")
    try:
        if args.job == "schedule":
            from .schedule import run_schedule

            return run_schedule(spark, config, args)
        summary = run_job(spark, args.job, config, args)
        print(json.dumps({"job": args.job, **summary}, sort_keys=True), flush=True)
        failed = summary.get("statuses", {}).get("failed", 0)
        return 1 if failed else 0
    finally:
        runtime.close_all()
        try:
            spark.stop()
        except Exception:  # the JVM may already be gone (it got the same signal)
            log.debug("stopping Spark failed", exc_info=True)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m jobs ...`` and ``spark-submit jobs/__main__.py ...``."""
    parser = argparse.ArgumentParser(prog="sluice-jobs")
    add_parser(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["jobs", *(argv if argv is not None else sys.argv[1:])])
    logging.basicConfig(
        level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    return run(args)
