"""The Spark session the jobs run in.

Local Spark (``local[2]``) by default; ``--master spark://host:7077`` (or
``SLUICE_SPARK_MASTER``) runs the same jobs on a cluster, whose Python workers must have
this project installed (the executors import ``jobs``, ``storage`` and ``protocol``).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

DEFAULT_MASTER = "local[2]"

# Small jobs by default: 200 shuffle partitions (Spark's default) is for clusters; the UI
# is a port per driver that tests and cron jobs do not want.
DEFAULT_CONF = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "8",
    "spark.sql.session.timeZone": "UTC",
    "spark.driver.memory": "1g",
    "spark.python.worker.reuse": "true",
    # Record batches can carry values of up to max.message.bytes (1 MiB by default);
    # Arrow batches of 64k such rows must fit the crossing.
    "spark.sql.execution.arrow.maxRecordsPerBatch": "65536",
}


def session(
    master: str | None = None, app_name: str = "sluice-jobs", conf: Mapping[str, str] | None = None
) -> Any:
    """A Spark session (the running one if there is one: tests share it)."""
    from pyspark.sql import SparkSession

    # Executors must run this interpreter: it has the project and its dependencies.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.appName(app_name).master(
        master or os.environ.get("SLUICE_SPARK_MASTER", DEFAULT_MASTER)
    )
    for key, value in {**DEFAULT_CONF, **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel(os.environ.get("SLUICE_SPARK_LOG_LEVEL", "WARN"))
    return spark
