-- The epoch a producer had before its last InitProducerId bump: that call's retry (KIP-360:
-- the client never got the answer) gets the same epoch back instead of PRODUCER_FENCED.
-- -1: none (a new producer, or fenced by a coordinator abort).
ALTER TABLE transactions ADD COLUMN last_producer_epoch integer NOT NULL DEFAULT -1;
-- sluice_txn_complete takes p_started_ms (the timeout sweep ends only the transaction it
-- read): the old signature goes.
DROP FUNCTION IF EXISTS sluice_txn_complete(
    text, bigint, integer, boolean, boolean, text, bigint, integer, uuid[], integer[],
    bigint[], bigint[], bigint[], bigint, uuid[], integer[]
);
