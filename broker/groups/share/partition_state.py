"""One share-partition's state (KIP-932): which records of a topic partition a share group
has delivered, to whom, and what became of them. Pure: no I/O, the time is passed in.

The window is [``start``, ``next``): ``start`` is Kafka's share-partition start offset
(SPSO), below which every record is done with; ``next`` the first offset never acquired
(everything at or past it is available). Every offset in the window has a ``Record``:
AVAILABLE (released, to be delivered again), ACQUIRED by one member until its lock
expires, ACKNOWLEDGED (accepted) or ARCHIVED (rejected, delivered too often, a gap in the
log, a control record or an aborted transaction's record). ``start`` moves past done
records as soon as they lead the window.

The state is stored as JSON in the coordinator database (``to_json``/``from_json``),
runs of equal records as one range, so a fetched batch costs one entry.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import NamedTuple

# Kafka's RecordState ids.
AVAILABLE = 0
ACQUIRED = 1
ACKNOWLEDGED = 2
ARCHIVED = 4
_DONE = (ACKNOWLEDGED, ARCHIVED)

# ShareFetch/ShareAcknowledge acknowledge types.
ACK_GAP = 0
ACK_ACCEPT = 1
ACK_RELEASE = 2
ACK_REJECT = 3
ACK_RENEW = 4


@dataclass(slots=True)
class Record:
    state: int
    delivery_count: int
    owner: str = ""  # the member holding it while ACQUIRED
    lock_until_ms: int = 0

    def key(self) -> tuple[int, int, str, int]:
        return (self.state, self.delivery_count, self.owner, self.lock_until_ms)


class LogBatch(NamedTuple):
    """A batch of the partition's log as read, for acquisition: ``deliverable`` False for
    a control batch or an aborted transaction's batch under read_committed."""

    base_offset: int
    last_offset: int
    deliverable: bool


class Acquired(NamedTuple):
    """A run of acquired offsets with one delivery count (ShareFetch's AcquiredRecords)."""

    first_offset: int
    last_offset: int
    delivery_count: int


class InvalidRecordState(Exception):
    """An acknowledgement of records this member does not hold (INVALID_RECORD_STATE)."""


@dataclass(frozen=True, slots=True)
class Limits:
    lock_ms: int = 30_000  # group.share.record.lock.duration.ms
    delivery_count_limit: int = 5  # group.share.delivery.count.limit
    max_window: int = 2000  # group.share.partition.max.record.locks


