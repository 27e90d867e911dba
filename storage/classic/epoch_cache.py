"""The leader epoch cache (``leader-epoch-checkpoint``): epoch → first offset it wrote.

Every replica keeps one. A leader records its epoch at its log end when it starts leading
(and a follower copies the epochs of the batches it appends); OffsetForLeaderEpoch answers
from it, and a returning replica uses the answer to cut a tail the new leader never had
(KIP-101, KIP-279) instead of trusting the high watermark. The file is Kafka's checkpoint
format: version line, count line, then ``epoch start_offset`` lines, replaced atomically.
"""

from __future__ import annotations

import bisect
import os
from collections.abc import Callable

UNDEFINED_EPOCH = -1
UNDEFINED_OFFSET = -1
_VERSION = 0


class EpochCache:
    """``path`` None keeps the cache in memory only (the replication simulator)."""

    def __init__(self, path: str | None) -> None:
        self.path = path
        self._epochs: list[int] = []
        self._starts: list[int] = []
        if path is not None and os.path.exists(path):
            self._load()

    def _load(self) -> None:
        assert self.path is not None
        with open(self.path) as f:
            lines = f.read().split("\n")
        if int(lines[0]) != _VERSION:
            raise ValueError(f"{self.path}: unknown checkpoint version {lines[0]}")
        for line in lines[2 : 2 + int(lines[1])]:
            epoch, start = line.split()
            self._epochs.append(int(epoch))
            self._starts.append(int(start))

    def _save(self) -> None:
        if self.path is None:
            return
        body = [str(_VERSION), str(len(self._epochs))]
        body += [f"{e} {s}" for e, s in zip(self._epochs, self._starts, strict=True)]
        tmp = self.path + ".tmp"
        with open(tmp, "w") as f:
            f.write("\n".join(body) + "\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)

    @property
    def entries(self) -> list[tuple[int, int]]:
        return list(zip(self._epochs, self._starts, strict=True))

    @property
    def latest_epoch(self) -> int:
        return self._epochs[-1] if self._epochs else UNDEFINED_EPOCH

    def first_epoch_from(self, offset: int) -> int:
        """The first epoch that started at or after ``offset`` (UNDEFINED_EPOCH: none)."""
        i = bisect.bisect_left(self._starts, offset)
        return self._epochs[i] if i < len(self._epochs) else UNDEFINED_EPOCH

    def assign(self, epoch: int, start_offset: int) -> None:
        """Epoch ``epoch`` wrote from ``start_offset`` on. Entries it contradicts (a
        same-or-newer epoch, or one starting at or after this offset) are dropped first,
        as Kafka does; an epoch already recorded is left as it is."""
        if self._epochs and self._epochs[-1] == epoch and self._starts[-1] <= start_offset:
            return
        keep = len(self._epochs)
        while keep and (self._epochs[keep - 1] >= epoch or self._starts[keep - 1] >= start_offset):
            keep -= 1
        del self._epochs[keep:]
        del self._starts[keep:]
        self._epochs.append(epoch)
        self._starts.append(start_offset)
        self._save()

    def end_offset_for(self, epoch: int, log_end_offset: int) -> tuple[int, int]:
        """OffsetForLeaderEpoch: (the largest epoch <= ``epoch`` known here, the offset
        where it ended: the next epoch's start, or the log end for the latest epoch).
        (-1, -1) for an epoch newer than any known, or when the cache is empty."""
        if epoch == UNDEFINED_EPOCH or not self._epochs:
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if epoch == self._epochs[-1]:
            return epoch, log_end_offset
        higher = bisect.bisect_right(self._epochs, epoch)
        if higher == len(self._epochs):
            return UNDEFINED_EPOCH, UNDEFINED_OFFSET
        if higher == 0:
            # Older than anything here: it ended where the first epoch known began.
            return epoch, self._starts[0]
        return self._epochs[higher - 1], self._starts[higher]

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to ``end_offset``: epochs that started at or after it go."""
        keep = bisect.bisect_left(self._starts, end_offset)
        if keep < len(self._starts):
            del self._epochs[keep:]
            del self._starts[keep:]
            self._save()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved to ``start_offset``: epochs that ended before it go, and the
        one it falls in now starts there."""
        i = bisect.bisect_right(self._starts, start_offset) - 1
        if i < 0:
            return
        if i > 0 or self._starts[0] != start_offset:
            del self._epochs[:i]
            del self._starts[:i]
            self._starts[0] = start_offset
            self._save()


def truncation_point(
    local: EpochCache,
    local_end: int,
    high_watermark: int,
    ask_leader: Callable[[int], tuple[int, int]],
) -> int:
    """Where a follower must cut its log so that it is a prefix of the leader's (KIP-279).

    ``ask_leader(epoch)`` is OffsetForLeaderEpoch: (the leader's largest epoch not newer
    than ``epoch``, where that epoch ended on the leader). Starting from the follower's
    latest epoch: when the follower has the epoch the leader named, both logs are one
    history up to where that epoch ended on the smaller side; when its own largest epoch
    not newer than that one is older still, it asks again about that older epoch (each
    round moves to an older epoch, so this ends). A leader without any epoch leaves only
    the old rule: the high watermark.
    """
    epoch = local.latest_epoch
    if epoch == UNDEFINED_EPOCH:
        return min(high_watermark, local_end)
    while True:
        leader_epoch, leader_end = ask_leader(epoch)
        if leader_epoch == UNDEFINED_EPOCH:
            return min(high_watermark, local_end)
        mine, my_end = local.end_offset_for(leader_epoch, local_end)
        if mine == leader_epoch:
            return min(leader_end, my_end, local_end)
        if mine == UNDEFINED_EPOCH or mine >= epoch:
            # Nothing older to ask about: keep only what the leader vouched for.
            return min(leader_end, local_end)
        epoch = mine
