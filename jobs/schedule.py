"""``sluice jobs schedule``: run jobs periodically in one long-lived local Spark session.

This is the "broker-side" schedule in its simplest form: one process next to the
brokers (started by the same supervisor), keeping Spark warm so each run skips the
7-17 s start-up. The alternative is an external scheduler (cron, systemd timers,
Airflow, Kubernetes CronJobs) running ``sluice jobs merge|compact|analytics`` or
``spark-submit .../jobs/__main__.py merge ...`` on a Spark cluster. Both are safe to
overlap: every swap is checked against the coordinator, so two runs at once waste work
but never corrupt a log.
"""

from __future__ import annotations

import argparse
import json
import logging
import signal
import threading
import time
from typing import Any

from broker.config import BrokerConfig

from .dispatch import run_job

log = logging.getLogger("sluice.jobs.schedule")


def run_schedule(spark: Any, config: BrokerConfig, args: argparse.Namespace) -> int:
    every = {
        name: period
        for name, period in (
            ("merge", args.merge_every),
            ("compact", args.compact_every),
            ("analytics", args.analytics_every),
        )
        if period
    }
    if not every:
        log.error("nothing to schedule: give --merge-every, --compact-every or --analytics-every")
        return 2
    if "analytics" in every and not args.out:
        log.error("--analytics-every needs --out")
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    due = dict.fromkeys(every, time.monotonic())
    while not stop.is_set():
        name = min(due, key=lambda n: due[n])
        if stop.wait(max(0.0, due[name] - time.monotonic())):
            break
        try:
            summary = run_job(spark, name, config, args)
            print(json.dumps({"job": name, **summary}, sort_keys=True), flush=True)
        except Exception:
            log.exception("scheduled %s failed; next attempt in %.0f s", name, every[name])
        due[name] = time.monotonic() + every[name]
    return 0
