"""One job run by name with the options of its command line: ``sluice jobs <job>`` runs one,
``sluice jobs schedule`` (``jobs.schedule``) runs them in turn."""

from __future__ import annotations

import argparse
from typing import Any

from broker.config import BrokerConfig


def selection_from(args: argparse.Namespace) -> Any:
    from .plan import Selection

    return Selection(
        tuple(args.topic) if args.topic else None,
        tuple(args.partition) if args.partition else None,
        args.from_offset,
        args.to_offset,
        args.from_time,
        args.to_time,
    )


def run_job(
    spark: Any, name: str, config: BrokerConfig, args: argparse.Namespace
) -> dict[str, Any]:
    selection = selection_from(args)
    if name == "analytics":
        from . import analytics

        options = analytics.AnalyticsOptions(args.out, args.window_ms, args.records, args.hll_lg_k)
        return analytics.run(spark, config, options, selection)
    if name == "merge":
        from . import merge

        return merge.run(
            spark,
            config,
            merge.MergeOptions(args.small_object_bytes, args.target_object_bytes, args.min_age_ms),
            selection,
        )
    if name == "compact":
        from . import compact

        return compact.run(
            spark,
            config,
            compact.CompactOptions(
                args.delete_retention_ms, args.min_compaction_lag_ms, args.target_object_bytes
            ),
            selection,
        )
    if name == "iceberg":
        from . import iceberg

        return iceberg.run(spark, config, iceberg.IcebergOptions(args.warehouse), selection)
    raise ValueError(f"unknown job {name}")
