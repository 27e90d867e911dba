"""Ranged reads of batches on executors: coalesced per object, several in flight."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import Sequence

from storage.objects import ObjectStore
from storage.objects.marker_objects import is_marker_key, read_marker_object

from .plan import BatchRef, MiB

# Two batches of one object closer than this are read with one GET: a GET costs far more
# than reading a little extra (SeaweedFS here: ~200 ranged GETs/s, ~100 MiB/s).
MAX_GAP = 1 * MiB
MAX_SPAN = 32 * MiB
CONCURRENCY = 8


def spans(refs: Sequence[BatchRef]) -> dict[str, list[tuple[int, int, list[BatchRef]]]]:
    """Per object, the byte ranges to GET as (start, end, batches inside)."""
    by_object: dict[str, list[BatchRef]] = defaultdict(list)
    for r in refs:
        by_object[r.object_key].append(r)
    out: dict[str, list[tuple[int, int, list[BatchRef]]]] = {}
    for key, group in by_object.items():
        group.sort(key=lambda r: r.byte_offset)
        ranges: list[tuple[int, int, list[BatchRef]]] = []
        for r in group:
            end = r.byte_offset + r.byte_size
            if ranges:
                start, last_end, inside = ranges[-1]
                if r.byte_offset - last_end <= MAX_GAP and end - start <= MAX_SPAN:
                    inside.append(r)
                    ranges[-1] = (start, max(last_end, end), inside)
                    continue
            ranges.append((r.byte_offset, end, [r]))
        out[key] = ranges
    return out


async def read_batches(store: ObjectStore, refs: Sequence[BatchRef]) -> dict[BatchRef, memoryview]:
    """The bytes of every batch (views into the fetched ranges; nothing is copied)."""
    limit = asyncio.Semaphore(CONCURRENCY)
    out: dict[BatchRef, memoryview] = {}

    async def get(key: str, start: int, end: int, inside: list[BatchRef]) -> None:
        if is_marker_key(key):
            # Transaction markers: made from the key, never uploaded (marker_objects.py).
            data = read_marker_object(key, start, end - start)
        else:
            async with limit:
                data = await store.get_range(key, start, end - start)
        if len(data) < end - start:
            raise OSError(f"object {key} is shorter than its batches ({len(data)} < {end - start})")
        view = memoryview(data)
        for r in inside:
            out[r] = view[r.byte_offset - start : r.byte_offset - start + r.byte_size]

    await asyncio.gather(
        *(
            get(key, start, end, inside)
            for key, ranges in spans(refs).items()
            for start, end, inside in ranges
        )
    )
    return out
