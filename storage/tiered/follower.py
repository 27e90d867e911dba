"""A follower starting from the tiered part of the log (KIP-405's "build remote log aux
state"): instead of fetching from the leader's log start, it starts its local log right
after the remote end of the current lineage and adopts the epochs of the tiered offsets,
so that, should it lead one day, the tiered segments are in its lineage too."""

from __future__ import annotations

from storage.classic.log import Log

from .lineage import FollowerStart


def start_from_remote(log: Log, start: FollowerStart) -> bool:
    """Empty ``log`` and restart it at ``start.offset`` with the adopted epochs; False (and
    nothing done) when nothing is tiered or the local log already reaches that far (it
    then replicates as usual, after the KIP-279 truncation)."""
    if start.offset is None or log.log_end_offset >= start.offset:
        return False
    log.truncate_fully_and_start_at(start.offset)
    for epoch, first in start.epochs:
        # Ascending: each entry is newer than the last, so none is dropped.
        log.epochs.assign(epoch, first)
    return True
