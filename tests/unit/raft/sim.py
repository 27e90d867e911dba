"""Deterministic simulation of a Raft cluster (in the spirit of Kafka's RaftEventSimulationTest).

One ``random.Random(seed)`` drives everything: the network (loss, duplication, delay and so
reordering, one-way and two-way partitions), crashes (at rest, in the middle of persisting a
Ready, or after persisting but before all its messages left), restarts from what the simulated
disk kept, clients proposing entries and asking for linearizable reads, and snapshots. After
every step the invariants below are checked; a violation raises ``SimFailure`` naming the seed
and the last events, and ``python -m tests.unit.raft.sim SEED [--nodes N]`` replays it.

Invariants:

* election safety: at most one leader per term, ever;
* log matching: every (index, term) ever stored anywhere identifies one payload and one term
  at index - 1 (by induction, one whole prefix);
* leader completeness: a new leader's log holds every entry known to be committed;
* state machine safety: no two nodes apply different entries at one index, each node applies
  in order without gaps, a restored snapshot agrees with what was applied elsewhere;
* acknowledged proposals are never lost: every node ends with them in its state machine;
* linearizable reads: a read-index answer is at least every index applied anywhere before the
  read was asked for;
* liveness: once the network heals and every node is up, a leader is elected and a new
  proposal is applied on every node within ``settle_ticks``.
"""

from __future__ import annotations

import heapq
import random
import sys
import traceback
from collections import deque
from dataclasses import dataclass, field

from controller.raft.core import CoreConfig, RaftCore, Ready, Role
from controller.raft.log import PersistentState
from controller.raft.messages import (
    AppendResponse,
    Entry,
    EntryKind,
    HardState,
    Message,
    NotLeader,
    Snapshot,
    VoteResponse,
)
from controller.raft.proposals import Outcome, ProposalTracker


class SimFailure(AssertionError):
    pass


@dataclass(frozen=True)
class SimParams:
    nodes: int = 3
    chaos_ticks: int = 250
    settle_ticks: int = 150
    election_ticks: int = 10
    heartbeat_ticks: int = 2
    max_delay: int = 3  # ticks; random delays reorder messages
    spike: float = 0.0  # share of messages held back up to 3 election timeouts
    drop: float = 0.05
    duplicate: float = 0.03
    crash: float = 0.004  # per node per tick
    crash_leader: float = 0.01  # per tick: crash whoever leads (the most disruptive crash)
    crash_proposer: float = 0.0  # per proposal: the leader crashes while persisting/sending it
    crash_interesting: float = 0.0  # crash right after granting a vote / acking / leading
    pause: float = 0.005  # per node per tick: stop for a while (GC pause, stalled VM)
    skew: float = 0.1  # per node per tick: lose one tick (clocks that run at different rates)
    restart: float = 0.08  # per crashed node per tick
    partition: float = 0.01  # per tick
    heal: float = 0.04  # per tick
    propose: float = 0.35  # per tick
    read: float = 0.08  # per tick
    snapshot: float = 0.01  # per node per tick
    retain: int = 2
    max_append_entries: int = 8
    full_check_every: int = 25  # ticks between complete log scans

    @classmethod
    def randomized(cls, rng: random.Random, nodes: int) -> SimParams:
        """Vary the weather per seed so that some seeds are calm and some are hostile."""
        roll = rng.random()
        if roll < 0.25:
            return cls.churn(rng, nodes)
        if roll < 0.4:
            return cls.stale_leaders(rng, nodes)
        return cls(
            nodes=nodes,
            max_delay=rng.choice((0, 1, 2, 3, 5)),
            spike=rng.choice((0.0, 0.0, 0.01, 0.05)),
            restart=rng.choice((0.05, 0.3, 1.0)),
            drop=rng.choice((0.0, 0.02, 0.1, 0.25)),
            duplicate=rng.choice((0.0, 0.05, 0.2)),
            crash=rng.choice((0.0, 0.003, 0.01)),
            crash_leader=rng.choice((0.0, 0.01, 0.03)),
            crash_proposer=rng.choice((0.0, 0.0, 0.05)),
            crash_interesting=rng.choice((0.0, 0.0, 0.02, 0.1)),
            pause=rng.choice((0.0, 0.005, 0.02)),
            skew=rng.choice((0.0, 0.1, 0.3)),
            partition=rng.choice((0.0, 0.01, 0.03)),
            snapshot=rng.choice((0.0, 0.01, 0.05)),
            retain=rng.choice((0, 2, 10)),
            max_append_entries=rng.choice((1, 3, 64)),
        )

    @classmethod
    def churn(cls, rng: random.Random, nodes: int) -> SimParams:
        """Leadership changes with partly replicated logs: where election and commit bugs
        live (crashes right after voting, acknowledging, proposing)."""
        return cls(
            nodes=nodes,
            max_delay=rng.choice((1, 2)),
            drop=0.1,
            duplicate=0.05,
            restart=rng.choice((0.3, 1.0)),
            crash=0.01,
            crash_leader=0.05,
            crash_proposer=0.3,
            crash_interesting=0.05,
            pause=0.0,
            skew=0.1,
            partition=0.02,
            snapshot=rng.choice((0.0, 0.02)),
            max_append_entries=1,
        )

    @classmethod
    def stale_leaders(cls, rng: random.Random, nodes: int) -> SimParams:
        """Leaders cut off or paused while clients keep reading from them."""
        return cls(
            nodes=nodes,
            read=0.5,
            pause=0.02,
            partition=0.03,
            heal=0.1,
            crash=0.0,
            crash_leader=0.0,
            drop=0.02,
            snapshot=rng.choice((0.0, 0.02)),
        )


