"""Share sessions (ShareSessionEpoch): epochs as Kafka, and a full cache drops the least
recently used session (a member that died never closes its own)."""

from __future__ import annotations

from uuid import UUID

from kio.schema.errors import ErrorCode

from broker.groups.share.sessions import ShareSessions
from storage.share_groups import ShareKey

K = ShareKey(UUID(int=1), 0)


def test_epochs() -> None:
    sessions = ShareSessions()
    assert sessions.check("g", "m", 1) == (ErrorCode.share_session_not_found, None)
    error, session = sessions.open("g", "m")
    assert not error and session is not None
    sessions.advance(session, [K], [])
    assert sessions.check("g", "m", 2)[0] == ErrorCode.invalid_share_session_epoch
    assert sessions.check("g", "m", 1) == (0, session)
    sessions.advance(session, [], [K])
    assert not session.partitions
    assert sessions.check("g", "m", -1) == (0, session)  # closing: any epoch
    sessions.close(session)
    assert sessions.get("g", "m") is None


def test_a_full_cache_drops_the_least_recently_used_session() -> None:
    sessions = ShareSessions(max_sessions=2)
    _, a = sessions.open("g", "a")
    _, b = sessions.open("g", "b")
    assert a is not None and b is not None
    sessions.advance(a, [], [])  # a used after b
    sessions.advance(b, [], [])
    sessions.advance(a, [], [])
    error, c = sessions.open("g", "c")
    assert not error and c is not None
    assert sessions.get("g", "b") is None and sessions.get("g", "a") is a
