"""Consumer groups: Kafka's classic group protocol, coordinated by one broker per group.

- ``group.py``: one group's members and state (Empty → PreparingRebalance →
  CompletingRebalance → Stable, and Dead), protocol selection;
- ``group_coordinator.py``: the state machine driven by JoinGroup, SyncGroup, Heartbeat and
  LeaveGroup, with its session, rebalance and initial-delay timers;
- ``held_groups.py``: the groups this broker coordinates, held in memory: ownership as the
  live brokers change, loading and storing their membership snapshots;
- ``offsets.py``: committed offsets (validation against the group, persistence in the
  :class:`storage.groups.GroupStore`, expiry) and the admin views;
- ``placement.py``: which live broker coordinates a group;
- ``persistence.py``: membership snapshots in the group store, so a new coordinator
  takes the group over where the old one left it;
- ``consumer_protocol.py``: the subscribed topics inside consumer member metadata;
- ``group_admin.py``: ListGroups, DescribeGroups and DeleteGroups over live and stored groups;
- the handlers: ``group_membership.py`` (JoinGroup, SyncGroup, Heartbeat, LeaveGroup),
  ``group_offsets_handler.py`` (OffsetCommit, OffsetFetch, OffsetDelete),
  ``group_admin_handler.py`` and ``find_coordinator.py`` (groups and transactional ids).

Membership is in memory, with a snapshot stored at each assignment: a broker that
becomes a group's coordinator loads it and the members go on with their member id,
generation and assignment. Committed offsets are always in the database.
"""
