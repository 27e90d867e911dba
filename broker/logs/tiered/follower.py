"""A follower whose fetch offset lies in the leader's tiered part (the leader answered
OFFSET_MOVED_TO_TIERED_STORAGE): it does not fetch those offsets again. As Kafka's
follower does, it asks the leader's local log start (ListOffsets, EARLIEST_LOCAL), takes
the epochs of the offsets below it and the producers' state from the remote segments that
end there, restarts its local log at that offset (``storage.tiered.follower``) and
replicates from it.

The remote segments chained back from the leader's local log start are the leader's
lineage: each is the newest copy (largest copying epoch) holding the offset just before
the next one, with epochs no newer than where that one starts; a discarded lineage's
orphan never wins against the leader's own copy of the same offsets (copied later, by a
newer epoch).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from broker.logs.classic.partition import ClassicPartition
from broker.logs.classic.producer_state import ProducerState
from broker.logs.tiered.snapshot import parse
from storage.tiered.follower import start_from_remote
from storage.tiered.lineage import FollowerStart
from storage.tiered.metadata import EpochVector, RemoteSegment, SegmentState
from storage.tiered.reader import RemoteReader

log = logging.getLogger(__name__)


def chain(
    segments: Sequence[RemoteSegment], local_start: int, max_epoch: int
) -> list[RemoteSegment]:
    """The segments chained back from ``local_start - 1``, newest first (none copied by an
    epoch past ``max_epoch``)."""
    finished = [
        s
        for s in segments
        if s.state is SegmentState.COPY_SEGMENT_FINISHED and s.leader_epoch <= max_epoch
    ]
    target, bound = local_start - 1, max_epoch
    out: list[RemoteSegment] = []
    while target >= 0:
        covering = [
            s
            for s in finished
            if s.start_offset <= target <= s.end_offset and s.epoch_at(target) <= bound
        ]
        if not covering:
            break
        s = max(covering, key=lambda c: (c.leader_epoch, c.end_offset))
        out.append(s)
        bound = s.epochs[0][0]
        target = s.start_offset - 1
    return out


def chain_to(segments: Sequence[RemoteSegment], local_start: int, max_epoch: int) -> EpochVector:
    """The epoch entries of the tiered offsets below ``local_start``, from ``chain``."""
    starts: dict[int, int] = {}
    target = local_start - 1
    for s in chain(segments, local_start, max_epoch):
        for epoch, first in s.epochs:
            if first <= target:
                starts[epoch] = min(first, starts.get(epoch, first))
        target = s.start_offset - 1
    out: list[tuple[int, int]] = []
    for epoch, first in sorted(starts.items()):
        if out and first <= out[-1][1]:
            continue  # contradicts a newer entry's start: not this lineage
        out.append((epoch, first))
    return tuple(out)


async def start_after_tiered(
    p: ClassicPartition,
    segments: Sequence[RemoteSegment],
    leader_local_start: int,
    reader: RemoteReader,
) -> bool:
    """Restart ``p``'s log at the leader's local log start with the tiered epochs and the
    producers' state of the segment ending there; False when its log already reaches there
    (nothing done)."""
    epochs = chain_to(segments, leader_local_start, p.leader_epoch)
    last = chain(segments, leader_local_start, p.leader_epoch)[:1]
    state = parse(await reader.producer_snapshot(last[0]) if last else b"")
    if not start_from_remote(p.log, FollowerStart(leader_local_start, epochs)):
        return False
    p.producers = ProducerState()
    p.producers.merge_older(state.producers)
    p.txns.clear()
    # Transactions open at the new start: their markers, fetched next, close them.
    p.txns.ongoing.update(state.ongoing)
    p.tiered_aborted_loaded = False  # read from the segments if a consumer needs them
    p.high_watermark = max(p.high_watermark, leader_local_start)
    log.info(
        "%s-%d: starting after the tiered part of the log, at %d (epochs %s)",
        p.topic,
        p.index,
        leader_local_start,
        list(epochs),
    )
    return True
