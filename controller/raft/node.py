"""The asyncio shell around ``RaftCore``: a real clock, disk storage and the TCP transport.

One task owns the core. Everything else (incoming messages, clock ticks, proposals, read
requests) goes through an inbox that this task drains between Ready cycles, because the core
accepts no input while a Ready is being persisted (the fsync runs in a worker thread and the
event loop keeps serving the sockets meanwhile). Each cycle follows the core's contract:
persist, then send, then apply, then advance.

Failure policy: if storage fails (I/O error, disk full) the node stops; continuing could
acknowledge what is not durable. Callers then see ``NodeStopped``.
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import logging
import random
import ssl
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from controller.raft.core import CoreConfig, RaftCore, Ready, Role
from controller.raft.messages import (
    NO_NODE,
    CommitUnknown,
    Entry,
    Message,
    NotLeader,
    ProposalDropped,
    Snapshot,
)
from controller.raft.proposals import Outcome, ProposalTracker
from controller.raft.storage import DiskStorage
from controller.raft.transport import DEFAULT_MAX_FRAME, TcpTransport

log = logging.getLogger(__name__)


class StateMachine(Protocol):
    """What the application gives the node. All calls come from the node's task, in order."""

    def apply(self, entry: Entry) -> None:
        """A committed entry, in index order, exactly once per start (after ``restore``).
        ``EntryKind.NOOP`` entries are passed too: the first entry of a term is its leader's
        NOOP, and a leader that has applied the NOOP of its own term has applied everything
        committed before it became leader."""

    def snapshot(self) -> bytes:
        """The state after the last applied entry (called synchronously; keep it fast or hand
        back a copy that is serialized cheaply)."""

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the whole state by the snapshot's (at start, or sent by the leader)."""


class NodeStopped(Exception):
    pass


