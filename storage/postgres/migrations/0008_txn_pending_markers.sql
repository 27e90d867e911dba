-- Classic partitions whose transaction markers are still to be sent (storage/transactions/:
-- Kafka's PrepareCommit/PrepareAbort). sluice_txn_complete records them in the transaction
-- that records the outcome; the coordinator deletes them once the leaders acknowledged, and
-- resends what is left after a failover. While an id has any, InitProducerId,
-- AddPartitionsToTxn and EndTxn answer 51 CONCURRENT_TRANSACTIONS.

CREATE TABLE txn_pending_markers (
    transactional_id text COLLATE "C" NOT NULL,
    topic_id uuid NOT NULL,
    partition integer NOT NULL,
    PRIMARY KEY (transactional_id, topic_id, partition)
);

-- sluice_txn_complete takes the pending partitions too (two more parameters): the one
-- without them goes.
DROP FUNCTION IF EXISTS sluice_txn_complete(
    text, bigint, integer, boolean, boolean, text, bigint, integer, uuid[], integer[],
    bigint[], bigint[], bigint[], bigint
);
