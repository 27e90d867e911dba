"""Lineage of tiered data: the scenario of the design document (seeds/002, "Lineage of
tiered data"), replayed step by step with concrete offsets, and edge cases.

The scenario, with θ made concrete (epochs g1..g6 are 1..6):

- g1: replicas 1, 2, 3 all hold [0, 99].
- g2: 2 and 3 offline; 1 leads, writes 100..199 and tiers A = [0, 149].
- g3: 1 offline; 3 leads (unclean: 2 and 3 lack g2), writes from 100; 2 follows up to 189;
  3 tiers B = [0, 179].
- g4: 2 falls out of the ISR; 3 writes 190..251 and tiers C = [180, 249].
- g5: 3 offline; 2 leads from its end (190), writes 190..299.
- g6: 3 returns (2 still leads): it truncates [190, 251]; C is now an orphan. 2 tiers
  D = [180, 239] (after B, no gap). Then 1 returns.

Expected: A and C orphans, B and D the lineage, whose end (239) is below the largest
offset ever tiered (249); both returning followers start at 240.
"""

from __future__ import annotations

import uuid

from storage.classic.epoch_cache import EpochCache, truncation_point
from storage.tiered.lineage import (
    History,
    epoch_vector,
    follower_start,
    in_lineage,
    lineage,
    segment_for,
)
from storage.tiered.metadata import RemoteSegment, SegmentState

TOPIC = uuid.UUID(int=7)


class Replica:
    def __init__(self, node: int) -> None:
        self.node = node
        self.log: list[int] = []  # the epoch of each offset
        self.epochs = EpochCache(None)

    def write(self, epoch: int, upto: int) -> None:
        """Lead in ``epoch`` and write up to offset ``upto`` (inclusive)."""
        if self.epochs.latest_epoch < epoch:
            self.epochs.assign(epoch, len(self.log))
        self.log += [epoch] * (upto + 1 - len(self.log))

    def follow(self, leader: Replica, upto: int) -> None:
        point = truncation_point(
            self.epochs,
            len(self.log),
            0,
            lambda e: leader.epochs.end_offset_for(e, len(leader.log)),
        )
        del self.log[point:]
        self.epochs.truncate_from_end(point)
        for offset in range(len(self.log), upto + 1):
            epoch = leader.log[offset]
            if epoch > self.epochs.latest_epoch:
                self.epochs.assign(epoch, offset)
            self.log.append(epoch)

    @property
    def history(self) -> History:
        return History(tuple(self.epochs.entries), len(self.log))

    def tier(self, start: int, end: int, leader_epoch: int) -> RemoteSegment:
        return RemoteSegment(
            TOPIC,
            0,
            uuid.uuid4(),
            start,
            end,
            end,
            leader_epoch,
            epoch_vector(self.epochs.entries, start, end),
            end - start + 1,
            self.node,
            SegmentState.COPY_SEGMENT_FINISHED,
        )


def names(found: list[RemoteSegment], named: dict[str, RemoteSegment]) -> list[str]:
    by_id = {s.segment_id: n for n, s in named.items()}
    return sorted(by_id[s.segment_id] for s in found)


def test_the_documents_scenario() -> None:
    r1, r2, r3 = Replica(1), Replica(2), Replica(3)
    tiered: dict[str, RemoteSegment] = {}

    def check(leader: Replica, ours: list[str], orphans: list[str], end: int) -> None:
        line = lineage(leader.history, tiered.values())
        assert names(line.segments, tiered) == ours
        assert names(line.orphans, tiered) == orphans
        assert line.beyond_gap == []
        assert line.end == end
        # Every tiered offset of the lineage is the leader's own record.
        for s in line.segments:
            for offset in range(s.start_offset, s.end_offset + 1):
                assert s.epoch_at(offset) == leader.log[offset]

    # g1
    r1.write(1, 99)
    r2.follow(r1, 99)
    r3.follow(r1, 99)
    # g2: 1 alone
    r1.write(2, 199)
    assert lineage(r1.history, []).copy_from(0) == 0
    tiered["A"] = r1.tier(0, 149, 2)
    check(r1, ["A"], [], 149)
    assert lineage(r1.history, tiered.values()).copy_from(0) == 150
    # g3: 3 leads uncleanly; A (with g2 records) is not its history
    r3.write(3, 179)
    r2.follow(r3, 179)
    check(r3, [], ["A"], -1)
    assert lineage(r3.history, tiered.values()).copy_from(0) == 0
    tiered["B"] = r3.tier(0, 179, 3)
    r3.write(3, 189)
    r2.follow(r3, 189)
    check(r3, ["B"], ["A"], 179)
    # g4: the ISR is only 3
    r3.write(4, 251)
    assert lineage(r3.history, tiered.values()).copy_from(0) == 180
    tiered["C"] = r3.tier(180, 249, 4)
    check(r3, ["B", "C"], ["A"], 249)
    # g5: 2 leads; C (g4) is not its history
    r2.write(5, 299)
    check(r2, ["B"], ["A", "C"], 179)
    assert lineage(r2.history, tiered.values()).copy_from(0) == 180
    # g6: 3 returns and truncates its g4 tail
    r2.write(6, 299)  # the new epoch, nothing written yet
    start3 = follower_start(r2.history, list(tiered.values()))
    assert start3.offset == 180 and start3.epochs == ((1, 0), (3, 100))
    r3.follow(r2, 299)
    assert r3.log == r2.log  # its g4 tail [190, 251] is gone
    tiered["D"] = r2.tier(180, 239, 6)
    r2.write(6, 320)
    check(r2, ["B", "D"], ["A", "C"], 239)
    assert max(s.end_offset for s in tiered.values()) == 249  # θ5 > θ6: not the answer
    # 3 would now start at 240; and 1 (stuck in g2) too
    for _replica in (r3, r1):
        start = follower_start(r2.history, list(tiered.values()))
        assert start.offset == 240
        assert start.epochs == ((1, 0), (3, 100), (5, 190))
    # A reader serves each offset from the lineage only.
    line = lineage(r2.history, tiered.values())
    assert segment_for(line, 120) == tiered["B"]
    assert segment_for(line, 200) == tiered["D"]
    assert segment_for(line, 245) is None  # only the orphan C holds it
    # The returning replica 1 truncates to the leader's history like any follower.
    r1.follow(r2, 320)
    assert r1.log == r2.log


