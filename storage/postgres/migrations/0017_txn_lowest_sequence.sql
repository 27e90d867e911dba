-- The lowest sequence a transaction's batches showed in a partition before one was written
-- there (KIP-890's verification, Kafka's VerificationStateEntry): until then a batch with a
-- higher sequence is refused, so the lower one is written first (sluice_commit_file).
ALTER TABLE txn_partitions ADD COLUMN lowest_sequence bigint;
