"""Reading the ``consumer`` protocol's member metadata (ConsumerProtocolSubscription).

The broker never needs a member's metadata to coordinate the group: it is passed to
the leader as opaque bytes, which is why every client-side assignor works. Only
OffsetDelete looks inside, to refuse deleting offsets of topics the group consumes.
Every version of the schema starts with the same fields (version int16, topics as an
array of strings) and none is flexible, so reading those suffices.
"""

from __future__ import annotations

import struct

_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")


def subscribed_topics(metadata: bytes) -> set[str] | None:
    """The topics of a subscription, or None if the bytes are not one."""
    try:
        pos = _I16.size  # version: every version starts with the topics
        if len(metadata) < pos:
            return None
        (count,) = _I32.unpack_from(metadata, pos)
        pos += _I32.size
        if count < 0 or count > len(metadata):
            return None
        topics = set()
        for _ in range(count):
            (length,) = _I16.unpack_from(metadata, pos)
            pos += _I16.size
            if length < 0 or pos + length > len(metadata):
                return None
            topics.add(metadata[pos : pos + length].decode("utf-8"))
            pos += length
        return topics
    except (struct.error, UnicodeDecodeError):
        return None