def seg(
    start: int,
    end: int,
    epochs: tuple[tuple[int, int], ...],
    state: SegmentState = SegmentState.COPY_SEGMENT_FINISHED,
) -> RemoteSegment:
    return RemoteSegment(TOPIC, 0, uuid.uuid4(), start, end, end, 9, epochs, 1, 1, state)


def test_only_finished_copies_count() -> None:
    history = History(((0, 0),), 100)
    started = seg(0, 9, ((0, 0),), SegmentState.COPY_SEGMENT_STARTED)
    deleting = seg(10, 19, ((0, 10),), SegmentState.DELETE_SEGMENT_STARTED)
    line = lineage(history, [started, deleting])
    assert line.segments == [] and line.orphans == [] and line.end == -1


def test_a_segment_past_the_log_end_is_not_in_lineage() -> None:
    assert in_lineage(seg(0, 9, ((0, 0),)), History(((0, 0),), 10))
    assert not in_lineage(seg(0, 10, ((0, 0),)), History(((0, 0),), 10))
    assert not in_lineage(seg(0, 9, ((0, 0),)), History((), 10))


def test_an_epoch_starting_elsewhere_is_another_history() -> None:
    history = History(((0, 0), (2, 50)), 100)
    assert in_lineage(seg(40, 60, ((0, 40), (2, 50))), history)
    assert not in_lineage(seg(40, 60, ((0, 40), (2, 55))), history)
    assert in_lineage(seg(52, 60, ((2, 52),)), history)
    # Epoch 2 holding offset 45: the history has epoch 0 there.
    assert not in_lineage(seg(45, 60, ((2, 45),)), history)


def test_the_log_start_moving_forgets_old_epochs_without_orphaning() -> None:
    # The cache was truncated from the start at 120: epoch 0 is forgotten, epoch 2 now
    # "starts" at 120. Segments below are unknown, not contradicted.
    history = History(((2, 120),), 300)
    assert in_lineage(seg(40, 60, ((0, 40), (2, 50))), history)
    assert in_lineage(seg(100, 200, ((2, 100),)), history)
    assert not in_lineage(seg(100, 200, ((2, 100), (3, 150))), history)


def test_a_gap_stops_the_lineage_there() -> None:
    history = History(((0, 0),), 100)
    a, c = seg(0, 9, ((0, 0),)), seg(20, 29, ((0, 20),))
    line = lineage(history, [c, a])
    assert line.segments == [a] and line.beyond_gap == [c] and line.end == 9
    assert line.copy_from(0) == 10


def test_overlapping_segments_chain() -> None:
    history = History(((0, 0),), 100)
    a, b = seg(0, 19, ((0, 0),)), seg(10, 29, ((0, 10),))
    line = lineage(history, [a, b])
    assert line.end == 29 and segment_for(line, 15) == b and segment_for(line, 5) == a


def test_epoch_vector_slices_the_cache() -> None:
    cache = [(0, 0), (2, 50), (5, 90)]
    assert epoch_vector(cache, 10, 40) == ((0, 10),)
    assert epoch_vector(cache, 40, 95) == ((0, 40), (2, 50), (5, 90))
    assert epoch_vector(cache, 50, 89) == ((2, 50),)
    assert epoch_vector(cache, 95, 99) == ((5, 95),)


def test_no_tiering_means_the_follower_replicates_as_usual() -> None:
    assert follower_start(History(((0, 0),), 10), []).offset is None
