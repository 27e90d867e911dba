"""What a tiered segment carries besides its log and indexes (its ``producer-snapshot``
object): the idempotent producers' state as of its end and the transactions aborted by a
marker inside it (Kafka's producer snapshot and transaction index of the segment). A
replica that never holds those batches locally — a follower started after the tiered part,
a replica restarted after local retention — takes them from here."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from storage.classic.txn_index import AbortedTxn

if TYPE_CHECKING:
    from ..classic.partition import ClassicPartition


def segment_state(p: ClassicPartition, start: int, upto: int) -> bytes:
    """The snapshot of the segment holding offsets [start, upto)."""
    aborted = [
        [a.producer_id, a.first_offset, a.last_offset]
        for a in p.txns.aborted
        if start <= a.last_offset < upto
    ]
    body = {"producers": p.producers.snapshot(upto), "aborted": aborted}
    return json.dumps(body, separators=(",", ":")).encode()


def parse(data: bytes) -> tuple[dict[str, Any], list[AbortedTxn]]:
    """(producers, aborted transactions) of a snapshot; empty for a segment copied
    without one."""
    try:
        body = json.loads(data or b"{}")
    except ValueError:
        return {}, []  # unreadable: the segment's records are still served
    producers = body.get("producers", {})
    aborted = [
        AbortedTxn(int(pid), int(first), int(last)) for pid, first, last in body.get("aborted", [])
    ]
    return producers, aborted
