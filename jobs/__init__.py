"""PySpark jobs over committed batches: analytics, object merging and key compaction.

The driver plans from ONE consistent coordinator snapshot (``BatchCoordinator.list_batches``)
and splits it into tasks of object byte ranges; executors fetch those ranges from the
object store in Python (no ``s3a://``: see DESIGN §5), decode record batches and either
yield rows (analytics) or write rewritten objects and swap batch pointers to them with one
coordinator transaction per object (``BatchCoordinator.replace_batches``).

Records are read as a read_committed consumer sees them: no control batch, no record of
an aborted transaction, nothing at or past the last stable offset (the snapshot's LSO,
where the oldest transaction still open begins). Merge copies batches, markers included,
as they are; compaction drops aborted records and cleans nothing past the LSO.

Modules: ``plan`` (snapshots and task splitting), ``runtime`` (per-process storage
clients), ``fetch`` (coalesced ranged reads), ``decode`` (RecordBatch v2 decoding and
rewriting), ``read`` (records as a Spark DataFrame), ``analytics``, ``merge``, ``compact``,
``spark`` (session), ``cli`` (``sluice jobs ...``), ``schedule`` (periodic runs).
"""
