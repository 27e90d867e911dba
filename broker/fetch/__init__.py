"""The read path's handlers: Fetch, ListOffsets and OffsetForLeaderEpoch. The slots and
budget a fetch hands to the partition logs are theirs (``broker.logs.fetch_slots``)."""
