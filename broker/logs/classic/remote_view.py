"""A replica's view of its partition's tiered part: the remote segments of its lineage and
the whole log's start. Immutable, replaced whole by each refresh, so a fetch in flight
keeps the one it started with. Held by the classic partition (``partition.remote``), made
by the tiered part's manager (``broker.logs.tiered.manager``), which sits above it."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from storage.tiered.lineage import Lineage, segment_for
from storage.tiered.metadata import RemoteSegment


@dataclass(frozen=True, slots=True)
class RemoteView:
    line: Lineage = field(default_factory=Lineage)
    log_start: int = 0  # the shared remote log start (retention moved it)
    # Start offsets of ``line.segments`` (ordered by start): a fetch finds its segment by
    # bisection, not by a walk over a partition's thousands of segments.
    _starts: list[int] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_starts", [s.start_offset for s in self.line.segments])

    @property
    def end(self) -> int:
        """Last tiered offset of the lineage without a gap (-1: nothing tiered)."""
        return self.line.end

    @property
    def start(self) -> int:
        """First offset served from remote segments (-1: nothing)."""
        if self.line.end < 0:
            return -1
        return max(self.line.start, self.log_start)

    def segment(self, offset: int) -> RemoteSegment | None:
        """The lineage segment serving ``offset`` (the one starting last, as
        ``lineage.segment_for``)."""
        if offset < self.start:
            return None
        i = bisect.bisect_right(self._starts, offset) - 1
        if i >= 0 and self.line.segments[i].end_offset >= offset:
            return self.line.segments[i]
        return segment_for(self.line, offset)  # overlapping copies: the careful way


EMPTY = RemoteView()
