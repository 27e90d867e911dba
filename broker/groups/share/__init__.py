"""Share groups (KIP-932, "queues for Kafka"): consumers share the partitions of a topic
and each record is delivered to one of them, acknowledged one by one.

- ``membership.py``: ShareGroupHeartbeat on the group's coordinator (join, heartbeat,
  leave, member epochs, session timeout) and ``assignor.py``, Kafka's simple assignor;
- ``partition_state.py``: one share-partition's state machine (start offset, in-flight
  records, acquisition locks, delivery counts, archiving), pure;
- ``partitions.py``: those states as this broker changes them, compare-and-set in the
  coordinator database (``storage.share_groups``), so any broker serves a share fetch;
- ``reader.py``: the partition's log read through the Fetch path (diskless or classic);
- ``sessions.py``: share sessions (ShareSessionEpoch);
- ``handlers.py``: ShareGroupHeartbeat, ShareGroupDescribe, ShareFetch, ShareAcknowledge;
- ``service.py``: the broker's share-group service.
"""
