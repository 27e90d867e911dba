"""Kafka's rules for a topic name, in one place for the controller (CreateTopics) and the
broker (Metadata, DescribeConfigs and the rest answer INVALID_TOPIC_EXCEPTION for a name
no topic can have, as Kafka does, rather than UNKNOWN_TOPIC_OR_PARTITION)."""

from __future__ import annotations

import re

MAX_NAME_LENGTH = 249
_LEGAL_NAME = re.compile(r"^[a-zA-Z0-9._-]+$")


def topic_name_error(name: str) -> str | None:
    """Why ``name`` is not a legal topic name, or None."""
    if not name or name in (".", ".."):
        return f"Topic name {name!r} is illegal"
    if len(name) > MAX_NAME_LENGTH:
        return f"Topic name is longer than {MAX_NAME_LENGTH} characters"
    if not _LEGAL_NAME.match(name):
        return (
            f"Topic name {name!r} is illegal, it contains a character other than "
            "ASCII alphanumerics, '.', '_' and '-'"
        )
    return None
