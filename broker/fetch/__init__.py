"""The read path: the Fetch handler, its slots and budget, ListOffsets and
OffsetForLeaderEpoch."""
