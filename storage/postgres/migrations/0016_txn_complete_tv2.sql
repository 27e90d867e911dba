-- KIP-890 part 2 (transaction version 2): sluice_txn_complete takes p_tv2 and answers the
-- producer id and epoch to go on with (r_producer_id, r_producer_epoch): a new signature
-- and return type, so the old function goes first.
DROP FUNCTION IF EXISTS sluice_txn_complete(
    text, bigint, integer, boolean, boolean, text, bigint, integer, uuid[], integer[],
    bigint[], bigint[], bigint[], bigint, uuid[], integer[], bigint
);
