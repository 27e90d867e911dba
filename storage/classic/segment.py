"""One log segment: ``<base offset, 20 digits>.log`` plus its ``.index`` and ``.timeindex``.

Batches are appended whole, with their real offsets in the header, so a read is a byte
range of the file served as it is. The segment knows its next offset, size and max
timestamp; ``recover`` re-walks the file after an unclean shutdown, truncating a torn
or corrupt tail and rebuilding the indexes.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Iterator

from protocol.records import HEADER_SIZE

from .batches import StoredBatch, header_batch, walk
from .index import OffsetIndex, TimeIndex

# Bytes read per step when walking a segment file (recovery, whole-file walks).
_WALK_CHUNK = 1 << 20
# ... and when looking a batch up from an index entry: the entry is at most
# index.interval.bytes (4 KiB by default) before it, so a small first read nearly always
# holds it (a lookup used to read a whole MiB for one header).
_LOOKUP_CHUNK = 16 << 10


def file_name(base_offset: int, suffix: str) -> str:
    return f"{base_offset:020d}{suffix}"


class Segment:
    def __init__(
        self,
        directory: str,
        base_offset: int,
        index_interval_bytes: int = 4096,
        now: float | None = None,
    ) -> None:
        self.base_offset = base_offset
        self.path = os.path.join(directory, file_name(base_offset, ".log"))
        self.index = OffsetIndex(
            os.path.join(directory, file_name(base_offset, ".index")), base_offset
        )
        self.time_index = TimeIndex(
            os.path.join(directory, file_name(base_offset, ".timeindex")), base_offset
        )
        self._interval = index_interval_bytes
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        self.size = os.fstat(self._fd).st_size
        self.next_offset = base_offset
        self.max_timestamp = -1
        self._since_index = 0
        # segment.ms counts from the segment's creation (the file's mtime after a restart).
        self.created = os.fstat(self._fd).st_mtime if self.size else (now or time.time())

    # ---------------------------------------------------------------- lifecycle

    def load(self) -> None:
        """After a clean shutdown: trust the indexes, find the last batch from the last
        index entry (a short scan) for the next offset and max timestamp."""
        last: StoredBatch | None = None
        for last in self._walk_from(self.index.lookup(2**62)):  # noqa: B007 - want the last
            pass
        if last is not None:
            self.next_offset = last.last_offset + 1
        self.max_timestamp = max(self.time_index.last_timestamp, last.max_timestamp if last else -1)

    def recover(self) -> int:
        """Re-walk the whole file: keep the valid batches, truncate what follows the last
        one, rebuild both indexes. Returns the bytes truncated."""
        self.index.reset()
        self.time_index.reset()
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        self._since_index = 0
        valid_end = 0
        for batch in self._walk_from(0):
            self._indexed(batch)
            valid_end = batch.position + batch.size
        truncated = self.size - valid_end
        if truncated:
            os.ftruncate(self._fd, valid_end)
            self.size = valid_end
        return truncated

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1

    def delete(self) -> None:
        self.close()
        for path in (self.path, self.index.path, self.time_index.path):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)

    def flush(self) -> None:
        os.fsync(self._fd)

    # ---------------------------------------------------------------- append / read

    def append(self, data: bytes, base_offset: int, last_offset: int, max_timestamp: int) -> None:
        """Append one batch (its header already carries ``base_offset``)."""
        position = self.size
        os.pwrite(self._fd, data, position)
        self.size += len(data)
        self._indexed(StoredBatch(position, len(data), base_offset, last_offset, -1, max_timestamp))

    def _indexed(self, batch: StoredBatch) -> None:
        if self.next_offset == self.base_offset or self._since_index >= self._interval:
            self.index.append(batch.base_offset, batch.position)
            self.time_index.append(max(batch.max_timestamp, self.max_timestamp), batch.base_offset)
            self._since_index = 0
        self._since_index += batch.size
        self.next_offset = batch.last_offset + 1
        self.max_timestamp = max(self.max_timestamp, batch.max_timestamp)

    def position_of(self, offset: int) -> tuple[int, int] | None:
        """(file position, base offset) of the batch holding ``offset`` or, if none does,
        the first batch after it; None when the segment ends before it."""
        for batch in self._walk_from(self.index.lookup(offset), False, _LOOKUP_CHUNK):
            if batch.last_offset >= offset:
                return batch.position, batch.base_offset
        return None

    def read(
        self, offset: int, max_bytes: int, max_offset: int, min_one: bool
    ) -> bytes | memoryview:
        """Whole batches from the one holding ``offset``, below ``max_offset`` (exclusive,
        e.g. the high watermark), within ``max_bytes`` — or the first batch whatever its
        size when ``min_one`` (Kafka's minOneMessage).

        One read of the answer's bytes, cut after its last whole batch (the batches are
        walked in the bytes read, not read twice: the profile of a classic leader showed
        the walk's own reads as a tenth of its CPU)."""
        found = self.position_of(offset)
        if found is None:
            return b""
        start, base = found
        if base >= max_offset:
            return b""
        limit = self.size
        if max_offset < self.next_offset:
            # The high watermark inside this segment: nothing from its batch on.
            below = self.position_of(max_offset)
            if below is not None:
                limit = below[0]
        data = os.pread(self._fd, max(min(max_bytes, limit - start), 0), start)
        end = 0
        for batch in walk(data, start, check_crc=False):
            end = batch.position + batch.size - start
        if end == 0 and min_one:
            # The first batch alone is larger than max_bytes: all of it.
            for batch in self._walk_from(start, False, _LOOKUP_CHUNK):
                if batch.position + batch.size <= limit:
                    return os.pread(self._fd, batch.size, start)
                break
            return b""
        # Cut by a view, not a copy: the copy of a megabyte answer was 38 % of a classic
        # broker's CPU serving librdkafka consumers (py-spy), more than the read itself.
        return data if end == len(data) else memoryview(data)[:end]

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(base offset, max timestamp) of the first batch whose max timestamp >= the one
        given; None if no batch of this segment has one."""
        found = self.position_of(self.time_index.lookup(timestamp))
        if found is None:
            return None
        for batch in self._walk_from(found[0], check_crc=False):
            if batch.max_timestamp >= timestamp:
                return batch.base_offset, batch.max_timestamp
        return None

    def truncate_to(self, offset: int) -> int:
        """Remove every batch holding ``offset`` or later (a batch is never cut); returns
        the bytes removed."""
        found = self.position_of(offset)
        if found is None:
            return 0
        position = found[0]
        removed = self.size - position
        os.ftruncate(self._fd, position)
        self.size = position
        self.index.truncate_to_position(position)
        self.time_index.truncate_to_offset(found[1])
        # Recompute the end: the last batch left (a short walk from the last index entry).
        self.next_offset = self.base_offset
        self.max_timestamp = -1
        last = None
        for last in self._walk_from(0, check_crc=False):
            self.max_timestamp = max(self.max_timestamp, last.max_timestamp)
        if last is not None:
            self.next_offset = last.last_offset + 1
        return removed

    # ---------------------------------------------------------------- walking

    def _walk_from(
        self, position: int, check_crc: bool = True, first_chunk: int = _WALK_CHUNK
    ) -> Iterator[StoredBatch]:
        """Batches from ``position`` to the end of the file (or the first invalid one),
        reading the file in chunks (the first of ``first_chunk`` bytes)."""
        pos = position
        step = first_chunk
        while pos < self.size:
            chunk = os.pread(self._fd, min(step, self.size - pos), pos)
            step = _WALK_CHUNK
            advanced = False
            for batch in walk(chunk, pos, check_crc):
                yield batch
                pos = batch.position + batch.size
                advanced = True
            if advanced:
                continue
            # A batch larger than the chunk, whose start (``pos``) is the chunk's: its
            # header is in the chunk already.
            if not check_crc:
                # Only its header wanted (a lookup): not the rest of it (reading all of a
                # 256 KiB batch to find the next one was 15 % of a classic broker's CPU
                # serving consumers).
                batch = header_batch(chunk[:HEADER_SIZE], pos, self.size - pos)
                if batch is None:
                    return
                yield batch
                pos += batch.size
                step = first_chunk
                continue
            # Read exactly it, or stop at a bad one.
            if len(chunk) < 12:
                return
            length = int.from_bytes(chunk[8:12], "big", signed=True)
            whole = os.pread(self._fd, max(length + 12, 0), pos)
            batches = list(walk(whole, pos, check_crc))
            if not batches:
                return
            yield batches[0]
            pos = batches[0].position + batches[0].size
