"""Consumer groups: Kafka's classic group protocol, coordinated by one broker per group.

- ``group.py``: one group's members and state (Empty → PreparingRebalance →
  CompletingRebalance → Stable, and Dead), protocol selection;
- ``coordinator.py``: the state machine driven by JoinGroup, SyncGroup, Heartbeat and
  LeaveGroup, with its session, rebalance and initial-delay timers;
- ``offsets.py``: committed offsets (validation against the group, persistence in the
  :class:`storage.group_store.GroupStore`, expiry) and the admin views;
- ``placement.py``: which live broker coordinates a group;
- ``consumer_protocol.py``: the subscribed topics inside consumer member metadata.

Membership is in memory only. A broker that becomes a group's coordinator starts with
an empty group (its members rejoin); committed offsets are always in the database.
"""
