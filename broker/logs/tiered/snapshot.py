"""What a tiered segment carries besides its log and indexes (its ``producer-snapshot``
object): the idempotent producers' state and the transactions open as of its end, and the
transactions aborted by a marker inside it (Kafka's producer snapshot and transaction
index of the segment). A
replica that never holds those batches locally — a follower started after the tiered part,
a replica restarted after local retention — takes them from here."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from storage.classic.txn_index import AbortedTxn

if TYPE_CHECKING:
    from broker.logs.classic.partition import ClassicPartition


def segment_state(p: ClassicPartition, start: int, upto: int) -> bytes:
    """The snapshot of the segment holding offsets [start, upto)."""
    aborted = [
        [a.producer_id, a.first_offset, a.last_offset]
        for a in p.txns.aborted
        if start <= a.last_offset < upto
    ]
    # Transactions open at ``upto`` (their marker comes later): still open now, or aborted
    # after it (committed ones need not be known: their marker only closes them).
    ongoing = {pid: first for pid, first in p.txns.ongoing.items() if first < upto}
    for a in p.txns.aborted:
        if a.first_offset < upto <= a.last_offset:
            ongoing.setdefault(a.producer_id, a.first_offset)
    body = {
        "producers": p.producers.snapshot(upto),
        "aborted": aborted,
        "ongoing": [[pid, first] for pid, first in sorted(ongoing.items())],
    }
    return json.dumps(body, separators=(",", ":")).encode()


@dataclass(frozen=True, slots=True)
class SegmentState:
    producers: dict[str, Any]  # ProducerState.snapshot
    aborted: list[AbortedTxn]  # aborted by a marker in the segment
    ongoing: dict[int, int]  # producer id -> first offset, open at the segment's end


def parse(data: bytes) -> SegmentState:
    """A segment's snapshot; empty for a segment copied without one."""
    try:
        body = json.loads(data or b"{}")
    except ValueError:
        body = {}  # unreadable: the segment's records are still served
    producers = body.get("producers", {})
    aborted = [
        AbortedTxn(int(pid), int(first), int(last)) for pid, first, last in body.get("aborted", [])
    ]
    ongoing = {int(pid): int(first) for pid, first in body.get("ongoing", [])}
    return SegmentState(producers, aborted, ongoing)
