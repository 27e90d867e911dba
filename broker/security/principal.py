"""Kafka principals ("User:alice"): what authentication yields and ACLs are written for.

Until a connection authenticates (or on a PLAINTEXT listener) it is ANONYMOUS, as in Kafka.
"""

from __future__ import annotations

USER_TYPE = "User"
ANONYMOUS = f"{USER_TYPE}:ANONYMOUS"


def user(name: str) -> str:
    return f"{USER_TYPE}:{name}"


def user_of(principal: str) -> str:
    """The user name client quotas are keyed by: the principal's name (User:alice -> alice)."""
    kind, _, name = principal.partition(":")
    return name if kind == USER_TYPE else principal