@dataclass(frozen=True)
class NodeConfig:
    node_id: int
    # voter id -> (host, port) it listens on for Raft traffic; our own entry is where we listen
    voters: Mapping[int, tuple[str, int]]
    data_dir: Path
    secret: bytes
    tick_interval: float = 0.05  # seconds
    election_ticks: int = 10  # election timeout 0.5-1.0 s with the default tick
    heartbeat_ticks: int = 2  # 100 ms
    snapshot_every: int = 10_000  # applied entries between automatic snapshots (0: never)
    retain_entries: int = 1_000  # kept before a snapshot for followers slightly behind
    max_frame: int = DEFAULT_MAX_FRAME
    fsync: bool = True

    def __post_init__(self) -> None:
        # 1 and 3 are what the project runs; any odd size works (the simulator runs 5), an
        # even one only adds a voter that must answer without adding a failure tolerated.
        if self.node_id not in self.voters or len(self.voters) % 2 == 0:
            raise ValueError("need an odd number of voters, this node among them")

    def core_config(self) -> CoreConfig:
        return CoreConfig(
            election_ticks=self.election_ticks,
            heartbeat_ticks=self.heartbeat_ticks,
            retain_entries=self.retain_entries,
            max_append_bytes=min(1 << 20, self.max_frame // 2),
        )


class RaftNode:
    def __init__(
        self,
        config: NodeConfig,
        state_machine: StateMachine,
        *,
        on_leader_change: Callable[[int | None, int], None] | None = None,
        ssl_contexts: tuple[ssl.SSLContext | None, ssl.SSLContext | None] = (None, None),
    ) -> None:
        self.config = config
        # (listener, client) TLS contexts of the Raft link; (None, None): plain TCP.
        self._ssl_contexts = ssl_contexts
        self._sm = state_machine
        self._on_leader_change = on_leader_change
        self._storage = DiskStorage(config.data_dir, fsync=config.fsync)
        self._core: RaftCore | None = None
        self._transport: TcpTransport | None = None
        self._inbox: deque[tuple[str, object]] = deque()
        self._wake = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        self._saving: asyncio.Future[None] | None = None
        self._tracker: ProposalTracker[asyncio.Future[int]] = ProposalTracker()
        self._read_waiters: list[tuple[int, int, asyncio.Future[int]]] = []  # (index, n, fut)
        self._waiter_seq = 0
        self._reads: set[asyncio.Future[int]] = set()
        self._stopped: BaseException | None = None
        self._last_snapshot = 0
        self._want_snapshot = False
        self._leader_seen: tuple[int, int] = (NO_NODE, -1)
        self.address: tuple[str, int] | None = None
        self.leader_changes = 0

    # --- lifecycle ----------------------------------------------------------------------------

    async def start(self) -> None:
        cfg = self.config
        voters = tuple(sorted(cfg.voters))
        state = await asyncio.to_thread(self._storage.open, cfg.node_id, voters)
        core = RaftCore(cfg.node_id, voters, state, cfg.core_config(), random.Random())
        if core.snapshot is not None:
            self._sm.restore(core.snapshot)
            self._last_snapshot = core.snapshot.index
        self._core = core
        peers = {pid: addr for pid, addr in cfg.voters.items() if pid != cfg.node_id}
        self._transport = TcpTransport(
            cfg.node_id, peers, secret=cfg.secret, on_message=self._receive,
            max_frame=cfg.max_frame, server_ssl=self._ssl_contexts[0],
            client_ssl=self._ssl_contexts[1],
        )  # fmt: skip
        host, port = cfg.voters[cfg.node_id]
        self.address = await self._transport.start(host, port)
        loop = asyncio.get_running_loop()
        self._tasks = [
            loop.create_task(self._run(), name=f"raft-{cfg.node_id}"),
            loop.create_task(self._ticker(), name=f"raft-tick-{cfg.node_id}"),
        ]

    async def stop(self) -> None:
        if self._stopped is None:
            self._stopped = NodeStopped("raft node stopped")
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks = []
        if self._saving is not None:
            with contextlib.suppress(Exception):
                await self._saving
        if self._transport is not None:
            await self._transport.close()
        self._storage.close()
        self._fail_all(self._stopped)

    # --- the API for the controller -----------------------------------------------------------

    async def propose(self, data: bytes, *, timeout: float | None = None) -> int:
        """Replicate ``data``; returns its index once committed *and applied here*.

        Raises ``NotLeader`` (with a leader hint) at once on a follower, ``ProposalDropped``
        when another entry was committed at its index, ``CommitUnknown`` when that cannot be
        told, ``TimeoutError`` (outcome unknown) after ``timeout``.
        """
        if len(data) > self.config.max_frame // 2:
            # It would never fit in an append frame: followers could not catch up past it.
            raise ValueError(f"entry of {len(data)} bytes is too large")
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._submit(("propose", (data, fut)))
        async with asyncio.timeout(timeout):
            return await fut

    async def read_index(self, *, timeout: float | None = None) -> int:
        """Linearizable read barrier: returns once this node, still the leader, has applied
        everything committed before the call; reads of the state machine made right after are
        linearizable. Raises ``NotLeader`` on a follower or a leader that lost its quorum."""
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        # Kept until answered: the core holds it as an opaque context meanwhile.
        self._reads.add(fut)
        fut.add_done_callback(self._reads.discard)
        self._submit(("read", fut))
        async with asyncio.timeout(timeout):
            return await fut

    async def wait_applied(self, index: int, *, timeout: float | None = None) -> None:
        """Wait until the state machine has applied ``index`` (e.g. after a follower learned
        an index from the leader)."""
        if self.applied_index >= index:
            return
        fut: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        self._add_read_waiter(index, fut)
        async with asyncio.timeout(timeout):
            await fut

    def request_snapshot(self) -> None:
        """Take a snapshot at the next opportunity (besides the automatic ones)."""
        self._want_snapshot = True
        self._wake.set()

    @property
    def node_id(self) -> int:
        return self.config.node_id

    @property
    def is_leader(self) -> bool:
        return self._core is not None and self._core.role == Role.LEADER

    @property
    def leader_id(self) -> int | None:
        leader = self._core.leader if self._core else NO_NODE
        return None if leader == NO_NODE else leader

    @property
    def term(self) -> int:
        return self._core.term if self._core else 0

    @property
    def commit_index(self) -> int:
        return self._core.commit if self._core else 0

    @property
    def applied_index(self) -> int:
        return self._core.applied if self._core else 0

    def status(self) -> dict[str, object]:
        core = self._core
        if core is None:
            return {"node_id": self.node_id, "running": False}
        return {
            "node_id": self.node_id,
            "running": self._stopped is None,
            "role": core.role.name.lower(),
            "term": core.term,
            "leader": self.leader_id,
            "commit_index": core.commit,
            "applied_index": core.applied,
            "last_index": core.log.last_index,
            "snapshot_index": core.snapshot.index if core.snapshot else 0,
            "leader_changes": self.leader_changes,
            "voters": sorted(self.config.voters),
            # The leader's view of its followers (DescribeQuorum's voters, as Kafka's
            # leader reports them): {voter id: last index known replicated there}.
            "follower_match": {str(k): v for k, v in core.follower_matches().items()},
        }

    # --- the loop -----------------------------------------------------------------------------

    def _receive(self, msg: Message) -> None:
        self._submit(("msg", msg))

    def _submit(self, item: tuple[str, object]) -> None:
        if self._stopped is not None:
            _, arg = item
            fut = arg[1] if isinstance(arg, tuple) else arg
            if isinstance(fut, asyncio.Future) and not fut.done():
                fut.set_exception(self._stopped)
            return
        self._inbox.append(item)
        self._wake.set()

    async def _ticker(self) -> None:
        loop = asyncio.get_running_loop()
        interval = self.config.tick_interval
        deadline = loop.time()
        while True:
            deadline += interval
            await asyncio.sleep(max(0.0, deadline - loop.time()))
            now = loop.time()
            if now - deadline > 10 * interval:
                # The loop was blocked for long: do not replay a burst of ticks (that would
                # start an election at once); time resumes from now.
                deadline = now
            self._submit(("tick", None))

    async def _run(self) -> None:
        core = self._core
        assert core is not None
        try:
            await self._process(core)  # replays committed entries after a restart
            while True:
                await self._wake.wait()
                self._wake.clear()
                while self._inbox:
                    kind, arg = self._inbox.popleft()
                    self._handle(core, kind, arg)
                if self._want_snapshot:
                    self._snapshot(core)
                await self._process(core)
                self._notify_leader(core)  # stepping down need not produce a Ready
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("raft node %d failed; stopping it", self.node_id)
            self._stopped = NodeStopped(f"raft node failed: {exc!r}")
            self._fail_all(self._stopped)
            if self._transport is not None:
                await self._transport.close()

    def _handle(self, core: RaftCore, kind: str, arg: object) -> None:
        if kind == "tick":
            core.tick()
        elif kind == "msg":
            core.step(arg)  # type: ignore[arg-type]
        elif kind == "propose":
            data, fut = arg  # type: ignore[misc]
            try:
                index, term = core.propose(data)
            except NotLeader as exc:
                if not fut.done():
                    fut.set_exception(exc)
                return
            self._tracker.add(index, term, fut)
        elif kind == "read":
            try:
                core.read_index(arg)
            except NotLeader as exc:
                fut = arg
                assert isinstance(fut, asyncio.Future)
                if not fut.done():
                    fut.set_exception(exc)

    async def _process(self, core: RaftCore) -> None:
        while core.has_ready():
            rd = core.ready()
            if rd.snapshot is not None or rd.rewrite or rd.must_sync:
                # Shielded: if this task is cancelled (stop()), the write still completes and
                # stop() waits for it before closing the file under the worker thread.
                self._saving = asyncio.ensure_future(asyncio.to_thread(self._storage.save, rd))
                await asyncio.shield(self._saving)
                self._saving = None
            elif rd.entries or rd.hard_state is not None:
                self._storage.save(rd)  # a commit hint only: no fsync, cheap enough inline
            assert self._transport is not None
            for m in rd.messages:
                self._transport.send(m)
            self._apply(core, rd)
            core.advance(rd)
            self._wake_readers(core.applied)
            self._notify_leader(core)
            every = self.config.snapshot_every
            if every and core.applied - self._last_snapshot >= every:
                self._snapshot(core)

    def _apply(self, core: RaftCore, rd: Ready) -> None:
        if rd.restore and rd.snapshot is not None:
            self._sm.restore(rd.snapshot)
            self._last_snapshot = rd.snapshot.index
            for fut, outcome in self._tracker.restored(rd.snapshot.index, rd.snapshot.term):
                self._resolve(core, fut, rd.snapshot.index, outcome)
        for e in rd.committed:
            self._sm.apply(e)
            for fut, outcome in self._tracker.applied(e):
                self._resolve(core, fut, e.index, outcome)
        for rs in rd.reads:
            fut = rs.ctx
            assert isinstance(fut, asyncio.Future)
            if rs.index is None:
                if not fut.done():
                    fut.set_exception(NotLeader(self._leader_hint(core), core.term))
            else:
                self._add_read_waiter(rs.index, fut)

    def _resolve(self, core: RaftCore, fut: asyncio.Future[int], index: int, o: Outcome) -> None:
        if fut.done():
            return  # the caller gave up (timeout, cancellation)
        if o == Outcome.COMMITTED:
            fut.set_result(index)
        elif o == Outcome.DROPPED:
            fut.set_exception(ProposalDropped(self._leader_hint(core), core.term))
        else:
            fut.set_exception(CommitUnknown(f"a snapshot at {index} covers the proposal"))

    def _add_read_waiter(self, index: int, fut: asyncio.Future[int]) -> None:
        self._waiter_seq += 1
        bisect.insort(self._read_waiters, (index, self._waiter_seq, fut))
        if self._core is not None:
            self._wake_readers(self._core.applied)

    def _wake_readers(self, applied: int) -> None:
        waiters = self._read_waiters
        while waiters and waiters[0][0] <= applied:
            index, _, fut = waiters.pop(0)
            if not fut.done():
                fut.set_result(index)

    def _snapshot(self, core: RaftCore) -> None:
        self._want_snapshot = False
        if core.applied > self._last_snapshot:
            core.create_snapshot(core.applied, self._sm.snapshot())
            self._last_snapshot = core.applied

    def _notify_leader(self, core: RaftCore) -> None:
        seen = (core.leader, core.term)
        if seen == self._leader_seen:
            return
        if seen[0] != NO_NODE:
            self.leader_changes += 1  # a leader (maybe the same one) for a new term
        self._leader_seen = seen
        if self._on_leader_change is not None:
            self._on_leader_change(self.leader_id, core.term)

    def _leader_hint(self, core: RaftCore) -> int:
        return NO_NODE if core.leader == self.node_id else core.leader

    def _fail_all(self, exc: BaseException) -> None:
        for fut in self._tracker.clear():
            if not fut.done():
                fut.set_exception(CommitUnknown(str(exc)))
        for _, _, fut in self._read_waiters:
            if not fut.done():
                fut.set_exception(exc)
        self._read_waiters = []
        for fut in list(self._reads):
            if not fut.done():
                fut.set_exception(exc)
        while self._inbox:
            kind, arg = self._inbox.popleft()
            fut = arg[1] if kind == "propose" else arg  # type: ignore[index]
            if isinstance(fut, asyncio.Future) and not fut.done():
                fut.set_exception(exc)
