"""Which remote segments belong to a replica's history: pure functions, no I/O.

A partition's history is its leader's log, described by the leader epoch cache: epoch e
wrote the offsets from its start up to the next epoch's start (the latest epoch: up to
the log end). Two logs that hold the same epoch at an offset hold the same records up to
it (an epoch has one leader, which appended from one place), so a remote segment is in a
leader's lineage when every epoch of its epoch vector covers, in the segment, offsets
that the same epoch covers in the leader's history. A segment copied by a leader whose
tail was later cut (truncation after an unclean election, or an ISR shrunk to the leader
and then lost) fails that test for the current leader: it is an *orphan*, never served,
and deleted.

Resolved here, for the parts that act on them (copier, reader, a becoming follower):

- ``lineage``: the segments in a leader's lineage, the orphans, the last offset the
  lineage covers without a gap (copying resumes right after it, so every offset below a
  tiered one is tiered too) and the segments beyond a gap (none, when the invariant holds).
- ``follower_start``: where a follower starts replicating (after the remote end of the
  current lineage, which it must not fetch again) and the epoch entries it must adopt for
  the offsets it will never hold locally.
- ``segment_for``: the lineage segment that serves an offset.

Only COPY_SEGMENT_FINISHED segments count: a copy in progress, or a deletion, is not data.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from .metadata import EpochVector, RemoteSegment, SegmentState


@dataclass(frozen=True, slots=True)
class History:
    """A replica's view of its log: epoch cache entries (epoch, start offset), ascending,
    and its log end offset (the next offset to write)."""

    epochs: EpochVector
    log_end: int

    def ranges(self) -> dict[int, tuple[int, int]]:
        """epoch → [start, end) it wrote in this history."""
        out: dict[int, tuple[int, int]] = {}
        for i, (epoch, start) in enumerate(self.epochs):
            end = self.epochs[i + 1][1] if i + 1 < len(self.epochs) else self.log_end
            out[epoch] = (start, end)
        return out


def segment_ranges(segment: RemoteSegment) -> list[tuple[int, int, int]]:
    """(epoch, first, end exclusive) of each epoch's records within the segment."""
    out = []
    for i, (epoch, start) in enumerate(segment.epochs):
        end = segment.epochs[i + 1][1] if i + 1 < len(segment.epochs) else segment.end_offset + 1
        out.append((epoch, max(start, segment.start_offset), end))
    return out


def in_lineage(segment: RemoteSegment, history: History) -> bool:
    """Whether every record of ``segment`` is, at its offset, the record of ``history``."""
    if not history.epochs:
        return False
    return _in_ranges(segment, history.ranges(), history.epochs[0])


def _in_ranges(
    segment: RemoteSegment, ranges: dict[int, tuple[int, int]], first_entry: tuple[int, int]
) -> bool:
    first_epoch, first_start = first_entry
    for i, (epoch, first, end) in enumerate(segment_ranges(segment)):
        mine = ranges.get(epoch)
        if mine is None:
            if epoch < first_epoch and end <= first_start:
                # Below the history's log start, whose epochs it has forgotten (the cache
                # is truncated from the start with the log): unknown, not contradicted;
                # those offsets are never served, and retention removes them.
                continue
            return False
        start, my_end = mine
        if end > my_end:
            # The segment holds records of this epoch past where the history's epoch ended:
            # a tail that this history cut, or never had.
            return False
        # An epoch starts at one offset in every history that has it; the history's first
        # epoch may start later only because its log start moved past older records (the
        # epoch cache was truncated from the start), which cuts nothing of the lineage.
        if epoch == first_epoch:
            continue
        if i == 0 and first < start:
            return False
        if i > 0 and first != start:
            return False
    return True


def _finished(segments: Iterable[RemoteSegment]) -> list[RemoteSegment]:
    return sorted(
        (s for s in segments if s.state is SegmentState.COPY_SEGMENT_FINISHED),
        key=lambda s: (s.start_offset, s.end_offset, s.segment_id.bytes),
    )


@dataclass(frozen=True, slots=True)
class Lineage:
    segments: list[RemoteSegment] = field(default_factory=list)  # in lineage, no gap
    orphans: list[RemoteSegment] = field(default_factory=list)
    # In lineage but after a gap: must not be served (a reader walking from the log start
    # would skip records) nor copied after. Empty while the copier keeps the invariant.
    beyond_gap: list[RemoteSegment] = field(default_factory=list)
    start: int = -1  # first offset tiered in the lineage (-1: nothing)
    end: int = -1  # last offset tiered in the lineage without a gap (-1: nothing)
    # Wholly below the log start: retention's to delete, never served, never chained (a
    # leader elected with an older log start may have copied offsets retention had passed).
    below_start: list[RemoteSegment] = field(default_factory=list)
    # Copied by a leader of a newer epoch than the one asking: this replica has been
    # deposed and does not know it yet. Neither served nor deleted by it.
    newer: list[RemoteSegment] = field(default_factory=list)

    def copy_from(self, log_start: int) -> int:
        """Where copying resumes: right after the tiered lineage, else the log start."""
        return max(self.end + 1, log_start) if self.end >= 0 else log_start


