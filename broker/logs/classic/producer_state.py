"""Idempotent producers on a classic partition: per producer id, its epoch and the last
five batches' sequence ranges, as Kafka's ProducerStateManager keeps them.

Kept by every replica (a follower updates it from the batches it copies) so that a new
leader recognises a retry of a batch the old one wrote. Only batch headers are looked at.
Rebuilt from the log on open: a broker restart must still see duplicates.
"""

from __future__ import annotations

import struct
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

# producerId, producerEpoch, baseSequence at offset 43 of a v2 batch
_PRODUCER = struct.Struct(">qhi")
PRODUCER_OFFSET = 43
NO_PRODUCER_ID = -1
RETAINED_BATCHES = 5  # Kafka keeps the last five per producer (max.in.flight <= 5)
# How long a transaction verification's lowest sequence is kept when nothing of that
# transaction is ever appended (Kafka: producer.id.expiration.ms, 1 day by default).
VERIFICATION_EXPIRY_MS = 86_400_000
# Verifications a partition remembers at most: they begin before the coordinator is asked, so
# a client sending transactional batches under made-up producer ids must not grow this without
# bound (the oldest is forgotten first).
VERIFICATIONS_MAX = 10_000
# Transaction numbers in a marker's coordinator epoch (an int32): 1 .. 2**31 - 1, wrapping
# (a transactional id completing 1000 transactions a second would pass 2**31 in 25 days),
# compared as serial numbers: a number up to half the range behind the last one is older.
MARKER_NUMBERS = 2**31 - 1


def marker_number(completions: int) -> int:
    """The number a transaction's markers carry: its id's completion count, wrapped into
    1 .. MARKER_NUMBERS (0 and below mean "not numbered")."""
    return (completions - 1) % MARKER_NUMBERS + 1


def marker_behind(number: int, last: int) -> int:
    """How many transactions ``number`` is behind ``last`` (0: the same one; negative:
    newer), both in 1 .. MARKER_NUMBERS."""
    behind = (last - number) % MARKER_NUMBERS
    return behind if behind <= MARKER_NUMBERS // 2 else behind - MARKER_NUMBERS


@dataclass(slots=True)
class _Entry:
    epoch: int
    # (first sequence, last sequence, first offset, last offset), oldest first
    batches: deque[tuple[int, int, int, int]] = field(
        default_factory=lambda: deque(maxlen=RETAINED_BATCHES)
    )

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1] if self.batches else -1


def producer_fields(batch: bytes | memoryview) -> tuple[int, int, int]:
    """(producer id, epoch, base sequence) of the batch starting at ``batch[0]``."""
    pid, epoch, seq = _PRODUCER.unpack_from(batch, PRODUCER_OFFSET)
    return pid, epoch, seq


