"""The Raft state machine: pure, deterministic, no I/O, no clock, no asyncio.

Inputs: ``tick()`` (one unit of logical time), ``step(message)``, ``propose(data)``,
``read_index(ctx)``, ``create_snapshot(index, data)``. Outputs come out of ``ready()`` as one
``Ready`` which the driver must handle *in this order* before calling ``advance(ready)``:

1. persist ``snapshot`` (if any), then the log (``rewrite``: replace it by ``base`` +
   ``entries``; otherwise append ``entries``, truncating the stored log at the first one's
   index) and ``hard_state``; make it durable (fsync) when ``must_sync``;
2. send ``messages`` (only now: a vote or an append acknowledgement promises that the vote or
   the entries are on disk, and a crash must not be able to take that back);
3. if ``restore``, reset the state machine from ``snapshot``; apply ``committed`` in order;
4. hand out ``reads`` (read-index results) and call ``advance(ready)``.

No input may be given between ``ready()`` and ``advance()``; the driver queues them. A crash
anywhere in that sequence is safe as long as what storage kept is a prefix of the operations of
step 1 (the storage module guarantees that).

Choices:

* **Pre-vote** (Raft thesis §9.6): a node whose election timer fires first asks whether it
  *would* win, without raising its term; a node cut off from the cluster therefore cannot
  depose a healthy leader when it comes back.
* **Check-quorum**: a leader that has not heard from a quorum during an election timeout steps
  down, and a node that heard from a leader within the (minimum) election timeout ignores vote
  requests. So a partitioned leader stops acting as one after one or two election timeouts.
* **Read-index** for linearizable reads (Raft thesis §6.4), not a leader lease: a lease relies on
  bounded clock drift between machines; read-index only relies on messages. A read is answered
  with the commit index once (a) the leader has committed an entry of its own term and (b) a
  quorum answered an append sent after the read arrived (``seq`` rounds), which proves no other
  leader existed at that moment. A deposed leader never completes (b) and fails its reads when
  it steps down.
* Replication: per follower PROBE (one append at a time while finding the match point, with
  the follower's hint for fast backtracking), REPLICATE (optimistic streaming; every heartbeat
  resends what is not yet acknowledged, which repairs lost messages) and SNAPSHOT (a snapshot
  is in flight; resent after ``snapshot_retry_ticks``).
* Membership is static (see ``controller/raft/__init__.py`` for replacing a voter).
"""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass, field
from enum import IntEnum

from controller.raft.log import LogError, PersistentState, RaftLog
from controller.raft.messages import (
    NO_NODE,
    AppendRequest,
    AppendResponse,
    Entry,
    EntryKind,
    HardState,
    Message,
    NotLeader,
    Snapshot,
    SnapshotRequest,
    VoteRequest,
    VoteResponse,
)


class Role(IntEnum):
    FOLLOWER = 0
    PRE_CANDIDATE = 1
    CANDIDATE = 2
    LEADER = 3


@dataclass(frozen=True, slots=True)
class CoreConfig:
    election_ticks: int = 10  # election timeout: uniformly random in [e, 2e) ticks
    heartbeat_ticks: int = 2
    max_append_entries: int = 512  # per AppendRequest
    max_append_bytes: int = 1 << 20  # per AppendRequest (at least one entry is always sent)
    max_apply_entries: int = 1024  # per Ready, so one Ready stays short after a restart
    snapshot_retry_ticks: int = 0  # 0: election_ticks
    retain_entries: int = 0  # entries kept before a new snapshot for slightly lagging peers

    def __post_init__(self) -> None:
        if self.election_ticks < 2 or not 1 <= self.heartbeat_ticks < self.election_ticks:
            raise ValueError("need election_ticks >= 2 and 1 <= heartbeat_ticks < election_ticks")


@dataclass(frozen=True, slots=True)
class ReadState:
    """A read-index answer: once the state machine has applied ``index``, a read of it is
    linearizable. ``index`` None: this node lost leadership before it could confirm it."""

    ctx: object
    index: int | None


@dataclass(slots=True)
class Ready:
    hard_state: HardState | None
    snapshot: Snapshot | None
    restore: bool
    rewrite: bool
    base_index: int
    base_term: int
    entries: list[Entry]
    must_sync: bool
    messages: list[Message]
    committed: list[Entry]
    reads: list[ReadState] = field(default_factory=list)


