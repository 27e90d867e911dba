"""A segment's sparse indexes, as Kafka keeps them.

- offset index (``.index``): (offset relative to the segment's base: int32, file position:
  int32) every ``index.interval.bytes`` of log; a read bisects it and scans forward from
  the position found.
- time index (``.timeindex``): (max timestamp so far: int64, relative offset: int32),
  added with the offset index when the segment's max timestamp grew; a timestamp lookup
  bisects it and scans forward.

Entries are appended to the files as they are made and kept in memory as arrays. After an
unclean shutdown the indexes of the segments being recovered are rebuilt from the log, so
an index file never has to be trusted beyond the last clean shutdown.
"""

from __future__ import annotations

import bisect
import os
import struct
from array import array

_OFFSET_ENTRY = struct.Struct(">ii")
_TIME_ENTRY = struct.Struct(">qi")


class OffsetIndex:
    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._relative = array("q")
        self._positions = array("q")
        self._load()

    def _load(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb") as f:
            data = f.read()
        for rel, pos in _OFFSET_ENTRY.iter_unpack(data[: len(data) // 8 * 8]):
            self._relative.append(rel)
            self._positions.append(pos)

    def __len__(self) -> int:
        return len(self._relative)

    def append(self, offset: int, position: int) -> None:
        rel = offset - self.base_offset
        if self._relative and rel <= self._relative[-1]:
            return  # entries stay strictly increasing
        self._relative.append(rel)
        self._positions.append(position)
        with open(self.path, "ab") as f:
            f.write(_OFFSET_ENTRY.pack(rel, position))

    def lookup(self, offset: int) -> int:
        """File position of the last indexed batch starting at or before ``offset`` (0 if
        none): a read scans forward from there."""
        i = bisect.bisect_right(self._relative, offset - self.base_offset) - 1
        return self._positions[i] if i >= 0 else 0

    def truncate_to_position(self, position: int) -> None:
        """Drop the entries pointing at or past ``position`` (a truncated log)."""
        keep = bisect.bisect_left(self._positions, position)
        del self._relative[keep:]
        del self._positions[keep:]
        self._rewrite()

    def reset(self) -> None:
        del self._relative[:]
        del self._positions[:]
        self._rewrite()

    def _rewrite(self) -> None:
        with open(self.path, "wb") as f:
            f.write(
                b"".join(
                    _OFFSET_ENTRY.pack(r, p)
                    for r, p in zip(self._relative, self._positions, strict=True)
                )
            )


class TimeIndex:
    def __init__(self, path: str, base_offset: int) -> None:
        self.path = path
        self.base_offset = base_offset
        self._timestamps = array("q")
        self._relative = array("q")
        self._load()

    def _load(self) -> None:
        if not os.path.exists(self.path):
            return
        with open(self.path, "rb") as f:
            data = f.read()
        for ts, rel in _TIME_ENTRY.iter_unpack(data[: len(data) // 12 * 12]):
            self._timestamps.append(ts)
            self._relative.append(rel)

    def __len__(self) -> int:
        return len(self._timestamps)

    @property
    def last_timestamp(self) -> int:
        return self._timestamps[-1] if self._timestamps else -1

    def append(self, max_timestamp: int, offset: int) -> None:
        if self._timestamps and max_timestamp <= self._timestamps[-1]:
            return  # only a grown max timestamp is worth an entry
        self._timestamps.append(max_timestamp)
        self._relative.append(offset - self.base_offset)
        with open(self.path, "ab") as f:
            f.write(_TIME_ENTRY.pack(max_timestamp, offset - self.base_offset))

    def lookup(self, timestamp: int) -> int:
        """An offset from which to scan for the first batch with max timestamp >=
        ``timestamp``: that of the last entry below it (the segment base if none)."""
        i = bisect.bisect_left(self._timestamps, timestamp) - 1
        return self.base_offset + (self._relative[i] if i >= 0 else 0)

    def truncate_to_offset(self, offset: int) -> None:
        keep = bisect.bisect_left(self._relative, offset - self.base_offset)
        del self._timestamps[keep:]
        del self._relative[keep:]
        self._rewrite()

    def reset(self) -> None:
        del self._timestamps[:]
        del self._relative[:]
        self._rewrite()

    def _rewrite(self) -> None:
        with open(self.path, "wb") as f:
            f.write(
                b"".join(
                    _TIME_ENTRY.pack(t, r)
                    for t, r in zip(self._timestamps, self._relative, strict=True)
                )
            )