def lineage(
    history: History,
    segments: Iterable[RemoteSegment],
    log_start: int = 0,
    leader_epoch: int | None = None,
) -> Lineage:
    """The lineage of ``history`` among ``segments``, from ``log_start`` on. With the
    asking leader's ``leader_epoch``, segments copied in a newer epoch are set apart
    (``newer``) instead of being taken for orphans."""
    ours: list[RemoteSegment] = []
    orphans: list[RemoteSegment] = []
    below: list[RemoteSegment] = []
    newer: list[RemoteSegment] = []
    # The history's epoch ranges once, not once per segment (a leader re-evaluates its
    # lineage on every copy and every become-leader).
    ranges = history.ranges()
    for s in _finished(segments):
        if leader_epoch is not None and s.leader_epoch > leader_epoch:
            newer.append(s)
        elif s.end_offset < log_start:
            below.append(s)
        elif history.epochs and _in_ranges(s, ranges, history.epochs[0]):
            ours.append(s)
        else:
            orphans.append(s)
    if not ours:
        return Lineage(orphans=orphans, below_start=below, newer=newer)
    chained: list[RemoteSegment] = []
    beyond: list[RemoteSegment] = []
    start, end = ours[0].start_offset, ours[0].start_offset - 1
    for s in ours:
        if beyond or s.start_offset > end + 1:
            beyond.append(s)
            continue
        chained.append(s)
        end = max(end, s.end_offset)
    return Lineage(chained, orphans, beyond, start, end, below, newer)


def segment_for(line: Lineage, offset: int) -> RemoteSegment | None:
    """The lineage segment holding ``offset`` (of overlapping ones, the one starting last:
    its read reaches furthest past the offset)."""
    best = None
    for s in line.segments:
        if s.start_offset <= offset <= s.end_offset:
            best = s
    return best


@dataclass(frozen=True, slots=True)
class FollowerStart:
    # The follower's new log start: it replicates from here; everything below is tiered
    # (None: nothing is tiered in the lineage, replicate as without tiering).
    offset: int | None
    # Epoch cache entries for the tiered offsets below ``offset``, which the follower adopts
    # (and keeps: they are its lineage should it lead one day).
    epochs: EpochVector
    # The lineage segment ending at ``offset - 1`` (the one starting last, of copies that
    # overlap): its producer snapshot is the producers' state where the follower starts.
    last: RemoteSegment | None = None


def follower_start(
    leader: History, segments: Sequence[RemoteSegment], log_start: int = 0
) -> FollowerStart:
    """Where a follower starts, from the leader's history and log start and the remote
    segments (the largest tiered offset is not the answer: orphans may reach further)."""
    line = lineage(leader, segments, log_start)
    if line.end < 0:
        return FollowerStart(None, ())
    starts: dict[int, int] = {}
    for s in line.segments:
        for epoch, first, _end in segment_ranges(s):
            starts[epoch] = min(first, starts.get(epoch, first))
    adopted = tuple(sorted((e, s) for e, s in starts.items() if s <= line.end))
    last = max((s for s in line.segments if s.end_offset == line.end), key=lambda s: s.start_offset)
    return FollowerStart(line.end + 1, adopted, last)


def history_floor(segments: Iterable[RemoteSegment], log_start: int = 0) -> int | None:
    """The oldest epoch any finished segment from ``log_start`` on names: ``follower_start``
    needs the leader's history from that epoch on only (older epochs are in no segment).
    None when no segment counts (nothing tiered: a follower replicates as without
    tiering)."""
    epochs = [
        s.epochs[0][0]
        for s in segments
        if s.state is SegmentState.COPY_SEGMENT_FINISHED and s.end_offset >= log_start and s.epochs
    ]
    return min(epochs, default=None)


def epoch_vector(cache: Sequence[tuple[int, int]], start: int, end: int) -> EpochVector:
    """The slice of an epoch cache covering offsets [start, end] (inclusive): what a copied
    segment records. The first entry starts at ``start`` (Kafka's convention: the vector
    says nothing of offsets outside the segment)."""
    out: list[tuple[int, int]] = []
    for epoch, first in cache:
        if first > end:
            break
        if first <= start:
            out = [(epoch, start)]
        else:
            out.append((epoch, first))
    if not out:
        raise ValueError(f"no epoch covers offset {start}")
    return tuple(out)