class ProducerState:
    def __init__(self) -> None:
        self._producers: dict[int, _Entry] = {}
        # Per producer id, its last marker's transaction number (the coordinator epoch
        # field: the transactional id's completion count, see storage.transactions) and
        # offset. Kept apart from the epoch entry: an epoch bump keeps counting.
        self._markers: dict[int, tuple[int, int]] = {}
        # KIP-890's VerificationStateEntry: per producer whose transaction is being verified
        # in this partition (a transactional batch came while it had none open here), the
        # lowest sequence seen for it, that sequence's epoch and when the entry began, until
        # a transactional batch or a marker of that producer is appended. A batch with a
        # higher sequence is refused meanwhile: the lower one must be written first. Why it
        # matters: a client that reuses the sequence of a batch of its aborted transaction
        # (librdkafka does, for a record it purged while its request's outcome was unknown)
        # gets that batch answered as a duplicate of the aborted one, and without this rule
        # the rest of its new transaction would be appended and committed without it.
        self._verifying: dict[int, tuple[int, int, float]] = {}

    def begin_verification(self, pid: int, seq: int, epoch: int, now_ms: float) -> None:
        """A transactional batch of ``pid`` that opens its transaction here is about to be
        verified: remember the lowest sequence seen (a newer epoch starts again)."""
        entry = self._verifying.get(pid)
        if entry is not None and now_ms - entry[2] >= VERIFICATION_EXPIRY_MS:
            entry = None
        if entry is None or epoch > entry[1]:
            self._verifying.pop(pid, None)
            if len(self._verifying) >= VERIFICATIONS_MAX:
                del self._verifying[next(iter(self._verifying))]
            self._verifying[pid] = (seq, epoch, now_ms)
        elif epoch == entry[1] and seq < entry[0]:
            self._verifying[pid] = (seq, epoch, entry[2])

    def end_verification(self, pid: int) -> None:
        """A transactional batch or a marker of ``pid`` was appended (or replicated): its
        transaction here is open or over, no longer being verified."""
        self._verifying.pop(pid, None)

    def verifying_lowest(self, pid: int) -> int | None:
        entry = self._verifying.get(pid)
        return None if entry is None else entry[0]

    def check(
        self, pid: int, epoch: int, first_seq: int, last_seq: int
    ) -> tuple[ErrorCode | None, tuple[int, int] | None]:
        """Before a leader appends: (error, None); (None, (first offset, last offset)) of
        the duplicate already in the log, which a retry must wait for exactly as the
        original did (acks=all: until the high watermark passes its last offset); or
        (None, None) to append."""
        if pid == NO_PRODUCER_ID:
            return None, None
        entry = self._producers.get(pid)
        if entry is not None:
            if epoch < entry.epoch:
                return ErrorCode.invalid_producer_epoch, None
            if epoch == entry.epoch:
                for f, last, base, end in entry.batches:
                    if f == first_seq and last == last_seq:
                        return None, (base, end)
        # Kafka checks this after the duplicates and the epoch, before the sequence.
        lowest = self.verifying_lowest(pid)
        if lowest is not None and first_seq > lowest:
            return ErrorCode.out_of_order_sequence_number, None
        if entry is None:
            # Unknown producer (new, or its state went with old segments): accepted, as
            # Kafka does since KIP-360.
            return None, None
        if epoch > entry.epoch:
            if first_seq != 0:
                return ErrorCode.out_of_order_sequence_number, None
            return None, None
        expected = (entry.last_seq + 1) & 0x7FFFFFFF if entry.batches else first_seq
        if first_seq != expected:
            return ErrorCode.out_of_order_sequence_number, None
        return None, None

    def update(self, pid: int, epoch: int, first_seq: int, count: int, base: int) -> None:
        """A batch of producer ``pid`` was appended at offsets [base, base+count)."""
        if pid == NO_PRODUCER_ID:
            return
        entry = self._producers.get(pid)
        if entry is None or epoch != entry.epoch:
            entry = self._producers[pid] = _Entry(epoch)
        last_seq = (first_seq + count - 1) & 0x7FFFFFFF
        entry.batches.append((first_seq, last_seq, base, base + count - 1))

    def fence(self, pid: int, epoch: int) -> None:
        """A transaction marker of ``pid`` at ``epoch``: a coordinator's abort may have
        bumped the epoch, and the older one is then fenced here too (Kafka updates the
        producer's epoch from markers). Markers have no sequence."""
        entry = self._producers.get(pid)
        if pid != NO_PRODUCER_ID and (entry is None or epoch > entry.epoch):
            self._producers[pid] = _Entry(epoch)

    def marker(self, pid: int, number: int, offset: int) -> None:
        """A marker of ``pid`` with transaction ``number`` is at ``offset``. Numbers < 1
        (markers written before they were numbered, or by a sender that does not number
        them) are not remembered."""
        if pid != NO_PRODUCER_ID and number >= 1:
            self._markers[pid] = (number, offset)

    def last_marker(self, pid: int) -> tuple[int, int] | None:
        """(transaction number, offset) of ``pid``'s last numbered marker, if known."""
        return self._markers.get(pid)

    def last_batch_offsets(self) -> frozenset[int]:
        """The last offset of every known producer's last batch (what the log cleaner must
        keep for this state to be rebuilt from the log)."""
        return frozenset(e.batches[-1][3] for e in self._producers.values() if e.batches)

    def epoch_of(self, pid: int) -> int:
        entry = self._producers.get(pid)
        return -1 if entry is None else entry.epoch

    def retained_batches(self) -> list[tuple[int, int, int, int, int, int]]:
        """(pid, epoch, first seq, last seq, first offset, last offset) of every retained
        batch, oldest first per producer: what a migration hands to the diskless log."""
        return [(pid, e.epoch, *b) for pid, e in sorted(self._producers.items()) for b in e.batches]

    def forget(self, pid: int) -> None:
        """Drop a producer's state (a migration replaces it with a newer one)."""
        self._producers.pop(pid, None)
        self._markers.pop(pid, None)
        self._verifying.pop(pid, None)

    def load(self, batches: Iterable[tuple[int, int, int, int, int]]) -> None:
        """(pid, epoch, first seq, count, base offset) of the log's batches, in order."""
        for pid, epoch, seq, count, base in batches:
            self.update(pid, epoch, seq, count, base)

    def truncate_from(self, offset: int) -> None:
        """The log was cut at ``offset``: forget batches at or after it."""
        for pid in list(self._producers):
            entry = self._producers[pid]
            while entry.batches and entry.batches[-1][2] >= offset:
                entry.batches.pop()
            if not entry.batches:
                del self._producers[pid]
        # A marker cut off is forgotten with it (the number of the one before is not kept:
        # until the next marker this producer's numbers are unchecked).
        for pid in [p for p, (_n, at) in self._markers.items() if at >= offset]:
            del self._markers[pid]

    def snapshot(self, upto: int) -> dict[str, list]:  # type: ignore[type-arg]
        """The state as of offset ``upto`` (batches ending before it), JSON-ready: what a
        tiered segment ending at ``upto - 1`` carries (Kafka copies a producer snapshot
        with each segment), for a replica that will never hold those batches locally.
        Producers with no batch left below ``upto`` are not in it (their retries are then
        accepted as new, as for a producer whose state expired)."""
        out = {}
        for pid, entry in self._producers.items():
            kept = [b for b in entry.batches if b[3] < upto]
            if kept:
                out[str(pid)] = [entry.epoch, kept]
        return out

    def merge_older(self, snapshot: dict[str, list]) -> int:  # type: ignore[type-arg]
        """Add the producers of an older ``snapshot`` this state does not know (the ones it
        knows wrote since: their entry here is newer). Returns how many were added."""
        added = 0
        for pid_text, (epoch, batches) in snapshot.items():
            pid = int(pid_text)
            if pid in self._producers:
                continue
            entry = self._producers[pid] = _Entry(int(epoch))
            entry.batches.extend(tuple(int(x) for x in b) for b in batches)  # type: ignore[misc]
            added += 1
        return added
