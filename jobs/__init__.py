"""PySpark jobs over committed batches: analytics, object merging and key compaction.

The driver plans from ONE consistent coordinator snapshot (``BatchCoordinator.list_batches``)
and splits it into tasks of object byte ranges; executors fetch those ranges from the
object store in Python (no ``s3a://``: see DESIGN §5), decode record batches and either
yield rows (analytics) or write rewritten objects and swap batch pointers to them with one
coordinator transaction per object (``BatchCoordinator.replace_batches``).

Modules: ``plan`` (snapshots and task splitting), ``runtime`` (per-process storage
clients), ``fetch`` (coalesced ranged reads), ``decode`` (RecordBatch v2 decoding and
rewriting), ``read`` (records as a Spark DataFrame), ``analytics``, ``merge``, ``compact``,
``spark`` (session), ``cli`` (``sluice jobs ...``), ``schedule`` (periodic runs).
"""
