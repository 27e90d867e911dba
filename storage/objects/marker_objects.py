"""Marker objects: diskless transaction markers that are never uploaded.

A transaction's end puts one COMMIT or ABORT control batch in each of its diskless
partitions. Those batches are the same bytes in every partition (the fetch path patches
the offset and leader epoch in), and they are fully determined by the producer id, the
epoch, the outcome, the timestamp and the coordinator epoch
(``protocol.control_batch.marker_batch``). So the end uploads nothing: its file's object
key *is* that description, and whoever reads a batch of such a file (the fetch path's
block cache, and through it the share groups and the migration copier; the PySpark jobs)
makes the bytes from the key instead of asking the store. To the batch coordinator it is
a file like any other (a ``files`` row of ``count`` marker batches laid end to end, the
transaction's marker rows pointing into it, deleted when retention, merging or compaction
leaves no batch in it), so a transaction's end stays ONE coordinator call and costs no PUT.

A marker key never matches ``is_data_key``: the orphan sweep never lists it (no such object
exists), and deleting one asks the store nothing (``stored_keys``).
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Sequence
from functools import lru_cache

from protocol.control_batch import marker_batch

# txn-marker:v1:<producer id>:<epoch>:<commit|abort>:<timestamp ms>:<coordinator epoch>:
# <count>:<32 hex digits, unique per end>. ':' is in no key the store is ever asked for.
MARKER_KEY_PREFIX = "txn-marker:"
_MARKER_KEY = re.compile(
    r"txn-marker:v1:(\d+):(\d+):(commit|abort):(-?\d+):(\d+):([1-9]\d*):[0-9a-f]{32}"
)


def marker_key(
    producer_id: int,
    producer_epoch: int,
    commit: bool,
    timestamp_ms: int,
    count: int,
    coordinator_epoch: int = 0,
) -> str:
    """The key of a marker object: ``count`` copies of one marker batch, end to end."""
    if producer_id < 0 or producer_epoch < 0 or count < 1 or coordinator_epoch < 0:
        raise ValueError("a marker object needs a producer, an epoch and a count")
    outcome = "commit" if commit else "abort"
    return (
        f"{MARKER_KEY_PREFIX}v1:{producer_id}:{producer_epoch}:{outcome}:{timestamp_ms}:"
        f"{coordinator_epoch}:{count}:{uuid.uuid4().hex}"
    )


def is_marker_key(key: str) -> bool:
    return key.startswith(MARKER_KEY_PREFIX)


@lru_cache(maxsize=4096)
def _parsed(key: str) -> tuple[bytes, int]:
    """(the marker batch, how many copies) a marker key describes."""
    m = _MARKER_KEY.fullmatch(key)
    if m is None:
        raise ValueError(f"not a marker object key: {key!r}")
    pid, epoch, outcome, ts, coordinator_epoch, count = m.groups()
    batch = marker_batch(int(pid), int(epoch), outcome == "commit", int(ts), int(coordinator_epoch))
    return batch, int(count)


def marker_object_size(key: str) -> int:
    batch, count = _parsed(key)
    return len(batch) * count


def marker_batch_of(key: str) -> bytes:
    """The one marker batch a marker object repeats."""
    return _parsed(key)[0]


def read_marker_object(key: str, offset: int, length: int) -> bytes:
    """Bytes ``[offset, offset + length)`` of a marker object (shorter at its end), as
    ``ObjectStore.get_range`` gives an object's."""
    if offset < 0 or length < 0:
        raise ValueError(f"bad range {offset}+{length}")
    batch, count = _parsed(key)
    size = len(batch)
    if length == size and offset % size == 0 and offset < size * count:
        return batch  # one marker, as fetches read them: no copy
    end = min(offset + length, size * count)
    if end <= offset:
        return b""
    first, last = offset // size, (end - 1) // size
    whole = batch * (last - first + 1)
    return whole[offset - first * size : end - first * size]


def stored_keys(keys: Sequence[str]) -> list[str]:
    """The keys of ``keys`` that name objects in the store (not marker objects)."""
    return [k for k in keys if not is_marker_key(k)]