@dataclass(slots=True)
class SharePartitionState:
    start: int
    next: int
    records: dict[int, Record] = field(default_factory=dict)

    # ------------------------------------------------------------------ queries
    def fetch_offset(self, now_ms: int, limits: Limits) -> int | None:
        """Where the next read of the log starts: the first record of the window that is
        AVAILABLE (or whose lock ran out), else ``next``; None when the window is full and
        nothing in it is available."""
        for offset in range(self.start, self.next):
            rec = self.records.get(offset)
            if rec is not None and (
                rec.state == AVAILABLE or (rec.state == ACQUIRED and rec.lock_until_ms <= now_ms)
            ):
                return offset
        if self.next - self.start >= limits.max_window:
            return None
        return self.next

    def next_lock_expiry(self) -> int | None:
        """When the earliest lock runs out (ms), or None when nothing is acquired."""
        expiries = [r.lock_until_ms for r in self.records.values() if r.state == ACQUIRED]
        return min(expiries) if expiries else None

    def copy(self) -> SharePartitionState:
        return SharePartitionState(
            self.start, self.next, {o: Record(*r.key()) for o, r in self.records.items()}
        )

    def counts(self) -> dict[int, int]:
        out: dict[int, int] = {}
        for rec in self.records.values():
            out[rec.state] = out.get(rec.state, 0) + 1
        return out

    # ------------------------------------------------------------------ changes
    def move_start(self, log_start: int) -> None:
        """The log lost its records below ``log_start`` (retention, DeleteRecords): they
        can be delivered no more."""
        if log_start <= self.start:
            return
        for offset in [o for o in self.records if o < log_start]:
            del self.records[offset]
        self.start = log_start
        self.next = max(self.next, log_start)

    def reset(self, offset: int) -> None:
        """Start over at ``offset`` (AlterShareGroupOffsets): nothing in flight."""
        self.records.clear()
        self.start = self.next = offset

    def expire_locks(self, now_ms: int, limits: Limits) -> None:
        """Records whose acquisition lock ran out go back (archived at the delivery limit)."""
        for rec in self.records.values():
            if rec.state == ACQUIRED and rec.lock_until_ms <= now_ms:
                _give_back(rec, limits)
        self._advance()

    def acquire(
        self,
        member_id: str,
        batches: list[LogBatch],
        max_records: int,
        now_ms: int,
        limits: Limits,
        record_limit: bool = False,
    ) -> tuple[list[Acquired], list[int]]:
        """Acquire for ``member_id`` what ``batches`` (read from the log, in order) hold that
        is available, whole batches at a time until ``max_records`` is reached (Kafka's
        batch-optimized mode may exceed it to keep batches whole; ``record_limit``, ShareFetch
        v2's record-limit mode, stops at ``max_records`` inside a batch). Returns the
        acquired runs and the indexes of the batches that hold them (the ones to send)."""
        self.expire_locks(now_ms, limits)
        lock_until = now_ms + limits.lock_ms
        acquired: list[int] = []
        counts: dict[int, int] = {}
        sent: list[int] = []
        for index, batch in enumerate(batches):
            if len(acquired) >= max_records:
                break
            if batch.last_offset < self.start:
                continue
            if batch.base_offset > self.next:
                if batch.base_offset - self.start > limits.max_window:
                    break
                # Offsets the log does not have (compacted away): nothing to deliver.
                self._archive_new(self.next, batch.base_offset - 1)
            if not batch.deliverable:
                self._archive_new(max(batch.base_offset, self.next), batch.last_offset)
                continue
            if batch.base_offset >= self.next and self.next - self.start >= limits.max_window:
                break
            taken = False
            for offset in range(max(batch.base_offset, self.start), batch.last_offset + 1):
                if record_limit and len(acquired) >= max_records:
                    break
                if offset >= self.next:
                    rec = self.records[offset] = Record(ACQUIRED, 1, member_id, lock_until)
                    self.next = offset + 1
                else:
                    found = self.records.get(offset)
                    if found is None or found.state != AVAILABLE:
                        continue
                    rec = found
                    rec.state, rec.owner, rec.lock_until_ms = ACQUIRED, member_id, lock_until
                    rec.delivery_count += 1
                acquired.append(offset)
                counts[offset] = rec.delivery_count
                taken = True
            if taken:
                sent.append(index)
        self._advance()
        return _runs(acquired, counts), sent

    def acknowledge(
        self,
        member_id: str,
        first_offset: int,
        last_offset: int,
        types: list[int],
        now_ms: int,
        limits: Limits,
    ) -> None:
        """One acknowledgement batch: one type for the whole range, or one per offset.
        All or nothing: raises InvalidRecordState if any record of the range is not
        acquired by ``member_id`` (a gap may also be already archived)."""
        self.expire_locks(now_ms, limits)
        span = last_offset - first_offset + 1
        if span <= 0 or (len(types) != 1 and len(types) != span) or not types:
            raise InvalidRecordState("acknowledgement batch and its types do not match")
        if first_offset < self.start or last_offset >= self.next:
            raise InvalidRecordState(
                f"offsets {first_offset}-{last_offset} are not in flight"
                f" (window {self.start}-{self.next - 1})"
            )
        plan: list[tuple[Record, int]] = []
        for i, offset in enumerate(range(first_offset, last_offset + 1)):
            kind = types[0] if len(types) == 1 else types[i]
            if kind not in (ACK_GAP, ACK_ACCEPT, ACK_RELEASE, ACK_REJECT, ACK_RENEW):
                raise InvalidRecordState(f"unknown acknowledge type {kind}")
            rec = self.records[offset]
            held = rec.state == ACQUIRED and rec.owner == member_id
            if not held and not (kind == ACK_GAP and rec.state == ARCHIVED):
                raise InvalidRecordState(f"record {offset} is not acquired by this member")
            plan.append((rec, kind))
        for rec, kind in plan:
            if kind == ACK_ACCEPT:
                _settle(rec, ACKNOWLEDGED)
            elif kind in (ACK_REJECT, ACK_GAP):
                _settle(rec, ARCHIVED)
            elif kind == ACK_RELEASE:
                _give_back(rec, limits)
            else:  # RENEW (KIP-1222): the member keeps it for another lock duration
                rec.lock_until_ms = now_ms + limits.lock_ms
        self._advance()

    def release_member(self, member_id: str, limits: Limits) -> bool:
        """Give back every record ``member_id`` holds (its share session closed or it left
        the group); True if there were any."""
        released = False
        for rec in self.records.values():
            if rec.state == ACQUIRED and rec.owner == member_id:
                _give_back(rec, limits)
                released = True
        self._advance()
        return released

    # ------------------------------------------------------------------ internals
    def _archive_new(self, first: int, last: int) -> None:
        for offset in range(max(first, self.next), last + 1):
            self.records[offset] = Record(ARCHIVED, 0)
        self.next = max(self.next, last + 1)
        self._advance()

    def _advance(self) -> None:
        while self.start < self.next:
            rec = self.records.get(self.start)
            if rec is not None and rec.state not in _DONE:
                return
            self.records.pop(self.start, None)
            self.start += 1

    # ------------------------------------------------------------------ storage
    def to_json(self) -> str:
        runs: list[list[object]] = []
        for offset in sorted(self.records):
            rec = self.records[offset]
            last = runs[-1] if runs else None
            if last is not None and last[1] == offset - 1 and tuple(last[2:]) == rec.key():
                last[1] = offset
            else:
                runs.append([offset, offset, *rec.key()])
        return json.dumps({"start": self.start, "next": self.next, "runs": runs})

    @classmethod
    def from_json(cls, text: str) -> SharePartitionState:
        data = json.loads(text)
        state = cls(int(data["start"]), int(data["next"]))
        for first, last, st, count, owner, until in data["runs"]:
            for offset in range(first, last + 1):
                state.records[offset] = Record(st, count, owner, until)
        return state


def _settle(rec: Record, state: int) -> None:
    rec.state, rec.owner, rec.lock_until_ms = state, "", 0


def _give_back(rec: Record, limits: Limits) -> None:
    # Kafka archives a record given back once it was delivered as often as allowed.
    over = rec.delivery_count >= limits.delivery_count_limit
    _settle(rec, ARCHIVED if over else AVAILABLE)


def _runs(offsets: list[int], counts: dict[int, int]) -> list[Acquired]:
    out: list[Acquired] = []
    for offset in offsets:
        count = counts[offset]
        if out and out[-1].last_offset == offset - 1 and out[-1].delivery_count == count:
            out[-1] = out[-1]._replace(last_offset=offset)
        else:
            out.append(Acquired(offset, offset, count))
    return out
