-- See sluice_txn_partition_topics.
CREATE OR REPLACE FUNCTION sluice_txn_partition_numbers(p_id text) RETURNS integer[]
LANGUAGE sql STABLE AS $$
    SELECT coalesce(array_agg(p.partition ORDER BY p.topic_id, p.partition), '{}')
    FROM txn_partitions p WHERE p.transactional_id = p_id
$$;
