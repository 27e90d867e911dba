"""Tiered storage of classic topics on the broker (KIP-405, KIP-950), on top of the
foundations in ``storage.tiered``:

- ``manager``: the per-broker task: a leader copies rolled segments and enforces remote
  retention (and orphans), acts on a KIP-950 disablement and reports it; every replica
  refreshes its view of its tiered part (``broker.logs.classic.remote_view``, held by the
  classic partition; a follower's local retention needs the tiered end too).
- ``tiered_read``: a fetch below the local log start, read from the remote segment;
- ``snapshot``: what a tiered segment carries besides its log (producer state, open and
  aborted transactions), for replicas that never held those batches;
- ``follower``: a follower told OFFSET_MOVED_TO_TIERED_STORAGE starts after the tiered
  part of the log instead of fetching it again.
"""
