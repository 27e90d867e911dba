"""Leader-follower replication of classic topics (their logs: storage/classic/).

- ``leader``: a partition leader's view of its followers — their log end offsets, the high
  watermark, and which replicas join or leave the ISR.

Followers replicate with Kafka's own Fetch (replica id / ReplicaState) and cut divergent
tails with OffsetForLeaderEpoch (storage/classic/epoch_cache.truncation_point).
"""
