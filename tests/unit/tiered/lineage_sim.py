"""A deterministic simulation of tiering one classic partition, for the lineage rules.

One seed drives three replicas through produces, follower fetches (with KIP-279
truncation), crashes and returns, clean and unclean elections (a new epoch each time),
segment copies by the leader (some crashing between COPY_SEGMENT_STARTED and FINISHED),
orphan clean-up and remote retention. Logs are lists of the epoch of each offset: an epoch
has one leader, so (offset, epoch) names a record.

The parts under test are the real ones: ``storage.tiered.lineage`` and the epoch cache
with ``truncation_point``. Checked at every step, against the ground truth of the leader's
log (a segment is in its history iff each of its offsets has, in the leader's log, the
epoch the segment says):

- lineage and orphans are exactly the ground truth (no orphan ever served; no segment of
  the history ever taken for an orphan and deleted);
- no gap: the lineage is one chain from its first offset to its end;
- a copy starts exactly after the lineage end (or at the log start), never re-copying nor
  skipping an offset;
- a follower starts right after the lineage end and its adopted epochs describe the
  leader's records below it.
"""

from __future__ import annotations

import random
import uuid
from dataclasses import dataclass, field

from storage.classic.epoch_cache import EpochCache, truncation_point
from storage.tiered.lineage import History, epoch_vector, follower_start, lineage
from storage.tiered.metadata import RemoteSegment, SegmentState

REPLICAS = 3
TOPIC = uuid.UUID(int=1)


class SimFailure(AssertionError):
    pass


@dataclass
class Replica:
    node: int
    log: list[int] = field(default_factory=list)
    epochs: EpochCache = field(default_factory=lambda: EpochCache(None))
    alive: bool = True
    log_start: int = 0  # moved by the leader's retention, learnt by followers

    @property
    def history(self) -> History:
        return History(tuple(self.epochs.entries), len(self.log))


