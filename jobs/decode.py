"""RecordBatch v2 decoding (whole batches per call) and rewriting (key compaction).

Decoding goes through aiokafka's record batch reader, whose C extension parses records
and decompresses (gzip, snappy incl. xerial framing, lz4, zstd) without per-field Python;
what stays in Python is one attribute read per column and record. protocol.records holds
the header layout the broker validates with; the rewrite below reuses its offsets and
protocol.record_scan's decompression.
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import crc32c
from aiokafka.record.default_records import DefaultRecordBatch

from protocol.compression import compress, decompress
from protocol.records import (
    ATTRIBUTES_OFFSET,
    CONTROL_BIT,
    CRC_OFFSET,
    HEADER_SIZE,
    LOG_OVERHEAD,
    TIMESTAMP_TYPE_BIT,
    TRANSACTIONAL_BIT,
    record_heads,
)

# Control record types (the key of a control record: version int16, type int16).
ABORT = 0
COMMIT = 1

_BASE = struct.Struct(">q")
_LENGTH = struct.Struct(">i")
_ATTRS = struct.Struct(">h")
_COUNT = struct.Struct(">i")
_CRC = struct.Struct(">I")
_CONTROL_KEY = struct.Struct(">hh")
RECORDS_COUNT_OFFSET = 57


class CorruptBatch(Exception):
    pass


@dataclass(slots=True)
class Columns:
    """Decoded records, column by column (turned into one Arrow record batch)."""

    topic: list[str] = field(default_factory=list)
    partition: list[int] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)
    timestamp: list[int] = field(default_factory=list)
    timestamp_type: list[int] = field(default_factory=list)
    key: list[bytes | None] = field(default_factory=list)
    value: list[bytes | None] = field(default_factory=list)
    headers: list[list[tuple[str, bytes | None]]] = field(default_factory=list)
    producer_id: list[int] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.offset)

    def extend(self, other: Columns) -> None:
        for name in self.__slots__:
            getattr(self, name).extend(getattr(other, name))


@dataclass(slots=True)
class Decoded:
    """One batch decoded: its records as columns, or a control marker."""

    producer_id: int
    transactional: bool
    control: int | None  # ABORT / COMMIT for a control batch, else None
    columns: Columns | None


def decode_batch(
    data: bytes | memoryview,
    topic: str,
    partition: int,
    base_offset: int,
    verify_crc: bool = True,
) -> Decoded:
    """Decode one stored batch whose first offset is ``base_offset`` (stored batches
    still carry the producer's baseOffset; the coordinator's is the real one)."""
    buf = bytearray(data)  # one copy: the prefix is patched, the C reader wants a buffer
    _BASE.pack_into(buf, 0, base_offset)
    if len(buf) < HEADER_SIZE or _LENGTH.unpack_from(buf, 8)[0] + LOG_OVERHEAD != len(buf):
        raise CorruptBatch(f"{topic}-{partition}@{base_offset}: bad batch length")
    if (
        verify_crc
        and crc32c.crc32c(memoryview(buf)[ATTRIBUTES_OFFSET:])
        != _CRC.unpack_from(buf, CRC_OFFSET)[0]
    ):
        raise CorruptBatch(f"{topic}-{partition}@{base_offset}: CRC mismatch")
    batch = DefaultRecordBatch(buf)
    (attributes,) = _ATTRS.unpack_from(buf, ATTRIBUTES_OFFSET)
    pid = batch.producer_id
    transactional = bool(attributes & TRANSACTIONAL_BIT)
    records = list(batch)
    if attributes & CONTROL_BIT:
        kind = COMMIT
        for r in records:
            if r.key is not None and len(r.key) >= 4:
                kind = _CONTROL_KEY.unpack_from(r.key)[1]
        return Decoded(pid, transactional, kind, None)
    n = len(records)
    ts_type = 1 if attributes & TIMESTAMP_TYPE_BIT else 0
    cols = Columns(
        [topic] * n,
        [partition] * n,
        [r.offset for r in records],
        [r.timestamp for r in records],
        [ts_type] * n,
        [r.key for r in records],
        [r.value for r in records],
        [r.headers for r in records],
        [pid] * n,
    )
    return Decoded(pid, transactional, None, cols)


class CommittedFilter:
    """Read-committed filtering for one partition, fed batches in offset order.

    Control batches are never output. A transactional batch is held back until the
    producer's next control marker in this partition says COMMIT (out) or ABORT
    (dropped, or kept apart in ``aborted`` when ``keep_aborted``: compaction removes
    those records). Whatever is still held at the end is resolved by the caller: by
    feeding the markers that lie beyond (or between) the batches fed, or dropped as an
    open transaction (Kafka's last stable offset).

    Batches may be fed with gaps (a read task holds parts of a partition), but then the
    markers in each gap must be fed before the next batch: held records belong to the
    producer's transaction in progress at the last batch fed, and only its next marker
    decides them.
    """

    def __init__(self, keep_aborted: bool = False) -> None:
        self.out = Columns()
        self.aborted: Columns | None = Columns() if keep_aborted else None
        self.pending: dict[int, list[Columns]] = {}

    def feed(self, d: Decoded) -> None:
        if d.control is not None:
            held = self.pending.pop(d.producer_id, [])
            target = self.out if d.control == COMMIT else self.aborted
            if target is not None:
                for cols in held:
                    target.extend(cols)
            return
        assert d.columns is not None
        if d.transactional:
            self.pending.setdefault(d.producer_id, []).append(d.columns)
        else:
            self.out.extend(d.columns)


# --------------------------------------------------------------------------- rewriting


def _record_spans(data: bytes, count: int) -> list[tuple[int, int, int]]:
    """(start, end, offset delta) of each record in an uncompressed records section."""
    heads = itertools.islice(record_heads(data), count)
    spans = [(start, end, delta) for start, end, _ts, delta in heads]
    if len(spans) != count or (spans[-1][1] if spans else 0) != len(data):
        raise CorruptBatch("records section does not end where its records do")
    return spans


def filter_batch(
    data: bytes | memoryview, base_offset: int, drop: Iterable[int]
) -> bytes | memoryview | None:
    """The batch without the records at offsets in ``drop``.

    Kafka's cleaner semantics for v2 batches: base offset, lastOffsetDelta, timestamps,
    producer id/epoch and base sequence stay; records keep their offset deltas (so
    offsets keep their values and gaps appear); the records count, compressed records
    and CRC change. Returns ``data`` itself when nothing is dropped, None when every
    record is. Control batches are kept whole.
    """
    drop = set(drop)
    (attributes,) = _ATTRS.unpack_from(data, ATTRIBUTES_OFFSET)
    if not drop or attributes & CONTROL_BIT:
        return data
    (count,) = _COUNT.unpack_from(data, RECORDS_COUNT_OFFSET)
    codec = attributes & 0x07
    records = decompress(codec, bytes(data[HEADER_SIZE:]))
    spans = _record_spans(records, count)
    kept = [(s, e) for s, e, delta in spans if base_offset + delta not in drop]
    if len(kept) == len(spans):
        return data
    if not kept:
        return None
    body = compress(codec, b"".join(records[s:e] for s, e in kept))
    out = bytearray(data[:HEADER_SIZE])
    out += body
    _BASE.pack_into(out, 0, base_offset)
    _LENGTH.pack_into(out, 8, len(out) - LOG_OVERHEAD)
    _COUNT.pack_into(out, RECORDS_COUNT_OFFSET, len(kept))
    _CRC.pack_into(out, CRC_OFFSET, crc32c.crc32c(memoryview(out)[ATTRIBUTES_OFFSET:]))
    return bytes(out)


def record_offsets(data: bytes | memoryview, base_offset: int) -> list[int]:
    """Offsets of the records in a batch (for tests and checks)."""
    (count,) = _COUNT.unpack_from(data, RECORDS_COUNT_OFFSET)
    (attributes,) = _ATTRS.unpack_from(data, ATTRIBUTES_OFFSET)
    records = decompress(attributes & 0x07, bytes(data[HEADER_SIZE:]))
    return [base_offset + d for _s, _e, d in _record_spans(records, count)]


def columns_to_arrow(
    cols: Columns, schema: object, keys_only: bool = False, task: int = 0, aborted: bool = False
) -> object:
    """One Arrow record batch of decoded columns (pyarrow converts lists in C)."""
    import pyarrow as pa

    n = len(cols)
    if n and cols.topic[0] == cols.topic[-1] and cols.partition[0] == cols.partition[-1]:
        # One partition's records (what read tasks hand over): constant columns are made
        # in C instead of converted element by element.
        topic = pa.repeat(pa.scalar(cols.topic[0], pa.string()), n)
        partition = pa.repeat(pa.scalar(cols.partition[0], pa.int32()), n)
    else:
        topic = pa.array(cols.topic, pa.string())
        partition = pa.array(cols.partition, pa.int32())
    arrays = [
        topic,
        partition,
        pa.array(cols.offset, pa.int64()),
        pa.array(cols.timestamp, pa.int64()),
        pa.array(cols.timestamp_type, pa.int8()),
        pa.array(cols.key, pa.binary()),
    ]
    if keys_only:
        arrays.append(pa.array([v is None for v in cols.value], pa.bool_()))
        arrays.append(pa.repeat(pa.scalar(task, pa.int32()), n))
        arrays.append(pa.repeat(pa.scalar(aborted, pa.bool_()), n))
    else:
        arrays += [
            pa.array(cols.value, pa.binary()),
            pa.array(cols.headers, HEADERS_TYPE()),
            pa.array(cols.producer_id, pa.int64()),
        ]
    return pa.RecordBatch.from_arrays(arrays, schema=schema)


def HEADERS_TYPE() -> object:
    import pyarrow as pa

    return pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def patched(data: bytes | memoryview, base_offset: int) -> Sequence[bytes | memoryview]:
    """A stored batch with its real base offset in bytes 0..7 (outside the CRC), as
    chunks: no copy of the batch is made."""
    return (_BASE.pack(base_offset), memoryview(data)[8:])