class _Mode(IntEnum):
    PROBE = 0
    REPLICATE = 1
    SNAPSHOT = 2


class _Progress:
    """The leader's view of one follower."""

    __slots__ = (
        "acked_seq",
        "active",
        "match",
        "mode",
        "next",
        "paused",
        "snapshot_elapsed",
        "snapshot_index",
        "snapshot_term",
    )

    def __init__(self, next_index: int) -> None:
        self.match = 0
        self.next = next_index
        self.mode = _Mode.PROBE
        self.paused = False
        self.active = False  # heard from in the current check-quorum period
        self.acked_seq = 0
        self.snapshot_index = 0
        self.snapshot_term = 0
        self.snapshot_elapsed = 0


class RaftCore:
    def __init__(
        self,
        node_id: int,
        voters: tuple[int, ...] | list[int],
        state: PersistentState | None = None,
        config: CoreConfig | None = None,
        rng: random.Random | None = None,
    ) -> None:
        voters = tuple(sorted(set(voters)))
        if node_id not in voters:
            raise ValueError(f"node {node_id} is not one of the voters {voters}")
        loaded = state or PersistentState.empty()
        state = loaded.reconcile()
        self.id = node_id
        self.voters = voters
        self.peers = tuple(v for v in voters if v != node_id)
        self.quorum = len(voters) // 2 + 1
        self.cfg = config or CoreConfig()
        self._rng = rng or random.Random()
        self._snapshot_retry = self.cfg.snapshot_retry_ticks or self.cfg.election_ticks

        hs = state.hard_state
        self.term = hs.term
        self.vote = hs.vote
        self.log = RaftLog(state.base_index, state.base_term, state.entries)
        self.snapshot = state.snapshot
        snap_index = self.snapshot.index if self.snapshot else 0
        self.commit = max(snap_index, min(hs.commit, self.log.last_index))
        self.applied = snap_index  # the driver restores its state machine from the snapshot
        self._persisted = hs

        self.role = Role.FOLLOWER
        self.leader = NO_NODE
        self.election_elapsed = 0
        self._timeout = 0
        self._heartbeat_elapsed = 0
        self._votes: set[int] = set()
        self._progress: dict[int, _Progress] = {}
        self._outbox: list[Message] = []
        self._seq = 0
        self._reads_waiting: list[object] = []  # until an entry of this term commits
        self._reads: deque[tuple[object, int, int]] = deque()  # (ctx, index, seq)
        self._reads_done: list[ReadState] = []
        self._snapshot_out: Snapshot | None = None
        self._restore = False
        # Storage still holds the log that reconcile() set aside (a crash came between saving
        # a leader's snapshot and rewriting the log): replace it before appending anything.
        self._rewrite = state is not loaded
        self._send_new = False
        self._send_heartbeat = False
        self._in_ready = False
        self._reset_timer()
        if len(voters) == 1:
            self._campaign(pre=False)  # nobody to wait for

    # --- inspection ---------------------------------------------------------------------------

    @property
    def is_leader(self) -> bool:
        return self.role == Role.LEADER

    def follower_matches(self) -> dict[int, int]:
        """The leader's view of each follower's log: the last index known to match its own
        (0 until the follower answered). Empty unless leader."""
        if self.role != Role.LEADER:
            return {}
        return {peer: pr.match for peer, pr in self._progress.items()}

    def hard_state(self) -> HardState:
        return HardState(self.term, self.vote, self.commit)

    # --- inputs -------------------------------------------------------------------------------

    def tick(self) -> None:
        self._no_input_in_ready()
        self.election_elapsed += 1
        if self.role != Role.LEADER:
            if self.election_elapsed >= self._timeout:
                self._campaign(pre=True)
            return
        for pr in self._progress.values():
            if pr.mode == _Mode.SNAPSHOT:
                pr.snapshot_elapsed += 1
        if self.election_elapsed >= self.cfg.election_ticks:
            self.election_elapsed = 0
            active = 1 + sum(1 for pr in self._progress.values() if pr.active)
            for pr in self._progress.values():
                pr.active = False
            if active < self.quorum:
                self._become_follower(self.term, NO_NODE)  # check-quorum
                return
        self._heartbeat_elapsed += 1
        if self._heartbeat_elapsed >= self.cfg.heartbeat_ticks:
            self._heartbeat_elapsed = 0
            self._send_heartbeat = True

    def propose(self, data: bytes) -> tuple[int, int]:
        """Append ``data`` to the leader's log; returns its (index, term). The entry is
        committed once an entry with this index *and term* is applied; if one with another
        term is applied there instead, it was dropped (see ``ProposalTracker``)."""
        self._no_input_in_ready()
        if self.role != Role.LEADER:
            raise NotLeader(self.leader, self.term)
        index = self.log.last_index + 1
        self.log.append([Entry(index, self.term, data)], self.commit)
        self._send_new = True
        return index, self.term

    def read_index(self, ctx: object) -> None:
        """Ask for a linearizable read point; answered later by a ``ReadState`` in a Ready."""
        self._no_input_in_ready()
        if self.role != Role.LEADER:
            raise NotLeader(self.leader, self.term)
        if self.log.term(self.commit) != self.term:
            self._reads_waiting.append(ctx)
        else:
            self._start_read(ctx)

    def create_snapshot(self, index: int, data: bytes) -> None:
        """The state machine's ``data`` after applying everything up to ``index`` (<= applied).
        The log before it is compacted (keeping ``retain_entries``) once it is on disk."""
        self._no_input_in_ready()
        if index > self.applied:
            raise ValueError(f"snapshot at {index} past the applied index {self.applied}")
        if self.snapshot is not None and index <= self.snapshot.index:
            return
        term = self.log.term(index)
        if term is None:
            raise LogError(f"no term for snapshot index {index}")
        self.snapshot = Snapshot(index, term, self.voters, data)
        self._snapshot_out = self.snapshot
        compact_to = index - self.cfg.retain_entries
        if compact_to > self.log.base_index:
            self.log.compact(compact_to)
            self._rewrite = True

    def step(self, m: Message) -> None:
        self._no_input_in_ready()
        if m.dst != self.id or m.src not in self.peers:
            return
        if m.term > self.term:
            if isinstance(m, VoteRequest):
                if self._in_lease():
                    return  # a healthy leader exists: do not let this node disrupt it
                if not m.pre:
                    self._become_follower(m.term, NO_NODE)
            elif isinstance(m, VoteResponse) and m.pre and m.granted:
                pass  # a granted pre-vote carries the term we would campaign in
            else:
                leader = m.src if isinstance(m, AppendRequest | SnapshotRequest) else NO_NODE
                self._become_follower(m.term, leader)
        elif m.term < self.term:
            if isinstance(m, AppendRequest | SnapshotRequest):
                # A deposed leader that missed the new term: our answer makes it step down.
                self._send(AppendResponse(self.term, self.id, m.src, False, 0, 0, 0, 0))
            elif isinstance(m, VoteRequest) and m.pre:
                self._send(VoteResponse(self.term, self.id, m.src, False, True))
            return
        match m:
            case AppendRequest():
                self._on_append(m)
            case AppendResponse():
                self._on_append_response(m)
            case VoteRequest():
                self._on_vote(m)
            case VoteResponse():
                self._on_vote_response(m)
            case SnapshotRequest():
                self._on_snapshot(m)

    # --- outputs ------------------------------------------------------------------------------

    def has_ready(self) -> bool:
        # Called after every input by the driver (and the simulator): kept cheap.
        if (
            self._outbox
            or self._send_new
            or self._send_heartbeat
            or self._reads_done
            or self._snapshot_out is not None
            or self._rewrite
        ):
            return True
        log = self.log
        last = log.base_index + len(log.entries)
        if log.unstable_from <= last or self.applied < min(self.commit, last):
            return True
        p = self._persisted
        return self.term != p.term or self.vote != p.vote or self.commit != p.commit

    def ready(self) -> Ready:
        self._no_input_in_ready()
        if self.role == Role.LEADER and (self._send_heartbeat or self._send_new):
            self._broadcast(heartbeat=self._send_heartbeat)
        self._send_new = self._send_heartbeat = False
        hs = self.hard_state()
        hs_out = hs if hs != self._persisted else None
        snap = self._snapshot_out
        entries = list(self.log.entries) if self._rewrite else self.log.unstable()
        must_sync = bool(
            entries
            or snap is not None
            or self._rewrite
            or (hs.term, hs.vote) != (self._persisted.term, self._persisted.vote)
        )
        lo = (snap.index if self._restore and snap else self.applied) + 1
        hi = min(self.commit, self.log.last_index, lo + self.cfg.max_apply_entries - 1)
        rd = Ready(
            hard_state=hs_out,
            snapshot=snap,
            restore=self._restore,
            rewrite=self._rewrite,
            base_index=self.log.base_index,
            base_term=self.log.base_term,
            entries=entries,
            must_sync=must_sync,
            messages=self._outbox,
            committed=self.log.slice(lo, hi) if hi >= lo else [],
            reads=self._reads_done,
        )
        self._outbox = []
        self._reads_done = []
        self._snapshot_out = None
        self._restore = self._rewrite = False
        self._in_ready = True
        return rd

    def advance(self, rd: Ready) -> None:
        if not self._in_ready:
            raise RuntimeError("advance() without ready()")
        self._in_ready = False
        if rd.hard_state is not None:
            self._persisted = rd.hard_state
        if rd.entries or rd.rewrite:
            self.log.mark_stable()
        if rd.restore and rd.snapshot is not None:
            self.applied = max(self.applied, rd.snapshot.index)
        if rd.committed:
            self.applied = rd.committed[-1].index
        if self.role == Role.LEADER:
            self._maybe_commit()  # our own entries count only once they are durable

    # --- elections ----------------------------------------------------------------------------

    def _in_lease(self) -> bool:
        if self.role == Role.LEADER:
            return True
        return self.leader != NO_NODE and self.election_elapsed < self.cfg.election_ticks

    def _reset_timer(self) -> None:
        self.election_elapsed = 0
        e = self.cfg.election_ticks
        self._timeout = self._rng.randrange(e, 2 * e)

    def _campaign(self, pre: bool) -> None:
        self._reset_timer()
        self.leader = NO_NODE
        self._votes = {self.id}
        if pre:
            self.role = Role.PRE_CANDIDATE
            term = self.term + 1
        else:
            self.role = Role.CANDIDATE
            self.term += 1
            self.vote = self.id
            term = self.term
        if len(self._votes) >= self.quorum:
            if pre:
                self._campaign(pre=False)
            else:
                self._become_leader()
            return
        for peer in self.peers:
            self._send(
                VoteRequest(term, self.id, peer, self.log.last_index, self.log.last_term, pre)
            )

    def _on_vote(self, m: VoteRequest) -> None:
        up_to_date = self.log.up_to_date(m.last_index, m.last_term)
        if m.pre:
            # Only for a future term (a pre-vote never changes anything here); a term of ours
            # that is as high means we may already have voted in it.
            granted = m.term > self.term and up_to_date
            self._send(
                VoteResponse(m.term if granted else self.term, self.id, m.src, granted, True)
            )
            return
        can_vote = self.vote == m.src or (self.vote == NO_NODE and self.leader == NO_NODE)
        granted = can_vote and up_to_date
        if granted:
            self.vote = m.src
            self._reset_timer()
        # Sent after the Ready that persists the vote: the driver persists before sending.
        self._send(VoteResponse(self.term, self.id, m.src, granted, False))

    def _on_vote_response(self, m: VoteResponse) -> None:
        if not m.granted:
            return
        if m.pre:
            if self.role == Role.PRE_CANDIDATE and m.term == self.term + 1:
                self._votes.add(m.src)
                if len(self._votes) >= self.quorum:
                    self._campaign(pre=False)
        elif self.role == Role.CANDIDATE:
            self._votes.add(m.src)
            if len(self._votes) >= self.quorum:
                self._become_leader()

    def _become_follower(self, term: int, leader: int) -> None:
        if term > self.term:
            self.term = term
            self.vote = NO_NODE
        if self.role == Role.LEADER:
            for ctx in self._reads_waiting:
                self._reads_done.append(ReadState(ctx, None))
            for ctx, _, _ in self._reads:
                self._reads_done.append(ReadState(ctx, None))
            self._reads_waiting = []
            self._reads.clear()
            self._progress = {}
            self._send_new = self._send_heartbeat = False
        self.role = Role.FOLLOWER
        self.leader = leader
        self._votes = set()
        self._reset_timer()

    def _become_leader(self) -> None:
        self.role = Role.LEADER
        self.leader = self.id
        self._votes = set()
        self.election_elapsed = 0
        self._heartbeat_elapsed = 0
        self._seq = 0
        nxt = self.log.last_index + 1
        self._progress = {peer: _Progress(nxt) for peer in self.peers}
        # Entries of earlier terms commit only through one of ours (Raft §5.4.2).
        self.log.append([Entry(nxt, self.term, b"", EntryKind.NOOP)], self.commit)
        self._send_new = True

    # --- replication: leader side -------------------------------------------------------------

    def _self_match(self) -> int:
        return self.log.unstable_from - 1  # the leader's entries count once durable

    def _maybe_commit(self) -> None:
        matches = sorted([pr.match for pr in self._progress.values()] + [self._self_match()])
        n = matches[len(matches) - self.quorum]
        if n > self.commit and self.log.term(n) == self.term:
            self.commit = n
            if self._reads_waiting:
                waiting, self._reads_waiting = self._reads_waiting, []
                for ctx in waiting:
                    self._start_read(ctx)

    def _start_read(self, ctx: object) -> None:
        if self.quorum == 1:
            self._reads_done.append(ReadState(ctx, self.commit))
            return
        self._seq += 1
        self._reads.append((ctx, self.commit, self._seq))
        self._send_heartbeat = True

    def _release_reads(self) -> None:
        acked = sorted([pr.acked_seq for pr in self._progress.values()], reverse=True)
        confirmed = acked[self.quorum - 2]  # the quorum-th largest, counting ourselves first
        while self._reads and self._reads[0][2] <= confirmed:
            ctx, index, _ = self._reads.popleft()
            self._reads_done.append(ReadState(ctx, index))

    def _broadcast(self, heartbeat: bool) -> None:
        last = self.log.last_index
        for peer, pr in self._progress.items():
            if pr.mode == _Mode.SNAPSHOT:
                if not heartbeat:
                    continue
                if pr.snapshot_elapsed < self._snapshot_retry:
                    # Keeps the follower's timer quiet and confirms reads; if the snapshot
                    # already arrived (its answer lost), this succeeds and ends SNAPSHOT mode.
                    self._send(
                        AppendRequest(
                            self.term,
                            self.id,
                            peer,
                            pr.snapshot_index,
                            pr.snapshot_term,
                            self.commit,
                            self._seq,
                        )
                    )
                    continue
                pr.mode = _Mode.PROBE
                pr.next = pr.match + 1
            if heartbeat:
                if pr.mode == _Mode.REPLICATE:
                    pr.next = pr.match + 1  # resend what is unacknowledged (maybe lost)
                pr.paused = False
                self._send_append(peer, pr, allow_empty=True)
            elif pr.next <= last and not pr.paused:
                self._send_append(peer, pr, allow_empty=False)

    def _send_append(self, peer: int, pr: _Progress, allow_empty: bool) -> None:
        prev = pr.next - 1
        prev_term = self.log.term(prev)
        if prev_term is None:  # compacted away: only the snapshot can bring it up to date
            snap = self.snapshot
            if snap is None:
                raise LogError(f"no snapshot to send for {prev} below base {self.log.base_index}")
            pr.mode = _Mode.SNAPSHOT
            pr.snapshot_index, pr.snapshot_term = snap.index, snap.term
            pr.snapshot_elapsed = 0
            self._send(SnapshotRequest(self.term, self.id, peer, self._seq, snap))
            return
        entries = self._entries_from(pr.next)
        if not entries and not allow_empty:
            return
        self._send(
            AppendRequest(
                self.term, self.id, peer, prev, prev_term, self.commit, self._seq, entries
            )
        )
        if pr.mode == _Mode.REPLICATE:
            if entries:
                pr.next = entries[-1].index + 1
        else:
            pr.paused = True

    def _entries_from(self, start: int) -> tuple[Entry, ...]:
        hi = min(self.log.last_index, start + self.cfg.max_append_entries - 1)
        if hi < start:
            return ()
        entries = self.log.slice(start, hi)
        budget = self.cfg.max_append_bytes
        for n, e in enumerate(entries):
            budget -= len(e.data)
            if budget < 0 and n > 0:
                return tuple(entries[:n])
        return tuple(entries)

    def _on_append_response(self, m: AppendResponse) -> None:
        if self.role != Role.LEADER:
            return
        pr = self._progress[m.src]
        pr.active = True
        if m.seq > pr.acked_seq:
            pr.acked_seq = m.seq
            if self._reads:
                self._release_reads()
        if m.success:
            if m.index > pr.match:
                pr.match = m.index
                self._maybe_commit()
            pr.next = max(pr.next, m.index + 1)
            if pr.mode == _Mode.SNAPSHOT and pr.match < pr.snapshot_index:
                return
            if pr.mode != _Mode.REPLICATE:
                pr.mode = _Mode.REPLICATE
                pr.next = pr.match + 1
            pr.paused = False
            if pr.next <= self.log.last_index:
                self._send_append(m.src, pr, allow_empty=False)
            return
        if m.index <= pr.match or pr.mode == _Mode.SNAPSHOT:
            return  # stale: that point is known to match, or a snapshot is on its way
        if pr.mode == _Mode.PROBE and m.index != pr.next - 1:
            return  # an answer to an older probe
        # Fast backtracking: skip our entries that cannot match the follower's hint.
        index = min(m.hint_index, self.log.last_index)
        while index > self.log.base_index:
            t = self.log.term(index)
            assert t is not None
            if t <= m.hint_term:
                break
            index -= 1
        pr.next = max(pr.match + 1, min(index + 1, m.index))
        pr.mode = _Mode.PROBE
        pr.paused = False
        self._send_append(m.src, pr, allow_empty=True)

    # --- replication: follower side -----------------------------------------------------------

    def _on_append(self, m: AppendRequest) -> None:
        if self.role == Role.LEADER:
            raise LogError(f"two leaders in term {self.term}: {self.id} and {m.src}")
        if self.role != Role.FOLLOWER:
            self._become_follower(m.term, m.src)
        self.leader = m.src
        self.election_elapsed = 0
        last_new = m.prev_index + len(m.entries)
        # Below our commit index the leader's log equals ours (leader completeness), whether
        # or not we can still see the term there.
        if m.prev_index >= self.commit and self.log.term(m.prev_index) != m.prev_term:
            hint_index, hint_term = self.log.conflict_hint(m.prev_index, m.prev_term)
            self._send(
                AppendResponse(
                    self.term, self.id, m.src, False, m.prev_index, hint_index, hint_term, m.seq
                )
            )
            return
        old_commit = self.commit
        self.log.append(m.entries, self.commit)
        self.commit = max(self.commit, min(m.commit, last_new))
        # The answer leaves only after the Ready holding these entries is durable.
        index = max(last_new, old_commit)
        self._send(AppendResponse(self.term, self.id, m.src, True, index, 0, 0, m.seq))

    def _on_snapshot(self, m: SnapshotRequest) -> None:
        if self.role == Role.LEADER:
            raise LogError(f"two leaders in term {self.term}: {self.id} and {m.src}")
        if self.role != Role.FOLLOWER:
            self._become_follower(m.term, m.src)
        self.leader = m.src
        self.election_elapsed = 0
        snap = m.snapshot
        if snap.index <= self.commit:
            index = self.commit
        elif self.log.term(snap.index) == snap.term:
            self.commit = index = snap.index  # we hold those entries: apply them as usual
        else:
            self.log.reset(snap.index, snap.term)
            self.snapshot = self._snapshot_out = snap
            self._restore = self._rewrite = True
            self.commit = index = snap.index
        self._send(AppendResponse(self.term, self.id, m.src, True, index, 0, 0, m.seq))

    # --- helpers ------------------------------------------------------------------------------

    def _send(self, m: Message) -> None:
        self._outbox.append(m)

    def _no_input_in_ready(self) -> None:
        if self._in_ready:
            raise RuntimeError("input between ready() and advance()")
