"""A follower of a tiered partition starts after the tiered part of its leader's lineage
(seeds/002, "remote end offset resolution on become-follower"): the offsets already
tiered are not replicated from the leader again. Where it starts is "the last offset of
the latest tiered segment according to the current replica lineage" plus one
(``storage.tiered.lineage.follower_start``): not the largest tiered offset (an orphan of
a discarded lineage may reach further), not the leader's local log start (a leader keeps
local copies of tiered segments until local retention deletes them).

The lineage is the leader's: the follower learns the leader's epoch history with Kafka's
OffsetForLeaderEpoch (``broker.logs.classic.replica_fetcher.leader_histories``, as
Kafka's follower asks the leader for the epoch of its local log start when it builds its
remote log auxiliary state), reads the remote segments from the remote metadata, and
restarts its local log there (``start_after_tiered``, called through the tiered part's
``TieringManager.start_follower``) with the epochs of the tiered offsets and the
producers' state of the segment ending there (``storage.tiered.follower``).

It is resolved when a follower has truncated to its leader's log (become-follower) and
the leader's last tiered offset (ListOffsets LATEST_TIERED, KIP-1005) is at or past the
follower's log end, and when the leader answers a fetch OFFSET_MOVED_TO_TIERED_STORAGE.
"""

from __future__ import annotations

import logging

from broker.logs.classic.partition import ClassicPartition
from broker.logs.classic.producer_state import ProducerState
from broker.logs.tiered.snapshot import parse
from storage.tiered.follower import start_from_remote
from storage.tiered.lineage import FollowerStart
from storage.tiered.reader import RemoteReader

log = logging.getLogger(__name__)


async def start_after_tiered(
    p: ClassicPartition, start: FollowerStart, reader: RemoteReader
) -> bool:
    """Restart ``p``'s log at ``start`` with the tiered epochs and the producers' state of
    the lineage segment ending there; False when nothing is tiered or its log already
    reaches there (nothing done: it replicates as usual)."""
    if start.offset is None or p.log.log_end_offset >= start.offset:
        return False
    # Read before the log is emptied: a failed read leaves the replica as it was.
    state = parse(await reader.producer_snapshot(start.last) if start.last else b"")
    if not start_from_remote(p.log, start):
        return False
    p.producers = ProducerState()
    p.producers.merge_older(state.producers)
    p.txns.clear()
    # Transactions open at the new start: their markers, fetched next, close them.
    p.txns.ongoing.update(state.ongoing)
    p.tiered_aborted_loaded = False  # read from the segments if a consumer needs them
    p.high_watermark = max(p.high_watermark, start.offset)
    log.info(
        "%s-%d: starting after the tiered part of the log, at %d (epochs %s)",
        p.topic,
        p.index,
        start.offset,
        list(start.epochs),
    )
    return True
