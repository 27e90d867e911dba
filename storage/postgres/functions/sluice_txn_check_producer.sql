-- The checks txn_add, txn_commit_offsets and txn_complete share: 49 for an unknown id or
-- another producer id, 90 for another epoch.
CREATE OR REPLACE FUNCTION sluice_txn_check_producer(
    t transactions, p_found boolean, p_pid bigint, p_epoch integer
) RETURNS integer
LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN NOT p_found OR t.producer_id <> p_pid THEN 49
                WHEN t.producer_epoch <> p_epoch THEN 90
                ELSE 0 END
$$;
