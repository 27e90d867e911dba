"""Committed records as a Spark DataFrame.

The driver takes one coordinator snapshot and splits it into read tasks (plan.py); each
Spark task runs one read task in a Python worker: coalesced ranged GETs (fetch.py), whole
batches decoded (decode.py), read-committed filtering up to the snapshot's last stable
offset (each transaction decided by its producer's next marker in the partition, looked up
wherever it is), and Arrow record batches handed to the JVM (``mapInArrow``: columns cross
in Arrow's format, not as pickled rows).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING, Any

from broker.config import BrokerConfig
from storage.coordinator import ListBatchesRequest
from storage.objects import ObjectNotFound

from . import runtime
from .decode import Columns, CommittedFilter, columns_to_arrow, decode_batch
from .fetch import read_batches
from .plan import BatchRef, PartitionSnapshot, ReadTask, Selection, read_tasks, ref, snapshot

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

# Rows per Arrow batch handed to Spark: large enough to amortise the crossing, small
# enough to bound a worker's memory.
ARROW_ROWS = 65_536


def spark_schema(keys_only: bool = False) -> Any:
    from pyspark.sql import types as T

    fields = [
        T.StructField("topic", T.StringType(), False),
        T.StructField("partition", T.IntegerType(), False),
        T.StructField("offset", T.LongType(), False),
        T.StructField("timestamp", T.LongType(), False),
        T.StructField("timestamp_type", T.ByteType(), False),
        T.StructField("key", T.BinaryType(), True),
    ]
    if keys_only:
        fields += [
            T.StructField("tombstone", T.BooleanType(), False),
            T.StructField("task", T.IntegerType(), False),
            # Records of aborted transactions (keys_only reads only: compaction drops
            # them, as Kafka's cleaner does); every other read leaves them out.
            T.StructField("aborted", T.BooleanType(), False),
        ]
    else:
        header = T.StructType(
            [
                T.StructField("key", T.StringType(), True),
                T.StructField("value", T.BinaryType(), True),
            ]
        )
        fields += [
            T.StructField("value", T.BinaryType(), True),
            T.StructField("headers", T.ArrayType(header, True), True),
            T.StructField("producer_id", T.LongType(), False),
        ]
    return T.StructType(fields)


def arrow_schema(keys_only: bool = False) -> Any:
    import pyarrow as pa

    from .decode import HEADERS_TYPE

    fields = [
        pa.field("topic", pa.string(), False),
        pa.field("partition", pa.int32(), False),
        pa.field("offset", pa.int64(), False),
        pa.field("timestamp", pa.int64(), False),
        pa.field("timestamp_type", pa.int8(), False),
        pa.field("key", pa.binary()),
    ]
    if keys_only:
        fields += [
            pa.field("tombstone", pa.bool_(), False),
            pa.field("task", pa.int32(), False),
            pa.field("aborted", pa.bool_(), False),
        ]
    else:
        fields += [
            pa.field("value", pa.binary()),
            pa.field("headers", HEADERS_TYPE()),
            pa.field("producer_id", pa.int64(), False),
        ]
    return pa.schema(fields)


# --------------------------------------------------------------------------- executor side


async def _read(
    config: BrokerConfig, refs: Sequence[BatchRef], topic_ids: dict[str, Any]
) -> list[tuple[BatchRef, Any]]:
    """The batches' bytes in (topic, partition, offset) order. An object deleted since
    the snapshot (merged or compacted, then cleaned after the grace period) makes the
    task re-list its ranges from the coordinator and read where the batches are now."""
    store = await runtime.store(config)
    try:
        got = await read_batches(store, refs)
        return sorted(got.items(), key=_order)
    except ObjectNotFound:
        pass
    coordinator = await runtime.coordinator(config)
    ranges: dict[tuple[str, int], list[int]] = {}
    for r in refs:
        lo_hi = ranges.setdefault((r.topic, r.partition), [r.base_offset, r.last_offset])
        lo_hi[0] = min(lo_hi[0], r.base_offset)
        lo_hi[1] = max(lo_hi[1], r.last_offset)
    keys = sorted(ranges)
    listings = await coordinator.list_batches(
        [
            ListBatchesRequest(topic_ids[t], p, ranges[(t, p)][0], ranges[(t, p)][1] + 1)
            for t, p in keys
        ]
    )
    fresh = [
        ref(t, p, b)
        for (t, p), listing in zip(keys, listings, strict=True)
        for b in listing.batches
        # Only batches the task was given a part of: the listing may reach one batch back.
        if b.last_offset >= ranges[(t, p)][0]
    ]
    got = await read_batches(store, fresh)
    return sorted(got.items(), key=_order)


def _order(item: tuple[BatchRef, Any]) -> tuple[str, int, int]:
    return item[0].topic, item[0].partition, item[0].base_offset


async def _list_range(
    config: BrokerConfig, topic_id: Any, topic: str, partition: int, start: int, end: int
) -> list[BatchRef]:
    coordinator = await runtime.coordinator(config)
    listing = (
        await coordinator.list_batches([ListBatchesRequest(topic_id, partition, start, end)])
    )[0]
    return [ref(topic, partition, b) for b in listing.batches]


async def _read_page(config: BrokerConfig, refs: Sequence[BatchRef]) -> list[tuple[BatchRef, Any]]:
    got = await read_batches(await runtime.store(config), refs)
    return sorted(got.items(), key=_order)


# Batches read per step while looking for transaction markers outside a task's batches.
LOOKAHEAD_PAGE = 64
# A marker is a one-record batch of one offset: 61 bytes of header and a record of 17
# (key: version and type, value: version and coordinator epoch). Only batches that
# small can be markers, so looking for markers reads those and skips all data.
MARKER_MAX_BYTES = 256
# Offsets listed at first when looking for markers (then 4 times more each step).
MARKER_WINDOW = 4096


def _maybe_marker(r: BatchRef) -> bool:
    return r.base_offset == r.last_offset and r.byte_size <= MARKER_MAX_BYTES


def resolve_markers(
    config: BrokerConfig,
    topic_id: Any,
    topic: str,
    partition: int,
    f: CommittedFilter,
    start: int,
    stop: int,
) -> None:
    """Feed ``f`` the markers of its held producers in offsets [start, stop), the first
    one of each producer only (a later one ends a later transaction).

    The range is listed in windows growing from ``MARKER_WINDOW`` offsets: a marker
    usually follows its transaction closely, and a window bounds what one listing holds
    (the range can be the rest of a partition)."""
    pos, window = start, MARKER_WINDOW
    while f.pending and pos < stop:
        upto = min(stop, pos + window)
        listed = runtime.run(_list_range(config, topic_id, topic, partition, pos, upto))
        # The listing may reach one batch back (the one holding ``pos``): never a marker.
        candidates = [r for r in listed if r.base_offset >= pos and _maybe_marker(r)]
        for i in range(0, len(candidates), LOOKAHEAD_PAGE):
            for r, data in runtime.run(_read_page(config, candidates[i : i + LOOKAHEAD_PAGE])):
                d = decode_batch(data, topic, partition, r.base_offset)
                if d.control is not None and d.producer_id in f.pending:
                    f.feed(d)
            if not f.pending:
                return
        pos, window = upto, window * 4


def decode_task(
    config: BrokerConfig, task: ReadTask, selection: Selection
) -> Iterator[tuple[str, int, Columns]]:
    """Decoded, committed records of one task, per partition."""
    for topic, partition, cols, _aborted in decode_task_with_aborted(config, task, False):
        yield topic, partition, cols


def decode_task_with_aborted(
    config: BrokerConfig, task: ReadTask, keep_aborted: bool
) -> Iterator[tuple[str, int, Columns, Columns | None]]:
    """Per partition: the committed records of the task below its last stable offset,
    and (with ``keep_aborted``) the records of aborted transactions apart."""
    batches = runtime.run(_read(config, task.refs, task.topic_ids))
    by_partition: dict[tuple[str, int], list[tuple[BatchRef, Any]]] = defaultdict(list)
    for r, data in batches:
        by_partition[(r.topic, r.partition)].append((r, data))
    for (topic, partition), items in by_partition.items():
        f = CommittedFilter(keep_aborted)
        stable = task.stable.get((topic, partition))
        end = task.ends.get((topic, partition))
        tid = task.topic_ids.get(topic)
        last = -1
        for r, data in items:
            if stable is not None and r.base_offset >= stable:
                # Read_committed ends here: an open transaction starts at this batch
                # (or this is the high watermark). Nothing past it is read.
                break
            if last >= 0 and r.base_offset > last + 1 and end is not None:
                # Other tasks hold the batches in between: a held transaction may have
                # ended there, and must be decided before this producer's next batch.
                resolve_markers(config, tid, topic, partition, f, last + 1, r.base_offset)
            f.feed(decode_batch(data, topic, partition, r.base_offset))
            last = r.last_offset
        if end is not None:
            # A transaction whose marker lies beyond this task: read on until every held
            # producer has one or the snapshot ends (then it is open: dropped).
            resolve_markers(config, tid, topic, partition, f, last + 1, end)
        yield topic, partition, f.out, f.aborted


def arrow_batches(
    config: BrokerConfig, task: ReadTask, selection: Selection, keys_only: bool
) -> Iterator[Any]:
    import pyarrow.compute as pc

    schema = arrow_schema(keys_only)
    # Compaction's reads (keys_only) also get the aborted records, flagged: they go.
    for _topic, _partition, cols, aborted in decode_task_with_aborted(config, task, keys_only):
        parts = [(cols, False)]
        if aborted is not None and len(aborted):
            parts.append((aborted, True))
        for part_cols, is_aborted in parts:
            for start in range(0, len(part_cols), ARROW_ROWS):
                part = (
                    part_cols
                    if len(part_cols) <= ARROW_ROWS
                    else _slice(part_cols, start, start + ARROW_ROWS)
                )
                batch = columns_to_arrow(part, schema, keys_only, task.index, is_aborted)
                mask = _range_mask(batch, selection, pc)
                yield batch if mask is None else batch.filter(mask)


def _slice(cols: Columns, start: int, end: int) -> Columns:
    return Columns(*(getattr(cols, n)[start:end] for n in Columns.__slots__))


def _range_mask(batch: Any, s: Selection, pc: Any) -> Any:
    """Offsets and times outside the selection (the first and last batches of a range
    reach past it), as one vectorised mask; None when everything is in."""
    conds = []
    if s.from_offset > 0:
        conds.append(pc.greater_equal(batch.column("offset"), s.from_offset))
    if s.to_offset >= 0:
        conds.append(pc.less(batch.column("offset"), s.to_offset))
    if s.from_time is not None:
        conds.append(pc.greater_equal(batch.column("timestamp"), s.from_time))
    if s.to_time is not None:
        conds.append(pc.less(batch.column("timestamp"), s.to_time))
    if not conds:
        return None
    mask = conds[0]
    for c in conds[1:]:
        mask = pc.and_(mask, c)
    return mask


# --------------------------------------------------------------------------- driver side


def records(
    spark: SparkSession,
    config: BrokerConfig,
    selection: Selection | None = None,
    *,
    keys_only: bool = False,
    tasks: Sequence[ReadTask] | None = None,
    snapshots: Sequence[PartitionSnapshot] | None = None,
) -> tuple[DataFrame, list[PartitionSnapshot]]:
    """The committed records of the selection as a DataFrame (lazy), with the snapshot
    it was planned from. ``tasks`` overrides the planning (compaction reads its own)."""
    selection = selection or Selection()
    snaps = list(snapshots) if snapshots is not None else snapshot(config, selection)
    if tasks is None:
        tasks = read_tasks(snaps, spark.sparkContext.defaultParallelism)
    schema = spark_schema(keys_only)
    if not tasks:
        return spark.createDataFrame([], schema), snaps
    shipped = spark.sparkContext.broadcast(list(tasks))

    def run(batches: Iterator[Any]) -> Iterator[Any]:
        for ids in batches:
            for i in ids.column(0).to_pylist():
                yield from arrow_batches(config, shipped.value[i], selection, keys_only)

    ids = spark.range(0, len(tasks), 1, numPartitions=len(tasks))
    return ids.mapInArrow(run, schema), snaps
