-- Transactions (storage/transactions/): the transaction coordinator's state and, per
-- partition, the open transactions (the last stable offset) and the aborted ones (what
-- read_committed fetches list). Same tables and semantics as the SQLite backend
-- (storage/transactions/sqlite.py), held to by tests/unit/test_transactions_contract.py.
--
-- Locking extends 0001's discipline: `logs` rows first (sorted, sluice_lock_logs), then
-- `transactions` rows. commit_file takes the rows of its transactional producers FOR
-- SHARE after its logs locks; txn_complete locks its markers' logs, then its transaction
-- FOR UPDATE; txn_init/txn_add/txn_commit_offsets lock only their transaction row (and
-- txn_init then producer_id_blocks). `open_txns` and `aborted_txns` rows of a partition
-- are only written under its `logs` row lock; `txn_partitions`, `txn_groups` and
-- `txn_offsets` rows only under their `transactions` row lock. So brokers never deadlock.
--
-- Error codes (Kafka's): 47 INVALID_PRODUCER_EPOCH, 48 INVALID_TXN_STATE,
-- 49 INVALID_PRODUCER_ID_MAPPING, 51 CONCURRENT_TRANSACTIONS, 90 PRODUCER_FENCED.

-- ------------------------------------------------------------------------ tables

-- COLLATE "C": ids sort by bytes, as in SQLite, whatever the database's locale.
CREATE TABLE transactions (
    transactional_id text COLLATE "C" PRIMARY KEY,
    producer_id bigint NOT NULL,
    producer_epoch integer NOT NULL,
    state text NOT NULL CHECK (state IN ('Empty', 'Ongoing', 'CompleteCommit', 'CompleteAbort')),
    timeout_ms bigint NOT NULL,
    started_ms bigint NOT NULL,
    updated_ms bigint NOT NULL
);
-- commit_file verifies a transactional batch by its producer id. An id belongs to one
-- transactional id only (ids come from one counter); not UNIQUE because txn_init inserts
-- a new id's row (its lock) before it draws the producer id.
CREATE INDEX transactions_producer ON transactions (producer_id);
-- txn_expired reads only the ongoing ones, oldest first.
CREATE INDEX transactions_ongoing ON transactions (started_ms) WHERE state = 'Ongoing';

CREATE TABLE txn_partitions (
    transactional_id text COLLATE "C" NOT NULL,
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    PRIMARY KEY (transactional_id, topic_id, partition)
);

CREATE TABLE txn_groups (
    transactional_id text COLLATE "C" NOT NULL,
    group_id text COLLATE "C" NOT NULL,
    PRIMARY KEY (transactional_id, group_id)
);

-- TxnOffsetCommit's offsets until the transaction ends (then group_offsets, or gone).
CREATE TABLE txn_offsets (
    transactional_id text COLLATE "C" NOT NULL,
    group_id text COLLATE "C" NOT NULL,
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    committed_offset bigint NOT NULL,
    leader_epoch integer NOT NULL,
    metadata text NOT NULL,
    commit_timestamp bigint NOT NULL,
    PRIMARY KEY (transactional_id, group_id, topic_id, partition)
);

-- Per partition, the producers with an open transaction and where it began.
CREATE TABLE open_txns (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    producer_id bigint NOT NULL,
    first_offset bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, producer_id)
);
-- The last stable offset is min(first_offset) of a partition: one index probe.
CREATE INDEX open_txns_first ON open_txns (topic_id, partition, first_offset);

-- Keyed by the abort marker's offset (unique in its partition): fetches ask
-- "last_offset >= x". last_stable_offset is the partition's LSO just after the marker
-- (Kafka's AbortedTxn keeps it too): it bounds that scan (sluice_find_batches).
CREATE TABLE aborted_txns (
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    last_offset bigint NOT NULL,
    producer_id bigint NOT NULL,
    first_offset bigint NOT NULL,
    last_stable_offset bigint NOT NULL,
    PRIMARY KEY (topic_id, partition, last_offset)
);

-- ------------------------------------------------------------------------ 0001's, extended

-- commit_file and find_batches gain an argument: the old signatures go (an overload left
-- behind would let a batch skip the verification).
DROP FUNCTION IF EXISTS sluice_commit_file(
    text, bigint, integer, bigint, uuid[], integer[], bigint[], bigint[], bigint[], bigint[],
    smallint[], bigint[], integer[], bigint[]);
DROP FUNCTION IF EXISTS sluice_find_batches(uuid[], integer[], bigint[], bigint[], bigint, integer);
