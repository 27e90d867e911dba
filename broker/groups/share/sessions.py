"""Share sessions (KIP-932's ShareSessionEpoch), in this broker's memory: a member's
ShareFetch with epoch 0 opens one with the partitions it names; the next requests
carry epochs 1, 2, ... and add partitions (or forget them) incrementally; epoch -1 closes
it, and the member's acquired records of its partitions are given back. When the cache
is full, opening a session drops the least recently used one."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from kio.schema.errors import ErrorCode

from storage.share_groups import ShareKey

INITIAL_EPOCH = 0
FINAL_EPOCH = -1
MAX_EPOCH = 2**31 - 1


@dataclass(slots=True)
class ShareSession:
    group_id: str
    member_id: str
    next_epoch: int = 1
    partitions: dict[ShareKey, None] = field(default_factory=dict)  # ordered set


class ShareSessions:
    def __init__(self, max_sessions: int = 1000) -> None:
        self.max_sessions = max_sessions
        self._sessions: dict[tuple[str, str], ShareSession] = {}

    def get(self, group_id: str, member_id: str) -> ShareSession | None:
        return self._sessions.get((group_id, member_id))

    def check(self, group_id: str, member_id: str, epoch: int) -> tuple[int, ShareSession | None]:
        """The session a request with ``epoch`` continues (or closes), or its error."""
        if epoch == INITIAL_EPOCH:
            return 0, None
        session = self._sessions.get((group_id, member_id))
        if session is None:
            return int(ErrorCode.share_session_not_found), None
        if epoch != FINAL_EPOCH and epoch != session.next_epoch:
            return int(ErrorCode.invalid_share_session_epoch), None
        return 0, session

    def open(self, group_id: str, member_id: str) -> tuple[int, ShareSession | None]:
        key = (group_id, member_id)
        if key not in self._sessions and len(self._sessions) >= self.max_sessions:
            # A member that died never closes its session: the least recently used one
            # goes (its records' locks run out on their own).
            del self._sessions[next(iter(self._sessions))]
        # Epoch 0 opened it; the request's own advance() makes the next one 1.
        session = self._sessions[key] = ShareSession(group_id, member_id, next_epoch=0)
        return 0, session

    def advance(
        self, session: ShareSession, added: Iterable[ShareKey], forgotten: Iterable[ShareKey]
    ) -> None:
        key = (session.group_id, session.member_id)
        if self._sessions.get(key) is session:  # most recently used last
            del self._sessions[key]
            self._sessions[key] = session
        for key in added:
            session.partitions[key] = None
        for key in forgotten:
            session.partitions.pop(key, None)
        session.next_epoch = 1 if session.next_epoch >= MAX_EPOCH else session.next_epoch + 1

    def close(self, session: ShareSession) -> None:
        self._sessions.pop((session.group_id, session.member_id), None)
