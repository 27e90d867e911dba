"""Where the analytics tables go: a local (or Hadoop) path through Spark's own writer, or an
S3 location (``s3://bucket/prefix``) through PyArrow's S3 filesystem.

Spark writes ``s3a://`` only with Hadoop's AWS jars; PyArrow speaks S3 itself (MinIO,
SeaweedFS, AWS) with the credentials of the broker config the job was given, so analytics
land where query engines (Spark, Trino, DuckDB) look without any jar. Each table is a
directory of Parquet files, replaced whole on every run as the local writer does.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from broker.config import BrokerConfig

S3_SCHEME = "s3://"


def is_s3(out: str) -> bool:
    return out.startswith(S3_SCHEME)


def s3_filesystem(config: BrokerConfig) -> Any:
    """PyArrow's S3 filesystem for the store the broker config names."""
    from pyarrow import fs

    options: dict[str, Any] = {"region": config.s3_region}
    if config.s3_access_key:
        options.update(access_key=config.s3_access_key, secret_key=config.s3_secret_key)
    if config.s3_endpoint:
        endpoint = urlsplit(config.s3_endpoint)
        options.update(
            endpoint_override=endpoint.netloc or endpoint.path, scheme=endpoint.scheme or "https"
        )
    if not config.s3_path_style:
        options["force_virtual_addressing"] = True
    return fs.S3FileSystem(**options)


def _location(out: str, name: str) -> str:
    """``bucket/prefix/name``: PyArrow's path form of ``s3://bucket/prefix`` + table."""
    return f"{out[len(S3_SCHEME) :].rstrip('/')}/{name}"


def _clear(filesystem: Any, directory: str) -> None:
    """Delete the files a previous run left in ``directory``, one object at a time: S3 has
    no directories, and PyArrow's directory operations (marker objects, recursive deletes)
    made SeaweedFS lose a sibling table written just before."""
    from pyarrow import fs

    selector = fs.FileSelector(directory, allow_not_found=True, recursive=True)
    for info in filesystem.get_file_info(selector):
        if info.type == fs.FileType.File:
            filesystem.delete_file(info.path)


def write_small(table: Any, out: str, name: str, config: BrokerConfig) -> None:
    """A small (aggregate) table: collected on the driver, one Parquet file."""
    import pyarrow.parquet as pq

    filesystem = s3_filesystem(config)
    directory = _location(out, name)
    _clear(filesystem, directory)
    pq.write_table(table.toArrow(), f"{directory}/part-0.parquet", filesystem=filesystem)


def write_large(df: Any, out: str, name: str, config: BrokerConfig) -> int:
    """A table of any size: every Spark task writes its rows as one Parquet file from the
    executor (nothing goes through the driver). Returns the rows written."""
    from pyspark.sql import types as T

    filesystem = s3_filesystem(config)
    directory = _location(out, name)
    _clear(filesystem, directory)

    def write_task(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa
        import pyarrow.parquet as pq

        task_fs = s3_filesystem(config)
        path = f"{directory}/part-{uuid.uuid4().hex}.parquet"
        writer = None
        rows = 0
        for batch in batches:
            if writer is None:
                writer = pq.ParquetWriter(path, batch.schema, filesystem=task_fs)
            writer.write_batch(batch)
            rows += batch.num_rows
        if writer is not None:
            writer.close()
        yield pa.RecordBatch.from_pydict({"rows": [rows]})

    result = df.mapInArrow(write_task, T.StructType([T.StructField("rows", T.LongType())]))
    return int(sum(r["rows"] for r in result.collect()))
