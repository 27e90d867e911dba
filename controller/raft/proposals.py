"""Matching a node's own proposals with what gets committed.

``RaftCore.propose`` gives an (index, term). The proposal is committed exactly when the entry
committed at that index has that term (only the leader of a term creates entries of that term,
one per index). If another term is committed there, it never will be. A snapshot that jumps
over the index tells only the term of its last entry; that still decides most cases (see
``restored``). Pure bookkeeping: the asyncio node and the simulator both use it.
"""

from __future__ import annotations

from enum import IntEnum
from typing import Generic, TypeVar

from controller.raft.messages import Entry

T = TypeVar("T")


class Outcome(IntEnum):
    COMMITTED = 0
    DROPPED = 1  # another entry is committed at its index: it never will be
    UNKNOWN = 2


class ProposalTracker(Generic[T]):
    def __init__(self) -> None:
        # index -> [(term, token)]: a node may propose twice at one index (leader in two
        # terms, the first entry truncated here meanwhile but perhaps alive elsewhere).
        self._pending: dict[int, list[tuple[int, T]]] = {}

    def __len__(self) -> int:
        return sum(len(v) for v in self._pending.values())

    def add(self, index: int, term: int, token: T) -> None:
        self._pending.setdefault(index, []).append((term, token))

    def applied(self, entry: Entry) -> list[tuple[T, Outcome]]:
        """``entry`` was committed and applied (entries arrive in index order)."""
        waiting = self._pending.pop(entry.index, None)
        if not waiting:
            return []
        return [
            (token, Outcome.COMMITTED if term == entry.term else Outcome.DROPPED)
            for term, token in waiting
        ]

    def restored(self, index: int, term: int) -> list[tuple[T, Outcome]]:
        """The state machine jumped to a snapshot ending at (index, term)."""
        out: list[tuple[T, Outcome]] = []
        for i in [i for i in self._pending if i <= index]:
            for t, token in self._pending.pop(i):
                if t == term:
                    # The committed entry at ``index`` is the term-t leader's, so the committed
                    # log up to there is that leader's log, which holds its entry at i.
                    out.append((token, Outcome.COMMITTED))
                elif t > term:
                    # Terms never decrease along a log: the committed entry at i has a term
                    # <= ``term`` < t, so it is not ours.
                    out.append((token, Outcome.DROPPED))
                else:
                    out.append((token, Outcome.UNKNOWN))
        return out

    def clear(self) -> list[T]:
        tokens = [token for waiting in self._pending.values() for _, token in waiting]
        self._pending.clear()
        return tokens