class SimDisk:
    """What survives a crash, with the storage module's semantics: a Ready is a sequence of
    operations of which a crash keeps a prefix; a hard-state record written without fsync
    (only ever a new commit hint) may or may not survive."""

    def __init__(self) -> None:
        self.hs = HardState()
        self.unsynced_hs: HardState | None = None
        self.snapshot: Snapshot | None = None
        self.base_index = 0
        self.base_term = 0
        self.entries: list[Entry] = []

    def operations(self, rd: Ready) -> list[tuple[str, object]]:
        ops: list[tuple[str, object]] = []
        if rd.snapshot is not None:
            ops.append(("snapshot", rd.snapshot))
        if rd.rewrite:
            ops.append(("rewrite", rd))
        else:
            if rd.entries:
                ops.append(("entries", rd.entries))
            if rd.hard_state is not None:
                ops.append(("hs" if rd.must_sync else "hs-unsynced", rd.hard_state))
        return ops

    def apply(self, ops: list[tuple[str, object]]) -> None:
        for kind, arg in ops:
            if kind == "snapshot":
                self._flush()
                assert isinstance(arg, Snapshot)
                self.snapshot = arg
            elif kind == "rewrite":
                assert isinstance(arg, Ready)
                self._flush()
                self.base_index, self.base_term = arg.base_index, arg.base_term
                self.entries = list(arg.entries)
                if arg.hard_state is not None:
                    self.hs = arg.hard_state
            elif kind == "entries":
                self._flush()
                assert isinstance(arg, list)
                first = arg[0].index
                del self.entries[first - self.base_index - 1 :]
                self.entries.extend(arg)
            elif kind == "hs":
                assert isinstance(arg, HardState)
                self.unsynced_hs = None
                self.hs = arg
            else:
                assert isinstance(arg, HardState)
                self.unsynced_hs = arg

    def _flush(self) -> None:
        if self.unsynced_hs is not None:
            self.hs, self.unsynced_hs = self.unsynced_hs, None

    def crash(self, rng: random.Random) -> None:
        if self.unsynced_hs is not None and rng.random() < 0.5:
            self._flush()
        self.unsynced_hs = None

    def load(self) -> PersistentState:
        hs = self.unsynced_hs or self.hs
        return PersistentState(
            hs, self.snapshot, self.base_index, self.base_term, list(self.entries)
        )


