"""A replica's view of its partition's tiered part: the remote segments of its lineage and
the whole log's start. Immutable, replaced whole by each refresh, so a fetch in flight
keeps the one it started with."""

from __future__ import annotations

from dataclasses import dataclass, field

from storage.tiered.lineage import Lineage, segment_for
from storage.tiered.metadata import RemoteSegment


@dataclass(frozen=True, slots=True)
class RemoteView:
    line: Lineage = field(default_factory=Lineage)
    log_start: int = 0  # the shared remote log start (retention moved it)

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
        if offset < self.start:
            return None
        return segment_for(self.line, offset)


EMPTY = RemoteView()
