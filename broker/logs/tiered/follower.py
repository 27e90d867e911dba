"""A follower of a tiered partition starts after the tiered part of its leader's lineage
(seeds/002, "remote end offset resolution on become-follower"): the offsets already
tiered are not replicated from the leader again. Where it starts is "the last offset of
the latest tiered segment according to the current replica lineage" plus one
(``storage.tiered.lineage.follower_start``): not the largest tiered offset (an orphan of
a discarded lineage may reach further), not the leader's local log start (a leader keeps
local copies of tiered segments until local retention deletes them).

The lineage is the leader's: the follower learns the leader's epoch history with Kafka's
OffsetForLeaderEpoch (``leader_histories``, as Kafka's follower asks the leader for the
epoch of its local log start when it builds its remote log auxiliary state), reads the
remote segments from the remote metadata, and restarts its local log there with the
epochs of the tiered offsets and the producers' state of the segment ending there
(``storage.tiered.follower``).

It is resolved when a follower has truncated to its leader's log (become-follower) and
the leader's last tiered offset (ListOffsets LATEST_TIERED, KIP-1005) is at or past the
follower's log end, and when the leader answers a fetch OFFSET_MOVED_TO_TIERED_STORAGE.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Sequence

from broker.logs.classic.partition import ClassicPartition
from broker.logs.classic.producer_state import ProducerState
from broker.logs.tiered.snapshot import parse
from storage.classic.epoch_cache import UNDEFINED_EPOCH
from storage.tiered.follower import start_from_remote
from storage.tiered.lineage import FollowerStart, History
from storage.tiered.reader import RemoteReader

log = logging.getLogger(__name__)

# OffsetForLeaderEpoch for (partition, epoch) pairs, one per partition: (error, epoch,
# end offset) by (topic, partition) (the replica fetcher's ``_ask_epochs``).
AskEpochs = Callable[
    [list[tuple[ClassicPartition, int]]], Awaitable[dict[tuple[str, int], tuple[int, int, int]]]
]
# A leader has at most one epoch cache entry per epoch: the walk below ends well before.
MAX_ROUNDS = 100_000


async def leader_histories(
    ask: AskEpochs, wants: Sequence[tuple[ClassicPartition, int]]
) -> list[History | None]:
    """The leader's epoch history of each partition from epoch ``floor`` on (``wants``:
    (partition, floor) pairs), asked of the leader one epoch per round, all partitions in
    each round; None where the leader would not say (stale epochs on either side).

    OffsetForLeaderEpoch(e) answers the leader's largest epoch <= e and where it ended (the
    next epoch's start, or the log end for its latest): asking the current epoch gives the
    log end, asking one below an epoch gives that epoch's start and the epoch before it.
    Asked below its oldest epoch, a leader answers the asked epoch with its oldest epoch's
    start (Kafka's rule): an epoch that would start where the last one found starts is not
    in the history, and the walk ends there."""
    out: list[History | None] = [None] * len(wants)
    log_end: dict[int, int] = {}
    found: dict[int, list[tuple[int, int]]] = {}  # newest first
    asking: dict[int, int] = {}  # index in wants -> epoch asked next
    first = await ask([(p, p.leader_epoch) for p, _floor in wants])
    for i, (p, _floor) in enumerate(wants):
        error, epoch, end = first.get((p.topic, p.index), (-1, UNDEFINED_EPOCH, -1))
        if error or epoch == UNDEFINED_EPOCH:
            continue
        log_end[i], found[i] = end, []
        asking[i] = epoch
    for _round in range(MAX_ROUNDS):
        done = [i for i, epoch in asking.items() if epoch <= 0]
        for i in done:
            # Epoch 0 is the oldest there is, and may not be in the history at all (asked,
            # the leader answers alike): recorded from 0 unless the last epoch found starts
            # at 0. As the first entry, only its end is checked, which is right either way.
            del asking[i]
            if not found[i] or found[i][-1][1] > 0:
                found[i].append((0, 0))
        if not asking:
            break
        order = list(asking)
        answers = await ask([(wants[i][0], asking[i] - 1) for i in order])
        for i in order:
            p, floor = wants[i]
            error, before, start = answers.get((p.topic, p.index), (-1, UNDEFINED_EPOCH, -1))
            if error or before == UNDEFINED_EPOCH:
                del asking[i], found[i]
                continue
            entries = found[i]
            if entries and start >= entries[-1][1]:
                del asking[i]  # below the leader's oldest epoch: the walk is over
                continue
            entries.append((asking[i], start))
            if asking[i] < floor:
                # An epoch older than any in the remote segments, as the first entry: the
                # ones from the floor on are all checked (the first is not, see lineage).
                del asking[i]
            else:
                asking[i] = before
    for i, entries in found.items():
        if entries and i not in asking:
            out[i] = History(tuple(reversed(entries)), log_end[i])
    return out


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
