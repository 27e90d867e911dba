"""Producer ids for InitProducerId, unique across restarts.

Ids are handed out from blocks; the end of the current block is made durable
before any id of it is used, so a restart continues after the block and never
reuses an id. (Across several brokers the block must come from shared storage:
that moves to the coordinator/controller when brokers share a store.)
"""

from __future__ import annotations

import os

BLOCK_SIZE = 1000


class ProducerIdAllocator:
    def __init__(self, path: str) -> None:
        self._path = path
        self._next = 0
        self._block_end = 0

    def load(self) -> None:
        try:
            with open(self._path) as f:
                self._next = self._block_end = int(f.read().strip() or 0)
        except FileNotFoundError:
            self._next = self._block_end = 0

    def allocate(self) -> int:
        if self._next >= self._block_end:
            self._reserve(self._next + BLOCK_SIZE)
        pid = self._next
        self._next += 1
        return pid

    def _reserve(self, end: int) -> None:
        tmp = self._path + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(end))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        self._block_end = end
