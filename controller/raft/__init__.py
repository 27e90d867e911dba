"""Raft for the controller quorum: the metadata log is this log (Raft index = metadata offset).

Layout: ``core`` is the pure state machine (no I/O, no clock; tested by the deterministic
simulator in tests/unit/raft/sim.py); ``log`` its in-memory log; ``messages`` the data types
and wire encoding; ``proposals`` matches proposals with commits; ``storage`` the durable
directory; ``transport`` TCP between voters; ``node`` the asyncio shell the controller uses::

    class Metadata:                       # the controller's StateMachine
        def apply(self, entry): ...       # every committed entry, in index order
        def snapshot(self) -> bytes: ...
        def restore(self, snapshot): ...

    node = RaftNode(NodeConfig(node_id=1, voters={1: ("10.0.0.1", 9093), 2: (...), 3: (...)},
                               data_dir=Path("/var/lib/sluice/raft"), secret=b"..."), metadata)
    await node.start()
    try:
        index = await node.propose(record_bytes)   # committed and applied here
    except NotLeader as exc:                       # ProposalDropped is a NotLeader too
        forward_to(exc.leader)                     # NO_NODE (-1): unknown yet, retry later
    await node.read_index()                        # then read `metadata`: linearizable

Membership is static: 1 voter (``sluice dev``) or 3, from configuration. The data directory
records the voter set it was created with, and a node whose configuration differs refuses to
start. Messages from nodes outside the configured voters are ignored.

Replacing a voter (a dead machine, or a planned move) is an offline procedure, because a
voter that starts again with an empty directory could forget a vote it cast or an entry it
acknowledged (and with it a committed entry):

1. Stop every remaining voter (the metadata log is unavailable until step 4; brokers keep
   serving with the metadata they have).
2. Run ``python -m controller.raft.admin inspect DIR`` on each stopped voter's directory and
   pick the one with the highest ``(last_term, last_index)``. A committed entry is on a
   majority, so on a survivor, and the most up-to-date survivor holds every committed entry
   (the argument that lets only such a node win an election: commits happen through an entry
   of the committing term stored on a majority, and log matching carries the prefix along).
3. Copy that directory to every member of the new voter set (survivors and the new machine),
   replacing what they had, and on each run
   ``python -m controller.raft.admin set-voters DIR --node-id ID --voters 1,2,4``.
4. Put the new voter list in every node's configuration and start them all.

Every voter then starts from the same log, which holds everything committed; the votes copied
along refer to terms that are over (becoming leader needs a higher term). The replaced voter
must not be started again with its old directory; if it is, the others ignore it.
"""

from controller.raft.messages import (
    NO_NODE,
    CommitUnknown,
    Entry,
    EntryKind,
    NotLeader,
    ProposalDropped,
    Snapshot,
)
from controller.raft.node import NodeConfig, NodeStopped, RaftNode, StateMachine

__all__ = [
    "NO_NODE",
    "CommitUnknown",
    "Entry",
    "EntryKind",
    "NodeConfig",
    "NodeStopped",
    "NotLeader",
    "ProposalDropped",
    "RaftNode",
    "Snapshot",
    "StateMachine",
]
