"""Consumer fetches below a classic partition's local log: served from the remote segment
holding the offset (ranged reads through the broker's block cache), transparently: the
answer is the same record batches the local log held."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kio.schema.errors import ErrorCode

if TYPE_CHECKING:
    from broker.logs.classic.classic_log import ClassicSlot
    from broker.logs.classic.replica_manager import ClassicHost
    from broker.logs.fetch_slots import FetchBudget

log = logging.getLogger(__name__)


async def read_tiered(
    broker: ClassicHost, slots: list[ClassicSlot], budget: FetchBudget, read_committed: bool = False
) -> int:
    """Read ``slots``, consumer slots whose offsets lie in the tiered part only (the
    classic engine picks them: ``ClassicLog.read_below``), in turn, within what the answer
    has left (taken from ``budget``); returns the bytes found."""
    manager = broker.classic.tiering if broker.classic is not None else None
    total = 0
    for slot in slots:
        p = slot.classic
        assert p is not None
        if manager is None:
            continue
        segment = p.remote.segment(slot.offset)
        if segment is None:
            slot.error = int(ErrorCode.offset_out_of_range)
            continue
        room = budget.room(slot.max_bytes)
        if room == 0 and not budget.min_one:
            continue  # the answer is full: no records, no remote read
        limit = p.last_stable_offset if read_committed else p.high_watermark
        if read_committed and not p.tiered_aborted_loaded:
            try:
                await manager.load_tiered_aborted(p)
            except Exception as exc:  # retriable: the consumer fetches again
                log.warning("%s-%d: reading tiered aborted transactions: %r", p.topic, p.index, exc)
                slot.error = int(ErrorCode.kafka_storage_error)
                continue
        try:
            slot.data = await manager.reader.read(
                segment, slot.offset, room, min(limit, segment.end_offset + 1), budget.min_one
            )
        except Exception as exc:  # the store unreachable: retriable for the consumer
            log.warning("%s-%d: remote read at %d failed: %r", p.topic, p.index, slot.offset, exc)
            slot.error = int(ErrorCode.kafka_storage_error)
            continue
        budget.take(len(slot.data))
        total += len(slot.data)
    return total
