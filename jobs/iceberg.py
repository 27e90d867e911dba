"""``sluice jobs iceberg``: every topic as an Apache Iceberg table, appended incrementally.

One table per topic (``sluice.<topic>``, dots in topic names become underscores) with a row
per record: partition, offset, timestamp, key, value, headers. The catalog is pyiceberg's SQL
catalog in the cluster's own database (PostgreSQL, or SQLite ``iceberg.db`` in the embedded
default's data dir); the data files go to ``--warehouse`` (a local path or
``s3://bucket/prefix`` in the configured object store), where Spark, Trino or DuckDB read them
through the same catalog.

Incremental: a table's ``sluice.next-offsets`` property holds, per partition, the offset the
last run stopped at: that run's snapshot last stable offset, which is the high watermark
unless a transaction is open; its records and everything after them wait for a run after it
ended (stopping at the high watermark would skip them for good). A run appends only records
at or past it, up to its own snapshot, and moves the property in the same Iceberg commit as
the data, so a crashed run leaves the table as it was and the next one appends the same range.
A topic deleted and created again under the same name (another topic id) starts its table
over.
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from broker.config import BrokerConfig

from . import runtime
from .plan import Selection, selected_topics
from .read import records

__all__ = ["NEXT_OFFSETS", "IcebergOptions", "Selection", "catalog", "run", "table_name"]

log = logging.getLogger(__name__)

NAMESPACE = "sluice"
NEXT_OFFSETS = "sluice.next-offsets"
TOPIC_ID = "sluice.topic-id"


@dataclass(frozen=True)
class IcebergOptions:
    warehouse: str


def _arrow_schema() -> Any:
    import pyarrow as pa

    header = pa.struct([("key", pa.string()), ("value", pa.binary())])
    # Every column optional: Iceberg refuses to append a nullable column to a required one.
    return pa.schema(
        [
            ("partition", pa.int32()),
            ("offset", pa.int64()),
            ("timestamp", pa.int64()),
            ("timestamp_type", pa.int8()),
            ("key", pa.binary()),
            ("value", pa.binary()),
            ("headers", pa.list_(header)),
            ("producer_id", pa.int64()),
        ]
    )


def catalog(config: BrokerConfig, warehouse: str) -> Any:
    """pyiceberg's SQL catalog in the cluster's database, data files in ``warehouse``."""
    from pyiceberg.catalog.sql import SqlCatalog

    if config.coordinator == "postgresql":
        dsn = urlsplit(config.coordinator_dsn)
        uri = urlunsplit(("postgresql+psycopg2", *dsn[1:]))
    else:
        uri = "sqlite:///" + os.path.abspath(os.path.join(config.data_dir, "iceberg.db"))
    properties: dict[str, str] = {"uri": uri}
    if warehouse.startswith("s3://"):
        properties["warehouse"] = warehouse.rstrip("/")
        if config.s3_endpoint:
            properties["s3.endpoint"] = config.s3_endpoint
        if config.s3_access_key:
            properties["s3.access-key-id"] = config.s3_access_key
            properties["s3.secret-access-key"] = config.s3_secret_key
        properties["s3.region"] = config.s3_region
        properties["s3.force-virtual-addressing"] = str(not config.s3_path_style).lower()
    else:
        properties["warehouse"] = "file://" + os.path.abspath(warehouse)
    return SqlCatalog("sluice", **properties)


def table_name(topic: str) -> str:
    return f"{NAMESPACE}.{topic.replace('.', '_')}"


def run(
    spark: Any, config: BrokerConfig, options: IcebergOptions, selection: Selection | None = None
) -> dict[str, Any]:
    from pyspark.sql import functions as F

    started = time.perf_counter()
    selection = selection or Selection()
    cat = catalog(config, options.warehouse)
    cat.create_namespace_if_not_exists(NAMESPACE)
    topics = runtime.run(selected_topics(config, selection))
    schema = _arrow_schema()
    appended = 0
    for topic in topics:
        name = table_name(topic.name)
        table = cat.create_table_if_not_exists(name, schema=schema)
        if table.properties.get(TOPIC_ID, str(topic.topic_id)) != str(topic.topic_id):
            log.info("%s belongs to an older topic of that name: starting it over", name)
            cat.drop_table(name)
            table = cat.create_table(name, schema=schema)
        done: dict[str, int] = json.loads(table.properties.get(NEXT_OFFSETS, "{}"))
        start = min((done.get(str(p), 0) for p in range(topic.partitions)), default=0)
        df, snaps = records(spark, config, Selection(topics=(topic.name,), from_offset=start))
        marks = F.create_map(*[F.lit(x) for p, o in done.items() for x in (int(p), o)])
        if done:
            df = df.where(F.col("offset") >= F.coalesce(marks[F.col("partition")], F.lit(0)))
        new = df.select(*schema.names).toArrow().cast(schema)
        next_offsets = {str(s.partition): s.stable_end for s in snaps}
        with table.transaction() as tx:
            if new.num_rows:
                tx.append(new)
            tx.set_properties(
                {
                    NEXT_OFFSETS: json.dumps(next_offsets, sort_keys=True),
                    TOPIC_ID: str(topic.topic_id),
                }
            )
        appended += new.num_rows
    return {
        "tables": len(topics),
        "appended": appended,
        "seconds": round(time.perf_counter() - started, 3),
        "warehouse": options.warehouse,
    }
