"""The fetch path: find batches → ranged reads through the cache → patched bytes.

Stored batches still carry the producer's baseOffset; the answer sends a 16-byte
patched prefix (baseOffset, batchLength, partitionLeaderEpoch — all outside the
CRC) followed by slices of cached blocks, so record bytes are never copied here.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence

from broker.server.metrics import METRICS
from protocol.codec import RecordChunks
from protocol.records import PATCHED_PREFIX_SIZE, patched_prefix
from storage.coordinator import BatchCoordinator, BatchLocation, FindRequest, FindResult
from storage.objects.block_cache import BlockCache

LEADER_EPOCH = 0  # the one epoch there is without a controller (see Broker.leader_epoch)


class Fetcher:
    def __init__(self, coordinator: BatchCoordinator, cache: BlockCache) -> None:
        self._coordinator = coordinator
        self._cache = cache

    async def find(
        self, requests: Sequence[FindRequest], max_total_bytes: int, read_committed: bool = False
    ) -> list[FindResult]:
        started = time.perf_counter()
        results = await self._coordinator.find_batches(requests, max_total_bytes, read_committed)
        METRICS.find_batches_seconds.observe(time.perf_counter() - started)
        return results

    async def read(
        self, results: Sequence[FindResult], leader_epochs: Sequence[int] | None = None
    ) -> list[RecordChunks | None]:
        """Record bytes for each result (None where it has no batches), with each
        result's partition leader epoch (``leader_epochs``, default LEADER_EPOCH)
        patched into its batches."""
        epochs = leader_epochs or [LEADER_EPOCH] * len(results)
        # Cache hits (the tail, nearly always) are answered inline; only misses become
        # coroutines: with 16 KiB batches a task per batch cost more than the read.
        pieces: list[list[bytes | memoryview]] = []
        hits: list[tuple[int, BatchLocation, int, list[memoryview]]] = []
        misses: list[tuple[int, BatchLocation, int]] = []
        for result, epoch in zip(results, epochs, strict=True):
            for batch in result.batches:
                views = self._cache.read_cached(
                    batch.object_key, batch.byte_offset, batch.byte_size
                )
                if views is None:
                    misses.append((len(pieces), batch, epoch))
                else:
                    hits.append((len(pieces), batch, epoch, views))
                pieces.append([])
        # The hits' prefixes in one pass once the cache has answered, rather than a trip
        # from the cache to the record format and back for every batch.
        prefixes = [patched_prefix(b.base_offset, b.byte_size, e) for _, b, e, _ in hits]
        for (index, _, _, views), prefix in zip(hits, prefixes, strict=True):
            pieces[index] = _after_prefix(prefix, views)
        if misses:
            loaded = await asyncio.gather(*(self._read_batch(b, e) for _, b, e in misses))
            for (index, _, _), parts in zip(misses, loaded, strict=True):
                pieces[index] = parts
        out: list[RecordChunks | None] = []
        pos = 0
        for result in results:
            if not result.batches:
                out.append(None)
                continue
            parts: list[bytes | memoryview] = []
            size = 0
            for batch in result.batches:
                parts.extend(pieces[pos])
                size += batch.byte_size
                pos += 1
            METRICS.fetched_bytes.inc(size)
            out.append(RecordChunks(parts, size))
        return out

    async def _read_batch(self, batch: BatchLocation, epoch: int) -> list[bytes | memoryview]:
        views = await self._cache.read(batch.object_key, batch.byte_offset, batch.byte_size)
        return _after_prefix(patched_prefix(batch.base_offset, batch.byte_size, epoch), views)


def _after_prefix(prefix: bytes, views: Sequence[memoryview]) -> list[bytes | memoryview]:
    """The batch as sent: our 16-byte prefix, then its bytes after the stored prefix."""
    parts: list[bytes | memoryview] = [prefix]
    skip = PATCHED_PREFIX_SIZE
    for view in views:
        if skip >= len(view):
            skip -= len(view)
            continue
        parts.append(view[skip:] if skip else view)
        skip = 0
    return parts
