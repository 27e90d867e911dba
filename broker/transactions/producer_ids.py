"""Producer ids for InitProducerId, unique across restarts and across brokers.

Ids come from blocks the batch coordinator reserves durably, so a restarted broker or
another broker on the same coordinator never hands out an id twice.
"""

from __future__ import annotations

import asyncio

from storage.coordinator import BatchCoordinator

BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, coordinator: BatchCoordinator) -> None:
        self._coordinator = coordinator
        self._next = 0
        self._block_end = 0
        self._lock = asyncio.Lock()

    async def allocate(self) -> int:
        async with self._lock:
            if self._next >= self._block_end:
                self._next = await self._coordinator.allocate_producer_ids(BLOCK_SIZE)
                self._block_end = self._next + BLOCK_SIZE
            pid = self._next
            self._next += 1
            return pid
