"""The transactions of one classic partition: the open ones' first offsets (the last stable
offset is the smallest, capped by the high watermark) and the aborted ones (Kafka's
``.txnindex``: producer id, first offset, the offset of its ABORT marker).

It is kept from batch headers only (the attributes, the producer id and, for a control
batch, its one record's key): the leader as it appends, a follower as it copies the
leader's batches, every replica when it opens its log (the log itself is the persisted
form; the rebuild reads headers through a mapping, as the producer state's does). So
followers hold the same state as the leader and a new leader serves read_committed at once.
"""

from __future__ import annotations

import bisect
import struct
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from protocol.records import ATTRIBUTES_OFFSET, CONTROL_BIT, HEADER_SIZE, TRANSACTIONAL_BIT

from .record_filter import zigzag_varint

_ATTRIBUTES = struct.Struct(">h")
_PRODUCER_ID = struct.Struct(">q")
PRODUCER_ID_OFFSET = 43
_KEY = struct.Struct(">hh")  # control record key: version, type
_VALUE = struct.Struct(">hi")  # control record value: version, coordinator epoch
ABORT = 0
COMMIT = 1
NOT_A_MARKER = -1


def _marker_key(batch: memoryview) -> tuple[int, int]:
    """(position, length) of the key of a control batch's first record; ValueError or
    struct.error when the bytes do not parse."""
    pos = HEADER_SIZE
    _length, pos = zigzag_varint(batch, pos)
    pos += 1  # record attributes
    _ts, pos = zigzag_varint(batch, pos)
    _delta, pos = zigzag_varint(batch, pos)
    key_length, pos = zigzag_varint(batch, pos)
    return pos, key_length


def marker_type(batch: memoryview) -> int:
    """COMMIT or ABORT for a control batch's first record, NOT_A_MARKER for anything else
    (another control type, or bytes that do not parse: never an exception)."""
    try:
        pos, key_length = _marker_key(batch)
        if key_length < _KEY.size or pos + _KEY.size > len(batch):
            return NOT_A_MARKER
        _version, kind = _KEY.unpack_from(batch, pos)
    except (ValueError, struct.error):  # CorruptRecords is a ValueError
        return NOT_A_MARKER
    return kind if kind in (ABORT, COMMIT) else NOT_A_MARKER


def marker_coordinator_epoch(batch: memoryview) -> int:
    """The coordinator epoch in the value of a marker batch's record (Sluice's classic
    markers carry their transaction's number there); -1 when it does not parse."""
    try:
        pos, key_length = _marker_key(batch)
        value_length, pos = zigzag_varint(batch, pos + max(key_length, 0))
        if value_length < _VALUE.size or pos + _VALUE.size > len(batch):
            return -1
        _version, epoch = _VALUE.unpack_from(batch, pos)
    except (ValueError, struct.error):
        return -1
    return int(epoch)


def batch_txn_fields(batch: memoryview) -> tuple[int, int, int]:
    """(attributes, producer id, marker type) of the batch starting at ``batch[0]``."""
    (attributes,) = _ATTRIBUTES.unpack_from(batch, ATTRIBUTES_OFFSET)
    (pid,) = _PRODUCER_ID.unpack_from(batch, PRODUCER_ID_OFFSET)
    kind = marker_type(batch) if attributes & CONTROL_BIT else NOT_A_MARKER
    return attributes, pid, kind


@dataclass(frozen=True, slots=True)
class AbortedTxn:
    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset


@dataclass
class TxnIndex:
    # producer id -> first offset of its open transaction in this partition
    ongoing: dict[int, int] = field(default_factory=dict)
    # ordered by last_offset (markers are appended in offset order)
    aborted: list[AbortedTxn] = field(default_factory=list)

    def observe(self, attributes: int, pid: int, kind: int, base: int, last: int) -> None:
        """One batch appended at offsets [base, last]."""
        if not attributes & TRANSACTIONAL_BIT or pid < 0:
            return
        if not attributes & CONTROL_BIT:
            self.ongoing.setdefault(pid, base)
            return
        if kind == NOT_A_MARKER:
            return
        first = self.ongoing.pop(pid, None)
        if kind == ABORT and first is not None:
            self.aborted.append(AbortedTxn(pid, first, last))

    def last_stable_offset(self, high_watermark: int) -> int:
        if not self.ongoing:
            return high_watermark
        return min(min(self.ongoing.values()), high_watermark)

    def aborted_between(self, start: int, end: int) -> list[AbortedTxn]:
        """Aborted transactions a read_committed fetch of [start, end) must know about:
        those whose marker is at or after ``start`` and that began before ``end``."""
        i = bisect.bisect_left(self.aborted, start, key=lambda a: a.last_offset)
        return [a for a in self.aborted[i:] if a.first_offset < end]

    def open_transactions(self) -> Iterator[tuple[int, int]]:
        return iter(self.ongoing.items())

    def drop_before(self, log_start: int) -> None:
        """Retention moved the log start: aborted transactions wholly before it go."""
        i = bisect.bisect_left(self.aborted, log_start, key=lambda a: a.last_offset)
        if i:
            del self.aborted[:i]
        for pid in [p for p, first in self.ongoing.items() if first < log_start]:
            # Its data went with retention; its marker is still to come, and read_committed
            # consumers stop at the log start at worst.
            self.ongoing[pid] = log_start

    def merge_aborted(self, older: Iterable[AbortedTxn]) -> int:
        """Add aborted transactions known from elsewhere (a tiered segment's index), keeping
        the list ordered by marker offset; ones already known are skipped. Returns how many
        were added."""
        known = {(a.producer_id, a.last_offset) for a in self.aborted}
        new = [a for a in older if (a.producer_id, a.last_offset) not in known]
        if new:
            self.aborted = sorted([*self.aborted, *new], key=lambda a: a.last_offset)
        return len(new)

    def clear(self) -> None:
        self.ongoing.clear()
        self.aborted.clear()
