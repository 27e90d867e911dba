"""A deterministic simulation of classic-topic replication for one partition.

One seed drives three replicas through random produces (acks=all, min.insync.replicas=2),
follower fetches, ISR shrinks and expands, crashes, restarts and leader elections (clean
only: from the ISR, a new leader epoch each time). The parts under test are the real ones:
``replication.leader.LeaderState`` (follower progress, high watermark, ISR changes) and the
leader epoch cache with ``truncation_point`` (KIP-101/279) that a returning replica uses
before fetching. Logs are lists of (epoch, value) in memory so thousands of seeds run in
seconds.

Checked:
- acked ⇒ present: every acknowledged record is, at its offset, in the log of every later
  leader (checked at each election) and of every replica at the end;
- one history: once every replica is back and has caught up, all logs are equal.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field

from replication.leader import LeaderState
from storage.classic.epoch_cache import EpochCache, truncation_point

REPLICAS = 3
MIN_INSYNC = 2
LAG_MAX_MS = 300


class SimFailure(AssertionError):
    pass


@dataclass
class Replica:
    node: int
    log: list[tuple[int, int]] = field(default_factory=list)  # (epoch, value) per offset
    epochs: EpochCache = field(default_factory=lambda: EpochCache(None))
    alive: bool = True
    high_watermark: int = 0
    must_truncate: bool = False

    @property
    def end(self) -> int:
        return len(self.log)

    def truncate(self, offset: int) -> None:
        del self.log[offset:]
        self.epochs.truncate_from_end(offset)
        self.high_watermark = min(self.high_watermark, offset)


class Sim:
    def __init__(self, seed: int, steps: int = 400) -> None:
        self.seed = seed
        self.rng = random.Random(seed)
        self.steps = steps
        self.now = 0.0
        self.replicas = [Replica(i) for i in range(REPLICAS)]
        self.isr = set(range(REPLICAS))
        self.leader: int | None = 0
        self.leader_epoch = 0
        self.replicas[0].epochs.assign(0, 0)
        self.state = LeaderState(0, list(range(REPLICAS)), self.isr, 0, 0, self.now, LAG_MAX_MS)
        self.pending: list[tuple[int, int, tuple[int, int]]] = []  # (epoch, offset, entry)
        self.acked: dict[int, tuple[int, int]] = {}
        self.next_value = 0
        self.trace: list[str] = []

    def fail(self, what: str) -> None:
        tail = "\n  ".join(self.trace[-25:])
        raise SimFailure(f"seed {self.seed}: {what}\n  last events:\n  {tail}")

    # ---------------------------------------------------------------- events

    def produce(self) -> None:
        if self.leader is None:
            return
        if len(self.isr) < MIN_INSYNC:
            self.trace.append(f"produce refused: NOT_ENOUGH_REPLICAS (isr {sorted(self.isr)})")
            return
        leader = self.replicas[self.leader]
        entry = (self.leader_epoch, self.next_value)
        self.next_value += 1
        leader.log.append(entry)
        self.pending.append((self.leader_epoch, leader.end - 1, entry))
        self.trace.append(f"leader {self.leader} appends {entry} at {leader.end - 1}")

    def fetch(self, f: Replica) -> None:
        if self.leader is None or f.node == self.leader or not f.alive:
            return
        leader = self.replicas[self.leader]
        if f.must_truncate:
            cut = truncation_point(
                f.epochs,
                f.end,
                f.high_watermark,
                lambda e: leader.epochs.end_offset_for(e, leader.end),
            )
            if cut < f.end:
                self.trace.append(f"replica {f.node} truncates {f.end} -> {cut}")
            f.truncate(cut)
            f.must_truncate = False
        offset = f.end
        if offset > leader.end:
            self.fail(f"replica {f.node} fetches at {offset} past leader end {leader.end}")
        self.state.on_fetch(f.node, offset, leader.end, self.now)
        hw = self.state.advance_high_watermark(leader.end)
        leader.high_watermark = hw
        for o in range(offset, min(leader.end, offset + self.rng.randint(1, 4))):
            epoch, _ = entry = leader.log[o]
            if epoch > f.epochs.latest_epoch:
                f.epochs.assign(epoch, o)
            f.log.append(entry)
        f.high_watermark = min(hw, f.end)
        self._acknowledge(hw)

    def _acknowledge(self, hw: int) -> None:
        still = []
        for epoch, offset, entry in self.pending:
            if epoch == self.leader_epoch and offset < hw:
                self.acked[offset] = entry
                self.trace.append(f"acked {entry} at {offset}")
            elif epoch == self.leader_epoch:
                still.append((epoch, offset, entry))
        self.pending = still

    def maintain_isr(self) -> None:
        if self.leader is None:
            return
        leader = self.replicas[self.leader]
        self.state.advance_high_watermark(leader.end)
        removed = self.state.to_remove(self.now)
        added = self.state.to_add()
        if removed or added:
            self.isr = (self.isr - removed) | added
            self.state.isr = set(self.isr)
            self.trace.append(f"isr -{sorted(removed)} +{sorted(added)} = {sorted(self.isr)}")
            hw = self.state.advance_high_watermark(leader.end)
            self._acknowledge(hw)

    def crash(self, r: Replica) -> None:
        r.alive = False
        self.trace.append(f"replica {r.node} crashes")
        # The controller fences it: it leaves the ISR unless it is the last member.
        if r.node in self.isr and len(self.isr) > 1:
            self.isr.discard(r.node)
        if r.node == self.leader:
            self.elect()
        else:
            self.state.isr = set(self.isr)

    def restart(self, r: Replica) -> None:
        r.alive = True
        r.must_truncate = True  # it comes back as a follower of whoever leads now
        self.trace.append(f"replica {r.node} restarts")
        if self.leader is None and r.node in self.isr:
            self.elect()

    def elect(self) -> None:
        candidates = [n for n in sorted(self.isr) if self.replicas[n].alive]
        self.pending = []  # the old leader's unacknowledged produces fail; clients retry
        if not candidates:
            self.leader = None
            self.trace.append(f"partition offline (isr {sorted(self.isr)})")
            return
        new = self.rng.choice(candidates)
        self.leader = new
        self.leader_epoch += 1
        leader = self.replicas[new]
        leader.must_truncate = False
        leader.epochs.assign(self.leader_epoch, leader.end)
        for offset, entry in self.acked.items():
            if offset >= leader.end or leader.log[offset] != entry:
                self.fail(
                    f"new leader {new} (epoch {self.leader_epoch}) lacks acked {entry} at {offset}"
                )
        for r in self.replicas:
            if r.node != new:
                r.must_truncate = True
        self.state = LeaderState(
            new,
            list(range(REPLICAS)),
            self.isr,
            leader.end,
            leader.high_watermark,
            self.now,
            LAG_MAX_MS,
        )
        self.trace.append(f"replica {new} leads epoch {self.leader_epoch} at end {leader.end}")

    # ---------------------------------------------------------------- run

    def run(self) -> None:
        for _ in range(self.steps):
            self.now += self.rng.randint(1, 60)
            roll = self.rng.random()
            if roll < 0.35:
                self.produce()
            elif roll < 0.75:
                self.fetch(self.rng.choice(self.replicas))
            elif roll < 0.85:
                self.maintain_isr()
            elif roll < 0.92:
                alive = [r for r in self.replicas if r.alive]
                if len(alive) > 1 or (alive and self.rng.random() < 0.2):
                    self.crash(self.rng.choice(alive))
            else:
                dead = [r for r in self.replicas if not r.alive]
                if dead:
                    self.restart(self.rng.choice(dead))
        self.settle()

    def settle(self) -> None:
        """Everyone back, a leader, fetches until caught up: one history, acks kept."""
        for r in self.replicas:
            if not r.alive:
                self.restart(r)
        if self.leader is None:
            self.elect()
        if self.leader is None:
            self.fail("no leader after every replica returned")
        for _ in range(1000):
            for r in self.replicas:
                self.fetch(r)
            leader = self.replicas[self.leader]
            if all(r.end == leader.end and not r.must_truncate for r in self.replicas):
                break
        leader = self.replicas[self.leader]
        for r in self.replicas:
            if r.log != leader.log:
                self.fail(f"replica {r.node} and leader {self.leader} logs differ at the end")
        for offset, entry in self.acked.items():
            if offset >= leader.end or leader.log[offset] != entry:
                self.fail(f"acked {entry} at {offset} lost")
