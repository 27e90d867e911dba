"""Transactions (exactly-once produce and consume-transform-produce).

- ``coordinator``: the transaction coordinator — InitProducerId for transactional ids,
  adding partitions and groups, ending transactions with markers, aborting timed-out ones.
- ``markers``: one object of control batches per ended transaction, committed with the
  outcome in one coordinator-database transaction.

State lives in the batch coordinator's database (storage/transactions/), so every
broker can serve any transactional id; placement (FindCoordinator) only spreads the
clients and the timeout work.
"""
