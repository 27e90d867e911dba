"""A partition leader's bookkeeping: follower progress, high watermark, ISR changes.

Pure state, no I/O (the broker feeds it replica fetches; the replication simulator in
tests/unit/classic drives it through leader changes, crashes and truncation):

- a follower's fetch at offset *o* says its log ends at *o* (everything before it is
  replicated); it is *caught up* when *o* reaches the leader's log end;
- the high watermark is the smallest log end among the ISR (the leader's own included)
  and never moves back while this leader leads;
- a follower not caught up for ``replica.lag.time.max.ms`` leaves the ISR; one whose log
  end reached the high watermark (and this leader's first offset, so it has truncated to
  this leader's history) joins again. Both go through the controller (AlterPartition),
  which applies them with a new partition epoch; until then the ISR here is unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(slots=True)
class Progress:
    log_end_offset: int = -1  # unknown until the follower's first fetch
    last_caught_up_ms: float = 0.0


class LeaderState:
    def __init__(
        self,
        me: int,
        replicas: list[int],
        isr: set[int],
        leader_epoch_start: int,
        high_watermark: int,
        now_ms: float,
        lag_max_ms: float,
    ) -> None:
        self.me = me
        self.replicas = replicas
        self.isr = set(isr)
        # The first offset this leader wrote: a follower below it may still hold a tail of
        # an older leader's history (it truncates with OffsetForLeaderEpoch first).
        self.epoch_start = leader_epoch_start
        self.high_watermark = high_watermark
        self.lag_max_ms = lag_max_ms
        # Followers start "caught up" now: a new leader gives them the lag time to fetch.
        self.progress = {r: Progress(-1, now_ms) for r in replicas if r != me}

    def on_fetch(self, replica: int, fetch_offset: int, leader_end: int, now_ms: float) -> None:
        p = self.progress.get(replica)
        if p is None:
            return  # not a replica of this partition
        p.log_end_offset = fetch_offset
        if fetch_offset >= leader_end:
            p.last_caught_up_ms = now_ms

    def advance_high_watermark(self, leader_end: int) -> int:
        ends = [leader_end]
        for r in self.isr:
            if r != self.me:
                ends.append(max(self.progress[r].log_end_offset, 0))
        self.high_watermark = max(self.high_watermark, min(ends))
        return self.high_watermark

    def lag(self, leader_end: int, now_ms: float) -> dict[int, tuple[int | None, float]]:
        """Each follower's lag: (messages, seconds). Messages: the leader's log end minus
        the follower's last fetch offset, None before its first fetch from this leader
        (unknown, not zero). Seconds: since it was last caught up (a new leader counts its
        followers caught up when it starts), what ISR membership is judged by."""
        return {
            r: (
                max(0, leader_end - p.log_end_offset) if p.log_end_offset >= 0 else None,
                max(0.0, now_ms - p.last_caught_up_ms) / 1000,
            )
            for r, p in self.progress.items()
        }

    def to_remove(self, now_ms: float) -> set[int]:
        """ISR members that fell behind for longer than the lag time."""
        return {
            r
            for r in self.isr
            if r != self.me and now_ms - self.progress[r].last_caught_up_ms > self.lag_max_ms
        }

    def to_add(self) -> set[int]:
        """Replicas outside the ISR whose log reached the high watermark on this leader's
        history."""
        return {
            r
            for r, p in self.progress.items()
            if r not in self.isr
            and p.log_end_offset >= self.high_watermark
            and p.log_end_offset >= self.epoch_start
        }
