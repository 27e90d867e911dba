"""Incremental fetch sessions (KIP-227), as Kafka's FetchSession: a consumer with many
partitions names only those whose fetch position changed, and is answered only about
partitions with something new (records, an error, a moved high watermark, last stable
offset or log start), instead of sending and getting every partition on every fetch.

A request's ``session_id`` / ``session_epoch``:
- epoch -1 (FINAL): a full fetch without a session; a named session is closed first.
- epoch 0 (INITIAL): a full fetch that opens a session (a named one is closed first); the
  answer carries its id (0 when the cache is full: the client then keeps fetching fully).
- epoch n > 0: the session's next fetch: its partitions named here are added or updated,
  those in ``forgotten_topics_data`` removed; every partition of the session is read.
  An unknown id is FETCH_SESSION_ID_NOT_FOUND; another epoch than the one expected
  INVALID_FETCH_SESSION_EPOCH (the client then starts a new session).

Sessions live in this broker's memory: at most ``max.incremental.fetch.session.cache.slots``
sessions, whatever their sizes, as Kafka's FetchSessionCache. When it is full, a new session
takes the place of one unused for two minutes (the least recently used), else of the
smallest session created more than two minutes ago if the new one has more partitions
(Kafka's tryEvict: consumers with many partitions gain the most from a session); otherwise
the fetch goes on without one. A client whose session is gone (a restart, an eviction)
starts over with a full fetch.
"""

from __future__ import annotations

import random
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kio.schema.errors import ErrorCode

FINAL_EPOCH = -1
INITIAL_EPOCH = 0
# Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS: a session unused this long may be
# evicted by any new one; one created less than this long ago is never evicted for size.
EVICTION_S = 120.0


@dataclass(slots=True)
class SessionPartition:
    """One partition of a session: what the client last asked, what it was last told."""

    partition: int
    fetch_offset: int
    partition_max_bytes: int
    current_leader_epoch: int = -1
    last_fetched_epoch: int = -1
    log_start_offset: int = -1
    # Last values answered for it (None: never answered in this session).
    sent: tuple[int, int, int] | None = None


@dataclass(slots=True)
class Session:
    session_id: int
    by_id: bool  # keyed by topic id (Fetch v13+) or by name
    created: float = 0.0  # the cache's clock
    last_used: float = 0.0
    epoch: int = 1  # the epoch the next request must carry
    # (topic key, partition) -> its state, in the order the client named them
    partitions: dict[tuple[Any, int], SessionPartition] = field(default_factory=dict)


@dataclass(slots=True)
class FetchTopic:
    """A request topic as the handler reads it (the request's own, or a session's)."""

    topic: Any  # the name (Fetch < v13)
    topic_id: Any  # the id (Fetch v13+)
    partitions: list[SessionPartition]


@dataclass(slots=True)
class SessionView:
    """One request's session: what to read, and how to answer."""

    error: int = 0
    session: Session | None = None
    incremental: bool = False
    topics: list[FetchTopic] = field(default_factory=list)

    @property
    def session_id(self) -> int:
        return self.session.session_id if self.session is not None else 0

    def include(self, key: Any, entry: dict[str, Any]) -> bool:
        """Whether a partition's answer goes out (every one on a full fetch; on an
        incremental one only what changed), remembering what was answered."""
        if self.session is None:
            return True
        cached = self.session.partitions.get((key, entry["partition_index"]))
        if cached is None:
            return True
        now = (entry["high_watermark"], entry["last_stable_offset"], entry["log_start_offset"])
        changed = cached.sent != now
        cached.sent = now
        if not self.incremental:
            return True
        return bool(
            changed
            or entry["error_code"]
            or entry.get("records")
            or entry.get("preferred_read_replica", -1) >= 0
        )


