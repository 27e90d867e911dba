"""Replication throttling, as Kafka's ReplicationQuotaManager: a reassignment (or a
migration) copying a partition to a new replica must not starve the produce path.

- The rates are the dynamic broker configs ``leader.replication.throttled.rate`` (bytes/s a
  leader sends to throttled followers) and ``follower.replication.throttled.rate`` (bytes/s
  a follower fetches for throttled partitions), per broker or as the cluster default
  (controller.broker_config_admin); unset: no throttle.
- Which replicas are throttled is the topic's ``leader.replication.throttled.replicas`` /
  ``follower.replication.throttled.replicas``: ``partition:broker`` pairs, or ``*`` for every
  replica of the topic. A leader throttles partition p if ``p:<itself>`` is in the leader
  list; a follower if ``p:<itself>`` is in the follower list.
- Only a replica out of the ISR is throttled (catching up); an in-sync one never is, so
  acks=all never waits on a throttle.
- Over the rate, a leader answers a throttled follower's partition without records (its
  fetch position still counts) and a follower leaves throttled partitions out of its next
  fetch; the rate is measured over ``WINDOWS`` one-second windows (Kafka's
  replication.quota.window.num and .size.seconds defaults: 11 and 1).
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable
from functools import lru_cache

WINDOWS = 11
WINDOW_S = 1.0
UNTHROTTLED = 2**63 - 1


class ReplicationQuota:
    def __init__(
        self, rate: Callable[[], int], clock: Callable[[], float] = time.monotonic
    ) -> None:
        """``rate()``: the current bound in bytes/s (read at each check: it can change
        at run time)."""
        self._rate = rate
        self._clock = clock
        self._windows: deque[list[float]] = deque()  # [start, bytes], oldest first

    def _trim(self, now: float) -> None:
        while self._windows and self._windows[0][0] <= now - WINDOWS * WINDOW_S:
            self._windows.popleft()

    def record(self, size: int) -> None:
        """``size`` bytes of throttled replication were sent (leader) or fetched (follower)."""
        if size <= 0:
            return
        now = self._clock()
        self._trim(now)
        if not self._windows or now - self._windows[-1][0] >= WINDOW_S:
            self._windows.append([now, 0.0])
        self._windows[-1][1] += size

    def measured(self) -> float:
        """Bytes per second over the kept windows (as Kafka's Rate: at least the span of
        all but one window, so one burst after a quiet time is not read as a flood)."""
        now = self._clock()
        self._trim(now)
        if not self._windows:
            return 0.0
        elapsed = max(now - self._windows[0][0], (WINDOWS - 1) * WINDOW_S)
        return sum(w[1] for w in self._windows) / elapsed

    def exceeded(self) -> bool:
        bound = self._rate()
        return bound < UNTHROTTLED and self.measured() > bound


@lru_cache(maxsize=1024)
def _parse(value: str) -> frozenset[tuple[int, int]] | None:
    """The pairs of a throttled-replicas list; None for ``*`` (all of them)."""
    if value.strip() == "*":
        return None
    pairs = set()
    for item in value.split(","):
        item = item.strip()
        if not item:
            continue
        partition, _, broker = item.partition(":")
        try:
            pairs.add((int(partition), int(broker)))
        except ValueError:
            continue  # validated when set; an old value is read leniently
    return frozenset(pairs)


def throttled(replicas: str | None, partition: int, broker: int) -> bool:
    """Whether a topic's throttled-replicas list names ``partition`` on ``broker``."""
    if not replicas:
        return False
    pairs = _parse(replicas)
    return pairs is None or (partition, broker) in pairs