class Sim:
    def __init__(self, seed: int, steps: int = 200) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.steps = steps
        self.replicas = [Replica(i) for i in range(REPLICAS)]
        self.leader = 0
        self.epoch = 0
        self.segments: dict[uuid.UUID, RemoteSegment] = {}
        self.remote_log_start = 0
        self.trace: list[str] = []
        self.copies = self.orphans_deleted = self.unclean = self.crashed_copies = 0

    def start_of(self, leader: Replica) -> int:
        """The log start a leader works from: its own, or the remote log start retention
        set, if later. That one is shared (kept with the segments' metadata): a leader
        elected uncleanly with an older log start must not tier again what retention has
        deleted, which would open a gap below the offsets retention kept."""
        return max(leader.log_start, self.remote_log_start)

    def fail(self, message: str) -> None:
        tail = "\n".join(self.trace[-15:])
        raise SimFailure(f"seed {self.seed}: {message}\n{tail}")

    # ---------------------------------------------------------------- events

    def run(self) -> None:
        for _ in range(self.steps):
            self.step()
            self.check()

    def step(self) -> None:
        r = self.rng.random()
        leader = self.replicas[self.leader]
        if r < 0.3:
            self.produce(leader, self.rng.randint(1, 15))
        elif r < 0.5:
            follower = self.rng.choice([x for x in self.replicas if x is not leader])
            if follower.alive:
                self.follow(follower, leader, self.rng.randint(0, len(leader.log)))
        elif r < 0.6:
            self.crash_or_return()
        elif r < 0.7:
            self.elect(unclean=self.rng.random() < 0.4)
        elif r < 0.88:
            self.copy(leader, crash=self.rng.random() < 0.15)
        elif r < 0.95:
            self.delete_orphans(leader)
        else:
            self.retention(leader)

    def produce(self, leader: Replica, n: int) -> None:
        if leader.epochs.latest_epoch < self.epoch:
            leader.epochs.assign(self.epoch, len(leader.log))
        leader.log += [self.epoch] * n
        self.trace.append(f"produce {n} at epoch {self.epoch} -> end {len(leader.log)}")

    def follow(self, follower: Replica, leader: Replica, upto: int) -> None:
        point = truncation_point(
            follower.epochs,
            len(follower.log),
            0,
            lambda e: leader.epochs.end_offset_for(e, len(leader.log)),
        )
        del follower.log[point:]
        follower.epochs.truncate_from_end(point)
        follower.log_start = max(follower.log_start, self.start_of(leader))
        for offset in range(len(follower.log), upto):
            epoch = leader.log[offset]
            if epoch > follower.epochs.latest_epoch:
                follower.epochs.assign(epoch, offset)
            follower.log.append(epoch)
        self.trace.append(f"{follower.node} follows to {len(follower.log)} (cut at {point})")

    def crash_or_return(self) -> None:
        node = self.rng.choice(self.replicas)
        if node.alive and sum(x.alive for x in self.replicas) > 1:
            node.alive = False
            self.trace.append(f"{node.node} crashes")
            if node.node == self.leader:
                self.elect(unclean=False)
        elif not node.alive:
            node.alive = True
            self.trace.append(f"{node.node} returns")

    def elect(self, unclean: bool) -> None:
        alive = [x for x in self.replicas if x.alive]
        if unclean:
            chosen = self.rng.choice(alive)
            self.unclean += 1
        else:
            # Clean: the most advanced history among the alive (what an ISR would hold).
            chosen = max(alive, key=lambda x: (x.epochs.latest_epoch, len(x.log)))
        self.leader = chosen.node
        self.epoch += 1
        self.trace.append(f"{chosen.node} leads epoch {self.epoch} (unclean={unclean})")

    def copy(self, leader: Replica, crash: bool) -> None:
        # A copier first clears its own earlier attempts that crashed (STARTED entries).
        for s in list(self.segments.values()):
            if s.state is SegmentState.COPY_SEGMENT_STARTED:
                del self.segments[s.segment_id]
        line = lineage(leader.history, self.segments.values(), self.start_of(leader))
        if line.beyond_gap:
            self.fail(f"gap before copying: {line.beyond_gap}")
        start = line.copy_from(self.start_of(leader))
        # Only "rolled" data: the last few offsets stay in the active segment.
        last_rolled = len(leader.log) - 1 - self.rng.randint(0, 5)
        if last_rolled < start:
            return
        end = self.rng.randint(start, min(last_rolled, start + 40))
        segment = RemoteSegment(
            TOPIC,
            0,
            uuid.UUID(int=self.rng.getrandbits(128)),
            start,
            end,
            end,
            self.epoch,
            epoch_vector(leader.epochs.entries, start, end),
            end - start + 1,
            leader.node,
        )
        if crash:
            self.segments[segment.segment_id] = segment
            self.crashed_copies += 1
            self.trace.append(f"copy [{start}, {end}] crashes before FINISHED")
            return
        self.segments[segment.segment_id] = segment.with_state(
            SegmentState.COPY_SEGMENT_FINISHED, 0
        )
        self.copies += 1
        after = lineage(leader.history, self.segments.values(), self.start_of(leader))
        if after.end != end or after.start != (line.start if line.end >= 0 else start):
            self.fail(f"copy [{start}, {end}] after lineage end {line.end}: now {after}")
        self.trace.append(f"{leader.node} copies [{start}, {end}]")

    def delete_orphans(self, leader: Replica) -> None:
        line = lineage(leader.history, self.segments.values(), self.start_of(leader))
        for s in line.orphans + line.below_start:
            del self.segments[s.segment_id]
            self.orphans_deleted += 1
        self.trace.append(f"delete {len(line.orphans)} orphans")

    def retention(self, leader: Replica) -> None:
        # As the deleter does: the log start moves past the first segment, and every
        # segment ending below it goes (one that overlaps it stays: it still holds
        # offsets at and after the new start).
        line = lineage(leader.history, self.segments.values(), self.start_of(leader))
        if len(line.segments) > 3:
            new_start = line.segments[0].end_offset + 1
            leader.log_start = new_start
            self.remote_log_start = max(self.remote_log_start, new_start)
            gone = [s for s in line.segments if s.end_offset < new_start]
            for s in gone:
                del self.segments[s.segment_id]
            self.trace.append(f"retention: log start {new_start}, {len(gone)} deleted")

    # ---------------------------------------------------------------- invariants

    @staticmethod
    def matches(epochs: tuple[tuple[int, int], ...], first: int, last: int, log: list[int]) -> bool:
        """Whether ``log`` holds, at every offset of [first, last], the epoch the vector
        says (compared range by range: the simulator checks this at every step)."""
        if last >= len(log):
            return False
        for i, (epoch, start) in enumerate(epochs):
            lo = max(start, first)
            hi = epochs[i + 1][1] if i + 1 < len(epochs) else last + 1
            if lo < hi and log[lo:hi] != [epoch] * (hi - lo):
                return False
        return True

    def truly_ours(self, s: RemoteSegment, log: list[int]) -> bool:
        return self.matches(s.epochs, s.start_offset, s.end_offset, log)

    def check(self) -> None:
        leader = self.replicas[self.leader]
        line = lineage(leader.history, self.segments.values(), self.start_of(leader), self.epoch)
        if line.newer:
            self.fail(f"segments newer than the current epoch: {line.newer}")
        finished = [
            s
            for s in self.segments.values()
            if s.state is SegmentState.COPY_SEGMENT_FINISHED
            and s.end_offset >= self.start_of(leader)
        ]
        truth = {s.segment_id for s in finished if self.truly_ours(s, leader.log)}
        got = {s.segment_id for s in line.segments + line.beyond_gap}
        if got != truth:
            self.fail(f"lineage {sorted(got)} but the leader's history holds {sorted(truth)}")
        if line.beyond_gap:
            self.fail(f"gap in the lineage: {line}")
        reach = line.start - 1
        for s in line.segments:  # sorted by start: one chain, no hole
            if s.start_offset > reach + 1:
                self.fail(f"hole before {s.start_offset} in the lineage")
            reach = max(reach, s.end_offset)
        if line.segments and reach != line.end:
            self.fail(f"lineage end {line.end}, segments reach {reach}")
        start = follower_start(leader.history, list(self.segments.values()), self.start_of(leader))
        if line.end < 0:
            if start.offset is not None:
                self.fail(f"follower start {start} with nothing tiered")
            return
        if start.offset != line.end + 1:
            self.fail(f"follower starts at {start.offset}, lineage ends at {line.end}")
        if not self.matches(start.epochs, line.start, line.end, leader.log):
            self.fail(f"adopted epochs {start.epochs} do not describe the leader's records")
