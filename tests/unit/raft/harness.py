"""A hand-driven cluster of cores for scripted scenarios: the test decides which messages
arrive, who campaigns and who crashes (the random simulator is in sim.py)."""

from __future__ import annotations

import random

from controller.raft.core import CoreConfig, RaftCore, Ready
from controller.raft.messages import Entry, Message
from tests.unit.raft.sim import SimDisk


class ScriptedCore(RaftCore):
    """Never campaigns on its own: elections happen when the script calls ``hup``."""

    def _reset_timer(self) -> None:
        self.election_elapsed = 0
        self._timeout = 1 << 60

    def hup(self) -> None:
        self.election_elapsed = self._timeout


class Harness:
    def __init__(
        self,
        n: int = 3,
        config: CoreConfig | None = None,
        core_cls: type[RaftCore] = ScriptedCore,
    ) -> None:
        self.cfg = config or CoreConfig(election_ticks=10, heartbeat_ticks=2)
        self.core_cls = core_cls
        self.voters = tuple(range(1, n + 1))
        self.disks = {i: SimDisk() for i in self.voters}
        self.cores: dict[int, RaftCore | None] = {}
        self.inflight: list[Message] = []
        self.applied: dict[int, list[Entry]] = {i: [] for i in self.voters}  # across restarts
        self.readies: dict[int, list[Ready]] = {i: [] for i in self.voters}
        for i in self.voters:
            self.start(i)

    def core(self, i: int) -> RaftCore:
        core = self.cores[i]
        assert core is not None, f"node {i} is down"
        return core

    def start(self, i: int) -> None:
        self.cores[i] = self.core_cls(
            i, self.voters, self.disks[i].load(), self.cfg, random.Random(i)
        )
        self.drive(i)

    def crash(self, i: int) -> None:
        self.cores[i] = None
        self.inflight = [m for m in self.inflight if m.src != i and m.dst != i]

    def drive(self, i: int) -> None:
        core = self.cores[i]
        while core is not None and core.has_ready():
            rd = core.ready()
            self.readies[i].append(rd)
            self.disks[i].apply(self.disks[i].operations(rd))
            self.inflight.extend(rd.messages)
            self.applied[i].extend(rd.committed)
            core.advance(rd)

    def tick(self, i: int, n: int = 1) -> None:
        for _ in range(n):
            self.core(i).tick()
            self.drive(i)

    def expire_lease(self, *nodes: int) -> None:
        """Make nodes forget they heard from a leader recently (as if time passed)."""
        for i in nodes:
            core = self.core(i)
            core.election_elapsed = max(core.election_elapsed, core.cfg.election_ticks)

    def campaign(self, i: int) -> None:
        core = self.core(i)
        assert isinstance(core, ScriptedCore)
        core.hup()
        self.tick(i)

    def deliver(
        self,
        *,
        src: int | None = None,
        dst: int | None = None,
        rounds: int | None = None,
        only: tuple[type, ...] = (),
    ) -> int:
        """Deliver in-flight messages matching src/dst, and what they trigger if it matches
        too, for ``rounds`` rounds or until none is left; messages to crashed nodes are lost."""
        delivered = 0
        for _ in range(rounds or 100):
            batch = [
                m
                for m in self.inflight
                if (src is None or m.src == src)
                and (dst is None or m.dst == dst)
                and (not only or isinstance(m, only))
            ]
            if not batch:
                return delivered
            self.inflight = [m for m in self.inflight if m not in batch]
            for m in batch:
                if self.cores.get(m.dst) is not None:
                    self.core(m.dst).step(m)
                    self.drive(m.dst)
                    delivered += 1
        if rounds is None:
            raise AssertionError("messages keep flowing")
        return delivered

    def drop(self, *, src: int | None = None, dst: int | None = None) -> None:
        self.inflight = [
            m
            for m in self.inflight
            if not ((src is None or m.src == src) and (dst is None or m.dst == dst))
        ]

    def check_state_machine_safety(self) -> None:
        seen: dict[int, tuple[int, bytes]] = {}
        for node, entries in self.applied.items():
            for e in entries:
                if seen.setdefault(e.index, (e.term, e.data)) != (e.term, e.data):
                    raise AssertionError(
                        f"node {node} applied term {e.term} at {e.index}, "
                        f"another node term {seen[e.index][0]}"
                    )
