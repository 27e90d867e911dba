"""The in-memory view of a node's Raft log: entries after a base point.

The base is the last entry dropped by compaction (or covered by an installed snapshot); its
term is kept because the entry after it is checked against it. ``unstable_from`` is the first
index not yet known to be on disk: entries from there on are handed to storage in the next
``Ready`` and must not be acknowledged before that.
"""

from __future__ import annotations

from controller.raft.messages import Entry, HardState, Snapshot


class LogError(AssertionError):
    """An operation that would break a Raft invariant (a bug, never a runtime condition)."""


class RaftLog:
    __slots__ = ("base_index", "base_term", "entries", "unstable_from")

    def __init__(self, base_index: int = 0, base_term: int = 0, entries: list[Entry] | None = None):
        self.base_index = base_index
        self.base_term = base_term
        self.entries: list[Entry] = list(entries or [])
        for offset, e in enumerate(self.entries):
            if e.index != base_index + 1 + offset:
                raise LogError(f"entry {e.index} at position {offset} after base {base_index}")
        self.unstable_from = self.last_index + 1  # what we were given came from disk

    @property
    def last_index(self) -> int:
        return self.base_index + len(self.entries)

    @property
    def last_term(self) -> int:
        return self.entries[-1].term if self.entries else self.base_term

    def term(self, index: int) -> int | None:
        """Term of the entry at ``index``; None when compacted away or past the end."""
        if index == self.base_index:
            return self.base_term
        pos = index - self.base_index - 1
        if 0 <= pos < len(self.entries):
            return self.entries[pos].term
        return None

    def entry(self, index: int) -> Entry:
        pos = index - self.base_index - 1
        if not 0 <= pos < len(self.entries):
            raise LogError(f"no entry {index} (base {self.base_index}, last {self.last_index})")
        return self.entries[pos]

    def slice(self, lo: int, hi: int) -> list[Entry]:
        """Entries lo..hi inclusive (clamped to what the log holds above its base)."""
        lo = max(lo, self.base_index + 1)
        return self.entries[lo - self.base_index - 1 : hi - self.base_index]

    def up_to_date(self, last_index: int, last_term: int) -> bool:
        """Raft's election restriction: is a log ending at (last_index, last_term) at least as
        up to date as ours?"""
        mine = self.last_term
        return last_term > mine or (last_term == mine and last_index >= self.last_index)

    def append(self, entries: list[Entry] | tuple[Entry, ...], committed: int) -> None:
        """Store entries that start anywhere in 1..last_index+1, dropping any conflicting suffix.

        Entries already present with the same term are skipped, so a duplicated or reordered
        message never truncates anything. Truncating at or below ``committed`` is a bug.
        """
        if not entries:
            return
        first = entries[0].index
        if first > self.last_index + 1:
            raise LogError(f"gap: appending {first} after {self.last_index}")
        skip = 0
        for e in entries:
            if e.index <= self.base_index:
                skip += 1  # covered by the snapshot/compaction: identical by log matching
                continue
            t = self.term(e.index)
            if t is None:
                break
            if t != e.term:
                if e.index <= committed:
                    raise LogError(f"conflict at committed index {e.index} (commit {committed})")
                del self.entries[e.index - self.base_index - 1 :]
                break
            skip += 1
        new = entries[skip:]
        if not new:
            return
        self.entries.extend(new)
        self.unstable_from = min(self.unstable_from, new[0].index)

    def conflict_hint(self, prev_index: int, prev_term: int) -> tuple[int, int]:
        """Where a leader whose prev (prev_index, prev_term) did not match should look next:
        our last index at or below prev_index whose term is <= prev_term (entries with a
        larger term there cannot match the leader's, whose term at prev_index is prev_term)."""
        index = min(prev_index, self.last_index)
        while index > self.base_index:
            t = self.term(index)
            assert t is not None
            if t <= prev_term:
                break
            index -= 1
        return index, self.term(index) or 0

    def compact(self, index: int) -> None:
        """Forget entries up to ``index`` (a snapshot covers them)."""
        if index <= self.base_index:
            return
        if index > self.last_index:
            raise LogError(f"compacting to {index} past last {self.last_index}")
        term = self.term(index)
        assert term is not None
        del self.entries[: index - self.base_index]
        self.base_index, self.base_term = index, term

    def reset(self, index: int, term: int) -> None:
        """Drop everything: the log now starts after (index, term) (an installed snapshot)."""
        self.entries = []
        self.base_index, self.base_term = index, term
        self.unstable_from = index + 1

    def unstable(self) -> list[Entry]:
        return self.entries[self.unstable_from - self.base_index - 1 :]

    def mark_stable(self) -> None:
        self.unstable_from = self.last_index + 1


class PersistentState:
    """What storage hands back at start: the hard state, the latest snapshot and the log.

    ``reconcile`` repairs the one inconsistency a crash can leave between the snapshot file and
    the log file: a snapshot received from a leader is written (atomically) before the log is
    rewritten, so after a crash in between the log may still hold an older history that does
    not lead to the snapshot. Raft's rule for installing a snapshot applies: keep the entries
    after it only if the log holds the snapshot's last entry with the same term.
    """

    __slots__ = ("base_index", "base_term", "entries", "hard_state", "snapshot")

    def __init__(
        self,
        hard_state: HardState,
        snapshot: Snapshot | None,
        base_index: int,
        base_term: int,
        entries: list[Entry],
    ) -> None:
        self.hard_state = hard_state
        self.snapshot = snapshot
        self.base_index = base_index
        self.base_term = base_term
        self.entries = entries

    @classmethod
    def empty(cls) -> PersistentState:
        return cls(HardState(), None, 0, 0, [])

    def reconcile(self) -> PersistentState:
        snap = self.snapshot
        if snap is None:
            if self.base_index != 0:
                raise LogError(f"log starts after {self.base_index} but there is no snapshot")
            return self
        if self.base_index > snap.index:
            raise LogError(f"log starts after {self.base_index}, past snapshot {snap.index}")
        log = RaftLog(self.base_index, self.base_term, self.entries)
        if log.term(snap.index) == snap.term:
            return self
        return PersistentState(self.hard_state, snap, snap.index, snap.term, [])