class FetchSessionCache:
    def __init__(
        self,
        max_sessions: int = 1000,
        eviction_s: float = EVICTION_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._max_sessions = max_sessions
        self._eviction_s = eviction_s
        self._clock = clock
        # Least recently used first.
        self._sessions: OrderedDict[int, Session] = OrderedDict()

    def __len__(self) -> int:
        return len(self._sessions)

    def _close(self, session_id: int) -> None:
        self._sessions.pop(session_id, None)

    def _new_id(self) -> int:
        while True:
            session_id = random.randint(1, 2**31 - 1)
            if session_id not in self._sessions:
                return session_id

    def open(self, request: Any, by_id: bool, replica: bool) -> SessionView:
        """The session a Fetch request belongs to (creating, updating or closing one) and
        the partitions it reads."""
        session_id = int(getattr(request, "session_id", 0) or 0)
        epoch = int(getattr(request, "session_epoch", FINAL_EPOCH))
        asked = _partitions_of(request, by_id)
        if epoch <= INITIAL_EPOCH:
            if session_id:
                self._close(session_id)
            view = SessionView(topics=_topics(asked, by_id))
            # Followers' fetches stay sessionless (Sluice's own replica fetcher sends full
            # fetches, and Kafka's followers with their own sessions never reach Sluice).
            if epoch == INITIAL_EPOCH and not replica and asked:
                view.session = self._create(asked, by_id)
            return view
        session = self._sessions.get(session_id)
        if session is None:
            return SessionView(error=int(ErrorCode.fetch_session_id_not_found))
        if epoch != session.epoch or session.by_id != by_id:
            return SessionView(error=int(ErrorCode.invalid_fetch_session_epoch))
        self._sessions.move_to_end(session_id)
        session.last_used = self._clock()
        for key, part in asked.items():
            old = session.partitions.get(key)
            if old is not None:
                part.sent = old.sent
            session.partitions[key] = part
        for key in _forgotten(request, by_id):
            session.partitions.pop(key, None)
        session.epoch = _next_epoch(session.epoch)
        return SessionView(
            session=session,
            incremental=True,
            topics=_topics(session.partitions, by_id),
        )

    def _create(
        self, asked: dict[tuple[Any, int], SessionPartition], by_id: bool
    ) -> Session | None:
        now = self._clock()
        if len(self._sessions) >= self._max_sessions and not self._evict_for(len(asked), now):
            return None
        session = Session(self._new_id(), by_id, now, now, partitions=dict(asked))
        self._sessions[session.session_id] = session
        return session

    def _evict_for(self, size: int, now: float) -> bool:
        """Make room for a new session of ``size`` partitions in a full cache, as Kafka's
        tryEvict does for a consumer's: the least recently used session if it is stale,
        else the smallest of those created before the eviction time if it is smaller."""
        if not self._sessions:
            return False  # a cache of 0 sessions: every fetch is a full one
        oldest_id, oldest = next(iter(self._sessions.items()))
        if now - oldest.last_used > self._eviction_s:
            self._close(oldest_id)
            return True
        settled = [s for s in self._sessions.values() if now - s.created > self._eviction_s]
        if not settled:
            return False
        victim = min(settled, key=lambda s: (len(s.partitions), s.session_id))
        if size <= len(victim.partitions):
            return False
        self._close(victim.session_id)
        return True


def _next_epoch(epoch: int) -> int:
    # Kafka's nextEpoch: wraps to 1 after INT_MAX (0 and -1 mean a full fetch).
    return 1 if epoch >= 2**31 - 1 else epoch + 1


def _partitions_of(request: Any, by_id: bool) -> dict[tuple[Any, int], SessionPartition]:
    out: dict[tuple[Any, int], SessionPartition] = {}
    for t in request.topics:
        key = t.topic_id if by_id else t.topic
        for p in t.partitions:
            out[(key, int(p.partition))] = SessionPartition(
                int(p.partition),
                int(p.fetch_offset),
                int(p.partition_max_bytes),
                int(getattr(p, "current_leader_epoch", -1)),
                int(getattr(p, "last_fetched_epoch", -1)),
                int(getattr(p, "log_start_offset", -1)),
            )
    return out


def _forgotten(request: Any, by_id: bool) -> list[tuple[Any, int]]:
    out = []
    for t in getattr(request, "forgotten_topics_data", None) or ():
        key = getattr(t, "topic_id", None) if by_id else getattr(t, "topic", None)
        out += [(key, int(p)) for p in t.partitions]
    return out


def _topics(partitions: dict[tuple[Any, int], SessionPartition], by_id: bool) -> list[FetchTopic]:
    topics: dict[Any, FetchTopic] = {}
    for (key, _index), part in partitions.items():
        topic = topics.get(key)
        if topic is None:
            topic = topics[key] = FetchTopic(None if by_id else key, key if by_id else None, [])
        topic.partitions.append(part)
    return list(topics.values())
