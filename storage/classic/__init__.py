"""Classic topics' storage engine: each broker's own log segments for its replicas.

The second storage engine beside the diskless one (object store + batch coordinator).
Data flows:

    produce (leader) ──► log.Log.append_as_leader ──► segment.Segment (.log + .index + .timeindex)
    replica fetch (follower) ──► log.Log.append_as_follower (offsets as the leader gave them)
    fetch / ListOffsets ──► log.Log.read / offset_for_timestamp
    leader change ──► epoch_cache.EpochCache (leader-epoch-checkpoint) ──► Log.truncate_to

- ``batches``: walking stored record batches (framing and CRC), shared by recovery and reads.
- ``index``: the sparse offset and time indexes of one segment.
- ``segment``: one ``<base offset>.log`` file and its indexes.
- ``log``: a partition's segments: append, read, roll, truncate, retention, recovery.
- ``epoch_cache``: leader epoch → start offset, and the divergence point of KIP-101/279.
"""
