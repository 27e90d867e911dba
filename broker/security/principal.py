"""Kafka principals ("User:alice"): what authentication yields and ACLs are written for.

Until a connection authenticates (or on a PLAINTEXT listener) it is ANONYMOUS, as in Kafka.
"""

from __future__ import annotations

USER_TYPE = "User"
ANONYMOUS = f"{USER_TYPE}:ANONYMOUS"


def user(name: str) -> str:
    return f"{USER_TYPE}:{name}"
