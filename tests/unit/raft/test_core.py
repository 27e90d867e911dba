"""Scripted scenarios for the Raft core: the classic failure stories, each told exactly."""

from __future__ import annotations

import pytest

from controller.raft.core import CoreConfig, RaftCore, Role
from controller.raft.messages import (
    NO_NODE,
    AppendResponse,
    Entry,
    EntryKind,
    NotLeader,
    SnapshotRequest,
    VoteRequest,
    VoteResponse,
)
from controller.raft.proposals import Outcome, ProposalTracker
from tests.unit.raft.harness import Harness, ScriptedCore


def elect(h: Harness, leader: int) -> None:
    """Run an election won by ``leader``; its first appends are left in flight."""
    # A node with a stale term learns the current one from the refusals of its first try.
    for _ in range(2):
        h.expire_lease(*[i for i, c in h.cores.items() if c is not None])
        h.campaign(leader)
        h.deliver(only=(VoteRequest, VoteResponse))
        if h.core(leader).is_leader:
            return
    raise AssertionError(f"node {leader} did not win")


def test_single_voter_elects_itself_and_commits() -> None:
    core = RaftCore(1, (1,))
    assert core.is_leader
    index, term = core.propose(b"a")
    committed = []
    while core.has_ready():
        rd = core.ready()
        committed += rd.committed
        core.advance(rd)
    assert [(e.index, e.data) for e in committed] == [(1, b""), (index, b"a")]
    assert committed[0].kind == EntryKind.NOOP and term == 1


def test_three_nodes_elect_replicate_and_apply() -> None:
    h = Harness()
    elect(h, 1)
    index, _ = h.core(1).propose(b"x")
    h.drive(1)
    h.deliver()
    h.tick(1, 2)  # a heartbeat carries the new commit index to the followers
    h.deliver()
    for i in (1, 2, 3):
        assert [e.data for e in h.applied[i]][-1] == b"x"
        assert h.applied[i][-1].index == index
    h.check_state_machine_safety()


def test_follower_rejects_proposal_with_leader_hint() -> None:
    h = Harness()
    elect(h, 2)
    h.deliver()
    with pytest.raises(NotLeader) as exc:
        h.core(3).propose(b"x")
    assert exc.value.leader == 2
    with pytest.raises(NotLeader):
        h.core(3).read_index("r")


def test_vote_and_ack_leave_only_with_what_they_promise() -> None:
    """Persist-before-acknowledge, as the Ready contract: the answer to a vote request is in
    the same Ready as the vote (must_sync), and an append ack with the entries it acks."""
    h = Harness()
    h.expire_lease(1, 2, 3)
    h.campaign(1)
    h.deliver(src=1)  # pre-vote requests
    h.deliver(dst=1)  # pre-vote grants: node 1 becomes candidate
    h.readies[2].clear()
    h.deliver(src=1, dst=2)  # the real vote request
    (rd,) = [r for r in h.readies[2] if r.messages]
    (resp,) = rd.messages
    assert isinstance(resp, VoteResponse) and resp.granted and not resp.pre
    assert rd.hard_state is not None and rd.hard_state.vote == 1 and rd.must_sync
    h.deliver()
    assert h.core(1).is_leader
    h.core(1).propose(b"x")
    h.drive(1)
    h.readies[3].clear()
    h.deliver(src=1, dst=3)
    acks = [r for r in h.readies[3] if any(isinstance(m, AppendResponse) for m in r.messages)]
    assert acks and all(r.must_sync for r in acks)
    assert any(e.data == b"x" for r in acks for e in r.entries)


class CommitsOldTerms(ScriptedCore):
    """The bug of Raft's Figure 8: committing an entry of an earlier term by counting."""

    def _maybe_commit(self) -> None:
        matches = sorted([pr.match for pr in self._progress.values()] + [self._self_match()])
        n = matches[len(matches) - self.quorum]
        self.commit = max(self.commit, n)


def figure_8(core_cls: type[RaftCore]) -> Harness:
    h = Harness(config=CoreConfig(election_ticks=10, max_append_entries=1), core_cls=core_cls)
    elect(h, 1)
    h.deliver()
    h.core(1).propose(b"x")  # index 2, term 1: only node 1 will ever store it
    h.drive(1)
    h.crash(1)
    elect(h, 3)  # term 2; its NOOP at index 2 stays on node 3
    h.drop(src=3)
    h.crash(3)
    h.start(1)
    elect(h, 1)  # term 3, with node 2's vote (node 1's log ends in term 1 at index 2)
    # Node 1 backtracks to node 2's end and sends x alone (max_append_entries=1); the ack
    # makes x stored on a majority, but it is not from term 3 so it must not count as committed.
    for _ in range(2):  # probe refused, then x alone acknowledged
        h.deliver(src=1, dst=2, rounds=1)
        h.deliver(src=2, dst=1, rounds=1)
    assert h.core(2).log.term(2) == 1  # x is on a majority now
    h.crash(1)  # before its term-3 entry reaches anyone
    h.start(3)
    elect(h, 3)  # term 4 with node 2's vote: node 3's last term (2) beats node 2's (1)
    h.deliver()
    h.tick(3, 2)
    h.deliver()
    return h


def test_figure_8_entries_of_older_terms_do_not_commit_by_counting() -> None:
    h = figure_8(ScriptedCore)
    h.check_state_machine_safety()
    assert [e.term for e in h.applied[2] if e.index == 2] == [2]  # node 3's NOOP won


