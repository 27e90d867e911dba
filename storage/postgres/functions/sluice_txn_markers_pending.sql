-- Whether the id has classic partitions whose transaction markers are still to be sent
-- (txn_pending_markers): while it has, InitProducerId, AddPartitionsToTxn and EndTxn
-- answer 51 CONCURRENT_TRANSACTIONS.
CREATE OR REPLACE FUNCTION sluice_txn_markers_pending(p_id text) RETURNS boolean
LANGUAGE sql STABLE AS $$
    SELECT EXISTS (SELECT 1 FROM txn_pending_markers WHERE transactional_id = p_id)
$$;
