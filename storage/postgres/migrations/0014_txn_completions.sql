-- How many transactions an id has completed: each completion's number goes in its classic
-- markers (as their coordinator epoch) so that a partition leader can refuse a late copy
-- of an earlier transaction's marker (TransactionState.completions).
ALTER TABLE transactions ADD COLUMN completions integer NOT NULL DEFAULT 0;
-- sluice_txn_complete also answers the number (r_completions): a new return type, so the
-- old function goes first.
DROP FUNCTION IF EXISTS sluice_txn_complete(
    text, bigint, integer, boolean, boolean, text, bigint, integer, uuid[], integer[],
    bigint[], bigint[], bigint[], bigint, uuid[], integer[], bigint
);
