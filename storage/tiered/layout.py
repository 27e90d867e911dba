"""Object keys of a remote segment: one prefix per segment, one object per file.

``tiered/<topic id>/<partition>/<segment id>/`` + ``log``, ``index``, ``timeindex``,
``leader-epoch-checkpoint``. The segment id (a uuid, new for every copy attempt) makes
each attempt's objects distinct, so a retried copy never overwrites what a reader may be
reading, and deleting one attempt never touches another. The prefix is outside the
diskless data keys (``storage.objects.is_data_key``): the sweep of orphaned diskless
objects never takes tiered ones.
"""

from __future__ import annotations

from .metadata import RemoteSegment

PREFIX = "tiered"
LOG = "log"
OFFSET_INDEX = "index"
TIME_INDEX = "timeindex"
EPOCHS = "leader-epoch-checkpoint"
# The producers' state as of the segment's end and its aborted transactions (written by
# the broker, which owns both: broker.logs.tiered.snapshot).
PRODUCER_SNAPSHOT = "producer-snapshot"
FILES = (LOG, OFFSET_INDEX, TIME_INDEX, EPOCHS, PRODUCER_SNAPSHOT)


def key(segment: RemoteSegment, file: str) -> str:
    return f"{PREFIX}/{segment.topic_id}/{segment.partition}/{segment.segment_id}/{file}"


def keys(segment: RemoteSegment) -> list[str]:
    return [key(segment, f) for f in FILES]


def epochs_checkpoint(segment: RemoteSegment) -> bytes:
    """The segment's epoch vector in the leader-epoch-checkpoint format (version, count,
    ``epoch start`` lines): what a follower rebuilding its cache from remote data reads."""
    lines = ["0", str(len(segment.epochs))] + [f"{e} {s}" for e, s in segment.epochs]
    return ("\n".join(lines) + "\n").encode()
