"""Transactions (exactly-once produce and consume-transform-produce).

- ``producer_ids``: producer ids of idempotent producers without a transactional id.
- ``txn_coordinator``: the transaction coordinator — InitProducerId for transactional ids,
  adding partitions and groups, ending transactions with markers, aborting timed-out ones.
- ``txn_marker_writer``: one object of control batches per ended transaction, committed
  with the outcome in one coordinator-database transaction.
- the handlers: ``init_producer_id`` (InitProducerId), ``transactions_handler``
  (AddPartitionsToTxn, AddOffsetsToTxn, EndTxn, TxnOffsetCommit, DescribeProducers,
  DescribeTransactions, ListTransactions) and ``write_txn_markers`` (WriteTxnMarkers).

State lives in the batch coordinator's database (storage/transactions/), so every
broker can serve any transactional id; placement (FindCoordinator) only spreads the
clients and the timeout work.
"""
