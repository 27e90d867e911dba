"""Tiered storage for classic topics (KIP-405), the foundations: nothing here is wired into
brokers yet.

- ``metadata``: what a remote (tiered) segment is, its states, and the store interface;
  kept in the batch coordinator's database (backends ``metadata.sqlite``,
  ``metadata.postgres``).
- ``lineage``: pure functions deciding which remote segments belong to a leader's history
  (and which are orphans), where copying resumes and where a follower starts.
- ``layout``: object keys of a remote segment's files.
- ``copier``: copies a rolled local segment (log, indexes, epoch vector) to the object store.
- ``deleter``: deletes remote segments (retention, orphans, leftover copy attempts).
- ``reader``: reads record batches at an offset from a remote segment by ranged reads.
- ``follower``: starts a follower's local log after the tiered lineage, adopting its epochs.
"""