class SimStateMachine:
    """Maps index -> payload of applied DATA entries; its snapshot is that map, encoded."""

    def __init__(self) -> None:
        self.data: dict[int, bytes] = {}
        self.applied = 0

    def encode(self) -> bytes:
        return b";".join(b"%d=%s" % (i, d) for i, d in sorted(self.data.items()))

    @classmethod
    def decode(cls, index: int, blob: bytes) -> SimStateMachine:
        sm = cls()
        for item in blob.split(b";") if blob else ():
            i, _, d = item.partition(b"=")
            sm.data[int(i)] = d
        sm.applied = index
        return sm


@dataclass
class SimNode:
    id: int
    disk: SimDisk = field(default_factory=SimDisk)
    core: RaftCore | None = None
    sm: SimStateMachine | None = None
    tracker: ProposalTracker[tuple[int, bytes]] = field(default_factory=ProposalTracker)
    crash_point: str | None = None  # crash at the next Ready: "persist" or "send"
    paused_until: int = 0
    leader_term_checked: int = -1
    reads: list[tuple[int, int]] = field(default_factory=list)  # (read id, index) to serve


class Simulation:
    def __init__(self, seed: int, params: SimParams, core_cls: type[RaftCore] = RaftCore):
        self.seed = seed
        self.p = params
        self.rng = random.Random(seed)
        self.core_cls = core_cls
        self.cfg = CoreConfig(
            election_ticks=params.election_ticks,
            heartbeat_ticks=params.heartbeat_ticks,
            max_append_entries=params.max_append_entries,
            retain_entries=params.retain,
        )
        self.voters = tuple(range(1, params.nodes + 1))
        self.nodes = {i: SimNode(i) for i in self.voters}
        self.now = 0
        self.net: list[tuple[int, float, Message]] = []
        self.blocked: set[tuple[int, int]] = set()
        self.drop = params.drop
        self.spike = params.spike
        self.duplicate = params.duplicate
        self.chaos = True
        # invariant bookkeeping
        self.leaders: dict[int, int] = {}  # term -> leader
        self.stored: dict[tuple[int, int], tuple[bytes, int, EntryKind]] = {}
        self.committed: dict[int, tuple[int, bytes]] = {}  # index -> (term, data) applied
        self.max_committed = 0
        # index -> (term of the first leader seen committing it, term of the entry)
        self.commit_info: dict[int, tuple[int, int]] = {}
        self.leader_commit: dict[int, int] = {}  # term -> highest commit its leader had
        self.acked: dict[int, bytes] = {}  # index -> data of acknowledged proposals
        self.next_proposal = 0
        self.client_leader_hint = self.voters[0]
        self.next_read = 0
        self.read_floor: dict[int, int] = {}  # read id -> max applied index when asked
        self.reads_served = 0
        self.trace: deque[tuple[object, ...]] = deque(maxlen=40)
        self.stats = {"elections": 0, "crashes": 0, "snapshots_installed": 0, "acked": 0}
        for node in self.nodes.values():
            self._start(node)

    # --- the run ------------------------------------------------------------------------------

    def run(self) -> Simulation:
        try:
            p = self.p
            for _ in range(p.chaos_ticks):
                self._tick()
                self._chaos_events()
                if self.now % p.full_check_every == 0:
                    self.check_full()
            self._settle()
            self.check_full()
            self._check_final()
        except SimFailure:
            raise
        except Exception as exc:
            # An invariant the core checks itself (LogError) or a crash: same seed report.
            where = "".join(traceback.format_exception(exc)[-6:])
            self.fail(f"{exc!r}\n{where}")
        return self

    def _tick(self) -> None:
        self.now += 1
        skew = self.p.skew if self.chaos else 0.0
        for node in self.nodes.values():
            if node.core is not None and node.paused_until <= self.now:
                if skew and self.rng.random() < skew:
                    continue
                node.core.tick()
                self._drive(node)
        self._deliver()

    def _deliver(self) -> None:
        net = self.net
        while net and net[0][0] <= self.now:
            _, _, m = heapq.heappop(net)
            dst = self.nodes[m.dst]
            if dst.core is None or (m.src, m.dst) in self.blocked:
                continue
            if dst.paused_until > self.now:  # it reads its socket when it wakes up
                heapq.heappush(net, (dst.paused_until, self.rng.random(), m))
                continue
            self.trace.append((self.now, "recv", m))
            dst.core.step(m)
            self._drive(dst)

    def _send(self, m: Message) -> None:
        rng = self.rng
        if rng.random() < self.drop:
            return
        copies = 2 if rng.random() < self.duplicate else 1
        for _ in range(copies):
            at = self.now + rng.randint(0, self.p.max_delay)
            if self.spike and rng.random() < self.spike:
                at += rng.randint(1, 3 * self.p.election_ticks)
            heapq.heappush(self.net, (at, rng.random(), m))

    def _chaos_events(self) -> None:
        rng, p = self.rng, self.p
        for node in self.nodes.values():
            if node.core is None:
                if rng.random() < p.restart:
                    self._start(node)
            elif rng.random() < p.crash:
                self._crash_soon(node)
            elif rng.random() < p.pause:
                node.paused_until = self.now + rng.randint(1, 4 * p.election_ticks)
                self.trace.append((self.now, "pause", node.id, node.paused_until))
            elif node.paused_until <= self.now and rng.random() < p.snapshot:
                self._snapshot(node)
        if rng.random() < p.crash_leader:
            for node in self.nodes.values():
                if node.core is not None and node.core.is_leader:
                    self._crash_soon(node)
        if rng.random() < p.partition:
            self._partition()
        elif self.blocked and rng.random() < p.heal:
            self.blocked.clear()
            self.trace.append((self.now, "heal"))
        if rng.random() < p.propose:
            self._propose()
        if rng.random() < p.read:
            self._read()

    def _partition(self) -> None:
        rng = self.rng
        side = {n: rng.random() < 0.5 for n in self.voters}
        one_way = rng.random() < 0.3
        self.blocked = {
            (a, b)
            for a in self.voters
            for b in self.voters
            if a != b and side[a] != side[b] and not (one_way and side[a])
        }
        self.trace.append((self.now, "partition", sorted(self.blocked)))

    def _settle(self) -> None:
        """Heal everything and demand progress within a bounded number of ticks."""
        self.chaos = False
        self.blocked.clear()
        self.drop = self.duplicate = self.spike = 0.0
        for node in self.nodes.values():
            node.crash_point = None
            node.paused_until = 0
            if node.core is None:
                self._start(node)
        self.trace.append((self.now, "settle"))
        start = self.now
        probe: tuple[int, int, bytes, int] | None = None  # (node, index, data, term)
        while self.now - start < self.p.settle_ticks:
            self._tick()
            if probe is not None:
                index = probe[1]
                if self.acked.get(index) == probe[2] and all(
                    n.sm is not None and n.sm.applied >= index for n in self.nodes.values()
                ):
                    self.stats["settle_ticks"] = self.now - start
                    return
                node = self.nodes[probe[0]]
                if node.core is None or not node.core.is_leader or node.core.term != probe[3]:
                    probe = None  # its leader was deposed: it may never commit, propose again
            if probe is None:
                for node in self.nodes.values():
                    if node.core is not None and node.core.is_leader:
                        data = b"live%d" % self.now
                        index, term = node.core.propose(data)
                        node.tracker.add(index, term, (index, data))
                        self._drive(node)
                        probe = (node.id, index, data, term)
                        break
        leaders = {n.id: (n.core.role.name, n.core.term) for n in self.nodes.values() if n.core}
        self.fail(f"no progress {self.p.settle_ticks} ticks after healing: {leaders}")

    # --- node lifecycle -----------------------------------------------------------------------

    def _start(self, node: SimNode) -> None:
        state = node.disk.load()
        node.core = self.core_cls(
            node.id, self.voters, state, self.cfg, random.Random(self.rng.getrandbits(64))
        )
        snap = node.core.snapshot
        node.sm = SimStateMachine.decode(snap.index, snap.data) if snap else SimStateMachine()
        if snap is not None:
            self._check_snapshot(node, snap)
        node.tracker = ProposalTracker()
        node.reads = []
        node.crash_point = None
        node.paused_until = 0
        self.trace.append((self.now, "start", node.id, node.core.term, node.core.log.last_index))
        self._drive(node)

    def _crash_soon(self, node: SimNode) -> None:
        point = self.rng.choice(("now", "persist", "send"))
        if point == "now":
            self._crash(node)
        else:
            node.crash_point = point

    def _crash(self, node: SimNode) -> None:
        self.trace.append((self.now, "crash", node.id))
        self.stats["crashes"] += 1
        node.core = None
        node.sm = None
        node.disk.crash(self.rng)
        node.crash_point = None

    def _snapshot(self, node: SimNode) -> None:
        core, sm = node.core, node.sm
        assert core is not None and sm is not None
        if core.applied > (core.snapshot.index if core.snapshot else 0):
            core.create_snapshot(core.applied, sm.encode())
            self.trace.append((self.now, "snapshot", node.id, core.applied))
            self._drive(node)

    # --- clients ------------------------------------------------------------------------------

    def _propose(self) -> None:
        rng = self.rng
        nid = self.client_leader_hint if rng.random() < 0.7 else rng.choice(self.voters)
        node = self.nodes[nid]
        if node.core is None or node.paused_until > self.now:
            self.client_leader_hint = rng.choice(self.voters)
            return
        self.next_proposal += 1
        data = b"p%d" % self.next_proposal
        try:
            index, term = node.core.propose(data)
        except NotLeader as exc:
            self.client_leader_hint = exc.leader if exc.leader > 0 else rng.choice(self.voters)
            return
        node.tracker.add(index, term, (index, data))
        self.trace.append((self.now, "propose", nid, index, term))
        if self.rng.random() < self.p.crash_proposer:
            node.crash_point = self.rng.choice(("persist", "send"))
        self._drive(node)

    def _read(self) -> None:
        node = self.nodes[self.client_leader_hint]
        if node.core is None or node.paused_until > self.now:
            return
        self.next_read += 1
        rid = self.next_read
        try:
            node.core.read_index(rid)
        except NotLeader:
            return
        self.read_floor[rid] = self.max_committed
        self._drive(node)

    # --- driving a node: the Ready loop -------------------------------------------------------

    def _drive(self, node: SimNode) -> None:
        core = node.core
        rounds = 0
        while core is not None and core.has_ready():
            rounds += 1
            if rounds > 1000:
                self.fail(f"node {node.id} keeps producing Readys (has_ready never settles)")
            rd = core.ready()
            self._check_ready(node, rd)
            ops = node.disk.operations(rd)
            if node.crash_point == "persist":
                node.disk.apply(ops[: self.rng.randint(0, len(ops))])
                self._crash(node)
                return
            node.disk.apply(ops)
            if node.crash_point == "send":
                for m in rd.messages[: self.rng.randint(0, len(rd.messages))]:
                    self._send(m)
                self._crash(node)
                return
            for m in rd.messages:
                self._send(m)
            self._apply(node, rd)
            if (
                self.chaos
                and self.p.crash_interesting
                and self._interesting(rd, core)
                and self.rng.random() < self.p.crash_interesting
            ):
                # Right after promising something (a vote, an ack) or acting as leader:
                # only what is on disk may survive, and it must be enough.
                self.trace.append((self.now, "crash-after", node.id))
                self._crash(node)
                if self.rng.random() < 0.5:
                    self._start(node)
                return
            core.advance(rd)
            self._check_node(node)

    @staticmethod
    def _interesting(rd: Ready, core: RaftCore) -> bool:
        if core.is_leader and (rd.entries or rd.committed):
            return True
        for m in rd.messages:
            if (isinstance(m, VoteResponse) and m.granted and not m.pre) or (
                isinstance(m, AppendResponse) and m.success
            ):
                return True
        return False

    def _apply(self, node: SimNode, rd: Ready) -> None:
        sm = node.sm
        assert sm is not None
        if rd.restore:
            snap = rd.snapshot
            assert snap is not None
            node.sm = sm = SimStateMachine.decode(snap.index, snap.data)
            self._check_snapshot(node, snap)
            self.stats["snapshots_installed"] += 1
            for token, outcome in node.tracker.restored(snap.index, snap.term):
                self._outcome(node, token, outcome)
        for e in rd.committed:
            if e.index != sm.applied + 1:
                self.fail(f"node {node.id} applies {e.index} after {sm.applied}")
            seen = self.committed.get(e.index)
            if seen is None:
                self.committed[e.index] = (e.term, e.data)
                self.max_committed = max(self.max_committed, e.index)
            elif seen != (e.term, e.data):
                self.fail(f"node {node.id} applies {e} at {e.index} where {seen} was applied")
            if e.kind == EntryKind.DATA:
                sm.data[e.index] = e.data
            sm.applied = e.index
            for token, outcome in node.tracker.applied(e):
                self._outcome(node, token, outcome)
        for rs in rd.reads:
            if rs.index is None:
                continue
            assert isinstance(rs.ctx, int)
            floor = self.read_floor.pop(rs.ctx)
            if rs.index < floor:
                self.fail(
                    f"node {node.id}: read {rs.ctx} got index {rs.index}, but {floor} was "
                    "already committed when it was asked (stale read)"
                )
            node.reads.append((rs.ctx, rs.index))
        if node.reads:
            keep = []
            for rid, index in node.reads:
                if sm.applied >= index:
                    self.reads_served += 1
                else:
                    keep.append((rid, index))
            node.reads = keep

    def _outcome(self, node: SimNode, token: tuple[int, bytes], outcome: Outcome) -> None:
        index, data = token
        if outcome == Outcome.COMMITTED:
            seen = self.committed.get(index)
            if seen is None or seen[1] != data:
                self.fail(f"node {node.id} acknowledges {data!r} at {index}; committed: {seen}")
            self.acked[index] = data
            self.stats["acked"] += 1

    # --- invariants ---------------------------------------------------------------------------

    def _check_ready(self, node: SimNode, rd: Ready) -> None:
        core = node.core
        assert core is not None
        if rd.entries:
            prev = core.log.term(rd.entries[0].index - 1)
            if prev is None:
                prev = -1  # first entry after a compacted prefix: nothing to compare
            for e in rd.entries:
                self._check_stored(node.id, e, prev)
                prev = e.term

    def _check_stored(self, nid: int, e: Entry, prev_term: int) -> None:
        key = (e.index, e.term)
        seen = self.stored.get(key)
        if seen is None:
            self.stored[key] = (e.data, prev_term, e.kind)
            return
        data, seen_prev, kind = seen
        if data != e.data or kind != e.kind:
            self.fail(f"log matching: node {nid} stores {e} but {key} held {data!r} elsewhere")
        if prev_term != -1 and seen_prev != -1 and prev_term != seen_prev:
            self.fail(
                f"log matching: node {nid} has term {prev_term} before {key}, elsewhere {seen_prev}"
            )
        if seen_prev == -1 and prev_term != -1:
            self.stored[key] = (data, prev_term, kind)

    def _check_node(self, node: SimNode) -> None:
        core = node.core
        if core is None or core.role != Role.LEADER:
            return
        term = core.term
        leader = self.leaders.setdefault(term, node.id)
        if leader != node.id:
            self.fail(f"election safety: {leader} and {node.id} both lead term {term}")
        if node.leader_term_checked != term:
            node.leader_term_checked = term
            self.stats["elections"] += 1
            self.trace.append((self.now, "leader", node.id, term))
            self._check_leader_complete(node)
        seen = self.leader_commit.get(term, 0)
        if core.commit > seen:
            self.leader_commit[term] = core.commit
            for index in range(max(seen, core.log.base_index) + 1, core.commit + 1):
                info = self.commit_info.get(index)
                if info is None or term < info[0]:
                    entry_term = core.log.term(index)
                    assert entry_term is not None
                    self.commit_info[index] = (term, entry_term)
                    self._check_later_leaders(index, term, entry_term)

    def _check_later_leaders(self, index: int, commit_term: int, entry_term: int) -> None:
        """An entry committed in ``commit_term`` must be in every leader of a later term."""
        for other in self.nodes.values():
            core = other.core
            if (
                core is not None
                and core.is_leader
                and core.term > commit_term
                and index > core.log.base_index
                and core.log.term(index) != entry_term
            ):
                self.fail(
                    f"leader completeness: leader {other.id} of term {core.term} has term "
                    f"{core.log.term(index)} at {index}, committed in term {commit_term} "
                    f"with term {entry_term}"
                )

    def _check_leader_complete(self, node: SimNode) -> None:
        """Everything committed in an earlier term is in the new leader's log (a leader of an
        older term may still be elected late; it need not hold what later terms committed)."""
        core = node.core
        assert core is not None
        log = core.log
        for index, (commit_term, entry_term) in self.commit_info.items():
            if commit_term < core.term and index > log.base_index and log.term(index) != entry_term:
                self.fail(
                    f"leader completeness: leader {node.id} of term {core.term} has term "
                    f"{log.term(index)} at {index}, committed in term {commit_term} with "
                    f"term {entry_term}"
                )

    def _check_snapshot(self, node: SimNode, snap: Snapshot) -> None:
        seen = self.committed.get(snap.index)
        if seen is not None and seen[0] != snap.term:
            self.fail(f"node {node.id} snapshot at {snap.index} has term {snap.term} != {seen}")
        sm = SimStateMachine.decode(snap.index, snap.data)
        for index, data in sm.data.items():
            seen = self.committed.get(index)
            if seen is not None and seen[1] != data:
                self.fail(f"node {node.id} snapshot holds {data!r} at {index}, not {seen}")

    def check_full(self) -> None:
        """Rescan every live log (catches entries that bypassed a Ready)."""
        for node in self.nodes.values():
            core = node.core
            if core is None:
                continue
            prev = core.log.base_term
            for e in core.log.entries:
                seen = self.stored.get((e.index, e.term))
                if seen is None or seen[0] != e.data or seen[1] not in (-1, prev):
                    self.fail(f"node {node.id} log holds {e} (prev term {prev}); stored {seen}")
                prev = e.term
            if core.commit > core.log.last_index:
                self.fail(f"node {node.id} commit {core.commit} past its log")

    def _check_final(self) -> None:
        for node in self.nodes.values():
            sm = node.sm
            assert sm is not None
            for index, data in self.acked.items():
                if sm.applied >= index and sm.data.get(index) != data:
                    self.fail(f"acknowledged {data!r} at {index} lost on node {node.id}")
        top = max(self.acked, default=0)
        if any(n.sm is not None and n.sm.applied < top for n in self.nodes.values()):
            self.fail(f"a node did not reach the last acknowledged index {top}")

    def fail(self, what: str) -> None:
        events = "\n  ".join(repr(e) for e in self.trace)
        raise SimFailure(
            f"raft simulation seed {self.seed} (nodes={self.p.nodes}) at tick {self.now}: "
            f"{what}\n  reproduce: .venv/bin/python -m tests.unit.raft.sim {self.seed} "
            f"--nodes {self.p.nodes}\n  last events:\n  {events}"
        )


def run_seed(seed: int, nodes: int = 3, core_cls: type[RaftCore] = RaftCore) -> Simulation:
    """Run one seed (its parameters are derived from the seed too)."""
    params = SimParams.randomized(random.Random(f"params-{seed}"), nodes)
    return Simulation(seed, params, core_cls).run()


def main(argv: list[str]) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="replay Raft simulation seeds")
    ap.add_argument("seeds", type=int, nargs="+", help="a seed, or FIRST COUNT with --range")
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--range", action="store_true")
    args = ap.parse_args(argv)
    seeds = range(args.seeds[0], args.seeds[0] + args.seeds[1]) if args.range else args.seeds
    failed = 0
    for seed in seeds:
        try:
            sim = run_seed(seed, args.nodes)
        except SimFailure as exc:
            failed += 1
            print(exc)
            continue
        if not args.range:
            print(f"seed {seed}: ok {sim.stats} reads={sim.reads_served} ticks={sim.now}")
    if args.range:
        print(f"{len(seeds) - failed}/{len(seeds)} seeds ok")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