def test_figure_8_scenario_catches_the_bug() -> None:
    with pytest.raises(AssertionError, match="applied term"):
        figure_8(CommitsOldTerms).check_state_machine_safety()


def test_pre_vote_keeps_a_returning_node_from_deposing_the_leader() -> None:
    h = Harness()
    elect(h, 1)
    h.deliver()
    term = h.core(1).term
    for _ in range(5):  # node 3 is cut off and keeps timing out
        h.campaign(3)
        h.drop(src=3)
    assert h.core(3).term == term  # pre-votes never raised its term
    h.tick(1, 2)  # heartbeats reach it again
    h.deliver()
    assert h.core(1).is_leader and h.core(1).term == term
    assert h.core(3).role == Role.FOLLOWER and h.core(3).leader == 1


def test_node_that_heard_from_the_leader_ignores_vote_requests() -> None:
    h = Harness()
    elect(h, 1)
    h.deliver()
    term = h.core(1).term
    h.core(2).step(VoteRequest(term + 1, 3, 2, 100, term, False))
    h.drive(2)
    assert h.core(2).term == term and not h.inflight


def test_check_quorum_steps_down_an_isolated_leader_and_fails_its_reads() -> None:
    h = Harness()
    elect(h, 1)
    h.deliver()
    h.core(1).read_index("stale?")
    h.drive(1)
    h.drop(src=1)  # node 1 is partitioned from now on
    elect(h, 2)  # the majority moves on and commits
    h.core(2).propose(b"new")
    h.drive(2)
    h.deliver(src=2, dst=3)
    h.deliver(src=3, dst=2)
    for _ in range(2 * h.cfg.election_ticks):
        h.tick(1)
        h.drop(src=1)
    reads = [rs for rd in h.readies[1] for rs in rd.reads]
    assert h.core(1).role == Role.FOLLOWER
    assert [(r.ctx, r.index) for r in reads] == [("stale?", None)]


def test_read_index_waits_for_a_quorum_round_and_a_commit_of_its_term() -> None:
    h = Harness()
    h.expire_lease(1, 2, 3)
    h.campaign(1)
    h.deliver(src=1)
    h.deliver(dst=1)
    h.deliver(src=1, dst=2)
    h.deliver(src=2, dst=1)
    assert h.core(1).is_leader
    h.core(1).read_index("r")
    h.drive(1)
    assert not any(rd.reads for rd in h.readies[1])  # its NOOP is not committed yet
    h.deliver()
    reads = [rs for rd in h.readies[1] for rs in rd.reads]
    assert [(r.ctx, r.index) for r in reads] == [("r", h.core(1).commit)]


def test_lagging_follower_gets_a_snapshot() -> None:
    h = Harness(config=CoreConfig(election_ticks=10, retain_entries=0))
    elect(h, 1)
    h.deliver()
    h.crash(3)
    for n in range(5):
        h.core(1).propose(b"e%d" % n)
        h.drive(1)
        h.deliver()
    h.tick(1, 2)
    h.deliver()
    leader = h.core(1)
    leader.create_snapshot(leader.applied, b"state@%d" % leader.applied)
    h.drive(1)
    assert leader.log.base_index == leader.applied
    h.start(3)
    h.tick(1, 2)  # the heartbeat finds node 3's next entry compacted away
    assert any(isinstance(m, SnapshotRequest) and m.dst == 3 for m in h.inflight)
    h.deliver()
    restores = [rd for rd in h.readies[3] if rd.restore]
    assert len(restores) == 1 and restores[0].snapshot is not None
    assert restores[0].snapshot.data == b"state@%d" % leader.applied
    h.core(1).propose(b"after")
    h.drive(1)
    h.deliver()
    h.tick(1, 2)
    h.deliver()
    assert h.applied[3][-1].data == b"after"
    assert h.core(3).log.last_index == h.core(1).log.last_index
    h.check_state_machine_safety()


def test_restart_replays_committed_entries_from_disk() -> None:
    h = Harness()
    elect(h, 1)
    h.core(1).propose(b"x")
    h.drive(1)
    h.deliver()
    h.tick(1, 2)
    h.deliver()
    before = [e.data for e in h.applied[2]]
    h.crash(2)
    h.applied[2] = []
    h.start(2)
    assert [e.data for e in h.applied[2]] == before  # the commit hint was on disk
    assert h.core(2).leader == NO_NODE


def test_no_input_between_ready_and_advance() -> None:
    core = RaftCore(1, (1,))
    core.ready()
    with pytest.raises(RuntimeError):
        core.tick()


def test_proposal_outcomes_from_applied_entries_and_snapshots() -> None:
    t: ProposalTracker[str] = ProposalTracker()
    t.add(5, 2, "mine")
    t.add(5, 3, "mine-again")  # re-proposed at the same index in a later term
    assert t.applied(Entry(5, 3, b"")) == [
        ("mine", Outcome.DROPPED),
        ("mine-again", Outcome.COMMITTED),
    ]
    t.add(7, 4, "a")
    t.add(8, 6, "b")
    t.add(9, 2, "c")
    t.add(12, 5, "later")
    # A snapshot ending at (10, term 4): the entry at 7 of term 4 is in it (same leader's
    # prefix); one of term 6 cannot be (terms only grow along the log); of term 2, unknown.
    assert sorted(t.restored(10, 4)) == [
        ("a", Outcome.COMMITTED),
        ("b", Outcome.DROPPED),
        ("c", Outcome.UNKNOWN),
    ]
    assert len(t) == 1 and t.clear() == ["later"]
